"""Unique prompts: a load generator must never measure a prompt cache it did not ask for.

Every request of a run, of every point of a sweep and of every later run against the same
server gets a prompt no other request shares, unless the workload asks for reuse
(`--prefix-groups`, multi-turn). Two mechanisms, both seeded:

* the prompt texts of a point are drawn from a text stream keyed on (seed, run nonce,
  point index), so sweep points and repeated runs draw different words (the lengths and
  the schedule still come from the seed alone, as in `ridgeline simulate`);
* a request that reuses a pool prompt (a duration-bound run cycles its pool) or comes from
  a dataset file gets a per-request tag of `TAG_WORDS` words, derived from a hash of (nonce,
  point, request): synthetic prompts have their first words after any shared prefix
  replaced (one-token words, so the length is kept); file prompts get the tag as a first
  line (a few tokens more, counted by the server's usage report).

The run nonce is random by default and recorded in the trace header
(`dataset.prompt_nonce`); `--prompt-nonce N` repeats a run's texts exactly.

>>> t = PromptTagger(nonce=1, point=0, mode="replace")
>>> t.words("r0") != t.words("r1")
True
>>> t.apply("the of and to in is", 0, "r0").count(" ") == 5
True
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

import numpy as np

from ridgeline.bench.words import WORDS

TAG_WORDS = 4


def new_prompt_nonce() -> int:
    """A fresh 32-bit nonce: different texts from run to run, recorded for reproduction."""
    return secrets.randbits(32)


def text_rng(seed: int, nonce: int, point: int) -> np.random.Generator:
    """The prompt-text stream of one point of one run."""
    return np.random.default_rng([abs(int(seed)), int(nonce), int(point), 0x7EC7])


@dataclass(frozen=True)
class PromptTagger:
    """Makes request `key`'s prompt unique. `mode`: 'replace' (synthetic) or 'prefix' (file)."""

    nonce: int
    point: int
    mode: str = "replace"

    def words(self, key: str) -> list[str]:
        digest = hashlib.blake2b(f"{self.nonce}/{self.point}/{key}".encode(),
                                 digest_size=8).digest()
        n = len(WORDS)
        value = int.from_bytes(digest, "little")
        out = []
        for _ in range(TAG_WORDS):  # 100**4 = 1e8 distinct tags
            value, r = divmod(value, n)
            out.append(WORDS[r])
        return out

    def apply(self, prompt: str, at: int, key: str) -> str:
        """`prompt` with this request's tag at character offset `at` (after a shared prefix)."""
        tag = self.words(key)
        if self.mode == "prefix":
            return " ".join(tag) + "\n" + prompt
        head, tail = prompt[:at], prompt[at:]
        parts = tail.split(" ")
        k = min(len(tag), len(parts))
        return head + " ".join(tag[:k] + parts[k:])


class CacheWatch:
    """Counts the prompt tokens the server says it answered from its cache.

    `asked`: the workload reuses prefixes on purpose (then hits are expected, no warning).
    """

    def __init__(self, asked: bool) -> None:
        self.asked = asked
        self.requests = 0
        self.cached_tokens = 0
        self.prompt_tokens = 0

    # A chat template's fixed head (a block or two) is cached by every server: below this
    # share of all prompt tokens a hit is that head, not a measured prompt.
    THRESHOLD = 0.05

    def record(self, rec: dict) -> None:
        self.prompt_tokens += int(rec.get("prompt_tokens") or 0)
        cached = rec.get("cached_prompt_tokens")
        if cached:
            self.requests += 1
            self.cached_tokens += int(cached)

    def warning(self) -> str | None:
        if self.asked or not self.cached_tokens:
            return None
        share = self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 1.0
        if share < self.THRESHOLD:
            return None
        return (f"the server answered {self.cached_tokens} prompt tokens ({share:.0%} of all) "
                f"of {self.requests} requests from its prefix cache, which this workload did "
                "not ask for: their TTFT is a cached prompt's, not a cold one's (prompts sent "
                "before this run, or a server-side cache of shared text, cause it)")


__all__ = ["TAG_WORDS", "CacheWatch", "PromptTagger", "new_prompt_nonce", "text_rng"]

"""Workloads for `ridgeline bench`: what each request asks for. Seeded and reproducible.

Syntax (`--dataset`):

    synthetic                      prompts of exact lengths drawn from `--prompt`, outputs from
                                   `--output` (the same length syntax as `simulate`)
    sharegpt:path=FILE             ShareGPT JSON: first human turn is the prompt; the reply's
                                   length is the output length unless `--output` is given
    jsonl:path=FILE                one request per line: {"prompt": ...} or {"messages": [...]}
                                   or a bare JSON string; optional "max_tokens"/"output_tokens"
    sonnet:path=FILE,input=550,prefix=200
                                   vLLM's sonnet workload: lines of a poem file; every prompt is
                                   "Pick as many lines as you can from these poem lines:" plus
                                   the file's first lines (the shared prefix, ~`prefix` tokens)
                                   plus lines drawn at random, ~`input` tokens in all (lengths
                                   counted with --tokenizer, or ~4 characters a token)

Shared-prefix groups (`--prefix-groups G --prefix-tokens P`, synthetic only): G distinct
prefixes of P tokens; request i starts with prefix i mod G, followed by its own
`--prompt`-length suffix, so its prompt holds P + suffix tokens. This exercises prefix caching.

Exact lengths without a tokenizer: prompts are built from common English words that are one
token each (with their leading space) in the usual BPE vocabularies (GPT-2, cl100k, Llama), so a
prompt of n words is n tokens (plus the BOS or chat-template tokens the server adds, which
its usage report includes). With `--tokenizer` the prompt is trimmed or padded until it
encodes to exactly n tokens.

>>> import numpy as np
>>> from ridgeline.workload.lengths import parse_lengths
>>> reqs = synthetic_requests(3, parse_lengths("fixed:5"), parse_lengths("fixed:7"),
...                           np.random.default_rng(0))
>>> [len(r.prompt.split()) for r in reqs], [r.max_tokens for r in reqs]
([5, 5, 5], [7, 7, 7])
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ridgeline.bench.client import BenchRequest
from ridgeline.bench.tokens import Tokenizer
from ridgeline.bench.words import WORDS
from ridgeline.errors import RidgelineError
from ridgeline.inputs import decode_errors, load_json, open_text
from ridgeline.workload.lengths import LengthDistribution, parse_lengths
from ridgeline.workload.spec_syntax import split_spec

DATASET_KINDS = ("synthetic, sharegpt:path=FILE, jsonl:path=FILE, "
                 "sonnet:path=FILE,input=550,prefix=200")
SONNET_BASE_PROMPT = "Pick as many lines as you can from these poem lines:\n"


@dataclass(frozen=True)
class DatasetSpec:
    """A parsed `--dataset`."""

    kind: str
    path: str | None = None
    input_tokens: int = 550    # sonnet only (vLLM's --sonnet-input-len default)
    prefix_tokens: int = 200   # sonnet only (vLLM's --sonnet-prefix-len default)

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        if self.path:
            out["path"] = self.path
        if self.kind == "sonnet":
            out["input_tokens"] = self.input_tokens
            out["prefix_tokens"] = self.prefix_tokens
        return out


def parse_dataset(spec: str) -> DatasetSpec:
    kind, params = split_spec(spec, "--dataset")
    if kind == "synthetic":
        if params:
            raise RidgelineError("--dataset: synthetic takes no parameters (use --prompt, "
                                 "--output, --prefix-groups)")
        return DatasetSpec("synthetic")
    if kind in ("sharegpt", "jsonl"):
        path = params.pop("path", None) or params.pop("value", None)
        if not path:
            raise RidgelineError(f"--dataset: {kind} needs path=FILE")
        if params:
            raise RidgelineError(f"--dataset: {kind} takes only path=; got {sorted(params)}")
        if not Path(path).is_file():
            raise RidgelineError(f"--dataset: file {path!r} not found")
        return DatasetSpec(kind, path)
    if kind == "sonnet":
        path = params.pop("path", None) or params.pop("value", None)
        if not path or not Path(path).is_file():
            raise RidgelineError(f"--dataset: sonnet needs path=FILE of an existing file; got "
                                 f"{path!r}")
        sizes = {}
        for key, default in (("input", 550), ("prefix", 200)):
            raw = params.pop(key, default)
            try:
                sizes[key] = int(raw)
            except (TypeError, ValueError):
                raise RidgelineError(f"--dataset: sonnet {key}= got {raw!r}; allowed: a whole "
                                     "number of tokens") from None
        if params:
            raise RidgelineError(f"--dataset: sonnet takes path=, input=, prefix=; got "
                                 f"{sorted(params)}")
        if not 0 <= sizes["prefix"] < sizes["input"]:
            raise RidgelineError("--dataset: sonnet needs 0 <= prefix < input")
        return DatasetSpec("sonnet", path, sizes["input"], sizes["prefix"])
    raise RidgelineError(f"--dataset: got {spec!r}; allowed: {DATASET_KINDS}")


def words_text(n_tokens: int, rng: np.random.Generator) -> str:
    """n one-token words, space-separated (so n tokens for common BPE vocabularies)."""
    idx = rng.integers(0, len(WORDS), size=int(n_tokens))
    return " ".join(WORDS[i] for i in idx)


def exact_text(n_tokens: int, rng: np.random.Generator, tokenizer: Tokenizer | None) -> str:
    """A text of exactly n tokens under `tokenizer` (or n one-token words without one)."""
    text = words_text(n_tokens, rng)
    if tokenizer is None:
        return text
    ids = tokenizer.encode(text)
    for _ in range(8):  # decode/re-encode can merge across the cut; a few passes settle it
        if len(ids) < n_tokens:
            ids = ids + tokenizer.encode(" " + words_text(n_tokens - len(ids), rng))
        text = tokenizer.decode(ids[:n_tokens])
        ids = tokenizer.encode(text)
        if len(ids) == n_tokens:
            break
    return text


def synthetic_requests(n: int, prompt: LengthDistribution, output: LengthDistribution,
                       rng: np.random.Generator, *, prefix_groups: int = 0,
                       prefix_tokens: int = 0, tokenizer: Tokenizer | None = None,
                       id_prefix: str = "r",
                       text_rng: np.random.Generator | None = None) -> list[BenchRequest]:
    """n requests with prompt and output lengths drawn from the two distributions.

    Lengths come from `rng` (prompt lengths, then output lengths, as `ridgeline simulate`
    draws them); the prompt texts from `text_rng` (default: `rng`).
    """
    prompt_lens = prompt.sample(n, rng)
    output_lens = output.sample(n, rng)
    rng = text_rng if text_rng is not None else rng
    prefixes: list[str] = []
    if prefix_groups > 0 and prefix_tokens > 0:
        prefixes = [exact_text(prefix_tokens, rng, tokenizer) for _ in range(prefix_groups)]
    out = []
    for i in range(n):
        body = exact_text(int(prompt_lens[i]), rng, tokenizer)
        n_prompt = int(prompt_lens[i])
        tag_at = 0
        if prefixes:
            tag_at = len(prefixes[i % len(prefixes)]) + 1
            body = prefixes[i % len(prefixes)] + " " + body
            n_prompt += prefix_tokens
        out.append(BenchRequest(f"{id_prefix}{i}", body, int(output_lens[i]), n_prompt,
                                tag_at=tag_at))
    return out


def _estimate_tokens(text: str, tokenizer: Tokenizer | None) -> int:
    if tokenizer is not None:
        return max(tokenizer.count(text), 1)
    return max(math.ceil(len(text) / 4), 1)  # ~4 characters per token for English BPE


def _load_sharegpt(path: str, tokenizer: Tokenizer | None) -> list[tuple[str, int | None]]:
    data = load_json(path, "--dataset", max_bytes=1 << 30)
    if not isinstance(data, list):
        raise RidgelineError(f"--dataset: {path!r} must hold a JSON list of conversations")
    pairs: list[tuple[str, int | None]] = []
    for conv in data:
        turns = conv.get("conversations") or conv.get("conversation") if isinstance(
            conv, dict) else None
        if not isinstance(turns, list) or len(turns) < 1:
            continue
        first = turns[0]
        prompt = first.get("value") or first.get("content") if isinstance(first, dict) else None
        if not prompt:
            continue
        reply = turns[1] if len(turns) > 1 and isinstance(turns[1], dict) else None
        reply_text = (reply.get("value") or reply.get("content")) if reply else None
        pairs.append((str(prompt),
                      _estimate_tokens(str(reply_text), tokenizer) if reply_text else None))
    if not pairs:
        raise RidgelineError(f"--dataset: {path!r} holds no ShareGPT conversations")
    return pairs


def _load_jsonl(path: str) -> list[tuple[str, int | None]]:
    pairs: list[tuple[str, int | None]] = []
    with open_text(path, "--dataset") as fh, decode_errors("--dataset", path):
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except (ValueError, RecursionError):
                raise RidgelineError(f"--dataset: {path!r} line {lineno} is not JSON") from None
            if isinstance(obj, str):
                pairs.append((obj, None))
                continue
            if not isinstance(obj, dict):
                raise RidgelineError(f"--dataset: {path!r} line {lineno}: expected an object")
            prompt = obj.get("prompt") or obj.get("text")
            if prompt is None and isinstance(obj.get("messages"), list):
                prompt = "\n".join(str(m.get("content", "")) for m in obj["messages"]
                                   if isinstance(m, dict))
            if not prompt:
                raise RidgelineError(f"--dataset: {path!r} line {lineno}: no 'prompt' field")
            out = obj.get("max_tokens", obj.get("output_tokens"))
            pairs.append((str(prompt), int(out) if out is not None else None))
    if not pairs:
        raise RidgelineError(f"--dataset: {path!r} is empty")
    return pairs


def file_requests(spec: DatasetSpec, n: int, output: LengthDistribution | None,
                  rng: np.random.Generator, *, tokenizer: Tokenizer | None = None,
                  default_output_tokens: int = 256, id_prefix: str = "r") -> list[BenchRequest]:
    """n requests drawn (shuffled, cycling when n exceeds the file) from a dataset file."""
    assert spec.path is not None
    pairs = (_load_sharegpt(spec.path, tokenizer) if spec.kind == "sharegpt"
             else _load_jsonl(spec.path))
    order = rng.permutation(len(pairs))
    reps = -(-n // len(pairs))
    idx = np.concatenate([order] * reps)[:n]
    out_lens = output.sample(n, rng) if output is not None else None
    reqs = []
    for i, j in enumerate(idx):
        prompt, out_tokens = pairs[int(j)]
        max_tokens = int(out_lens[i]) if out_lens is not None else (
            out_tokens or default_output_tokens)
        prompt_tokens = tokenizer.count(prompt) if tokenizer is not None else None
        reqs.append(BenchRequest(f"{id_prefix}{i}", prompt, max_tokens, prompt_tokens))
    return reqs


def sonnet_requests(spec: DatasetSpec, n: int, output: LengthDistribution | None,
                    rng: np.random.Generator, *, tokenizer: Tokenizer | None = None,
                    id_prefix: str = "r") -> list[BenchRequest]:
    """vLLM's SonnetDataset: base prompt + the file's first lines (shared by every request)
    + lines drawn with replacement, sized by the mean tokens per line. Output: `output` or
    vLLM's 150 tokens. The uniqueness tag goes after the shared prefix (`tag_at`)."""
    assert spec.path is not None
    lines = [ln for ln in Path(spec.path).read_text(encoding="utf-8").splitlines(keepends=True)
             if ln.strip()]
    if not lines:
        raise RidgelineError(f"--dataset: {spec.path!r} holds no lines")
    avg = sum(_estimate_tokens(ln, tokenizer) for ln in lines) / len(lines)
    base = _estimate_tokens(SONNET_BASE_PROMPT, tokenizer)
    n_input = max(round((spec.input_tokens - base) / avg), 1)
    n_prefix = min(max(round((spec.prefix_tokens - base) / avg), 0), n_input)
    head = SONNET_BASE_PROMPT + "".join(lines[:n_prefix])
    out_lens = output.sample(n, rng) if output is not None else np.full(n, 150)
    reqs = []
    for i in range(n):
        picks = rng.integers(0, len(lines), size=n_input - n_prefix)
        prompt = head + "".join(lines[int(j)] for j in picks)
        count = tokenizer.count(prompt) if tokenizer is not None else None
        reqs.append(BenchRequest(f"{id_prefix}{i}", prompt, int(out_lens[i]), count,
                                 tag_at=len(head)))
    return reqs


def build_requests(spec: DatasetSpec, n: int, prompt: LengthDistribution,
                   output: LengthDistribution | None, rng: np.random.Generator, *,
                   prefix_groups: int = 0, prefix_tokens: int = 0,
                   tokenizer: Tokenizer | None = None, id_prefix: str = "r",
                   text_rng: np.random.Generator | None = None) -> list[BenchRequest]:
    """The workload for any dataset kind. `output=None` means the file's own lengths."""
    if spec.kind == "synthetic":
        return synthetic_requests(n, prompt, output or parse_lengths("fixed:256", "--output"),
                                  rng, prefix_groups=prefix_groups, prefix_tokens=prefix_tokens,
                                  tokenizer=tokenizer, id_prefix=id_prefix, text_rng=text_rng)
    if prefix_groups:
        raise RidgelineError("--prefix-groups: only with --dataset synthetic")
    if spec.kind == "sonnet":
        return sonnet_requests(spec, n, output, rng, tokenizer=tokenizer, id_prefix=id_prefix)
    return file_requests(spec, n, output, rng, tokenizer=tokenizer, id_prefix=id_prefix)


__all__ = ["DATASET_KINDS", "DatasetSpec", "build_requests", "exact_text",
           "file_requests", "parse_dataset", "sonnet_requests", "synthetic_requests",
           "words_text"]

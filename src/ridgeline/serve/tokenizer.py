"""Prompt token counting and deterministic filler output for the emulator.

The emulator times a request by its prompt length, so the count must be a real one. It
uses OpenAI's cl100k_base encoding from the `bpe-openai` package, which ships the
encoding inside the wheel (tiktoken itself downloads its files on first use, which fails
offline). If that package cannot be imported, a clearly-labelled approximation (one
token per 4 characters, the usual rule of thumb for English) is used instead and
`/v1/models` and the startup line say so.

Clients that know their exact lengths can skip counting altogether (see docs in app.py):
a `/v1/completions` prompt given as a list of token ids counts as its length, and the
extension field `"ridgeline": {"prompt_tokens": N}` overrides any count.

Output text is filler: a fixed cycle of common English words, each exactly one cl100k
token with its leading space, so re-tokenizing the streamed text gives back exactly
`usage.completion_tokens` (as vLLM's and AIPerf's clients do when they count tokens).

>>> tok = get_tokenizer()
>>> tok.count("hello world") if tok.exact else 2
2
>>> filler_text(0, 3)
' the of and'
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

from ridgeline.errors import RidgelineError
from ridgeline.tokenizers import load_tokenizer

# Each word is one cl100k_base token, and so is any concatenation of them word by word
# (checked in tests/serve/test_serve_protocol.py).
FILLER_WORDS: tuple[str, ...] = (
    " the", " of", " and", " to", " in", " a", " is", " that", " for", " it",
    " as", " was", " with", " be", " by", " on", " not", " he", " this", " are",
)

# OpenAI's chat accounting for cl100k models: every message costs 3 tokens of framing
# (role and separators), a `name` costs 1 more, and the reply is primed with 3.
CHAT_TOKENS_PER_MESSAGE = 3
CHAT_TOKENS_PER_NAME = 1
CHAT_REPLY_PRIMING_TOKENS = 3


# bpe-openai refuses to encode 1,000,000 characters or more ("Input too long to encode
# safely"); longer prompts are counted in pieces cut at whitespace (where cl100k's
# pre-tokenizer splits anyway, so the sum is the whole-text count up to a token or so per
# cut). The 32 MiB body limit bounds the number of pieces.
MAX_ENCODE_CHARS = 500_000


def _pieces(text: str, size: int = MAX_ENCODE_CHARS) -> list[str]:
    """`text` cut into pieces of at most `size` characters, before a space where one is near."""
    out = []
    start = 0
    while len(text) - start > size:
        cut = text.rfind(" ", start + size // 2, start + size)
        cut = cut if cut > start else start + size
        out.append(text[start:cut])
        start = cut
    out.append(text[start:])
    return out


class _Encoder(Protocol):
    def encode_ordinary(self, text: str) -> list[int]: ...


@dataclass(frozen=True)
class PromptTokenizer:
    """Counts prompt tokens. `exact` is False when the approximation is in use."""

    name: str
    exact: bool
    _encoder: Any = None
    # `serve --tokenizer` with a tokenizer_config.json holding a chat template: chat
    # prompts are rendered with it (as transformers' apply_chat_template) and counted.
    chat_template: ChatTemplate | None = None

    def count(self, text: str, stop_after: int | None = None) -> int:
        """Tokens in `text` (special-token text counts as ordinary text, never an error).

        With `stop_after`, counting may stop once the total passes it (the result is then
        a lower bound above `stop_after`): a prompt past the context needs no exact count.
        """
        if self._encoder is None:
            # ceil(chars / 4): the common rule of thumb for English with GPT-style BPEs.
            return (len(text) + 3) // 4
        if len(text) <= MAX_ENCODE_CHARS:
            return len(self._encoder.encode_ordinary(text))
        total = 0
        for piece in _pieces(text):
            total += len(self._encoder.encode_ordinary(piece))
            if stop_after is not None and total > stop_after:
                break
        return total

    def ids(self, text: str) -> list[int] | None:
        """Token ids of `text` (`/tokenize`); None with the approximate counter."""
        if self._encoder is None:
            return None
        return [int(t) for piece in _pieces(text) for t in self._encoder.encode_ordinary(piece)]

    def decode(self, ids: list[int]) -> str | None:
        """Text of token ids (`/detokenize`); None with the approximate counter."""
        decode = getattr(self._encoder, "decode", None)
        return None if decode is None else str(decode(list(ids)))

    def count_chat(self, messages: list[dict[str, Any]], stop_after: int | None = None) -> int:
        """Tokens of a chat prompt: the served model's chat template rendered and counted
        when it has one, else message contents plus OpenAI's per-message framing."""
        if self.chat_template is not None:
            return self.count(self.chat_template.render(messages), stop_after)
        total = CHAT_REPLY_PRIMING_TOKENS
        for message in messages:
            total += CHAT_TOKENS_PER_MESSAGE
            for key, value in message.items():
                if isinstance(value, str) and key in ("content", "name", "role"):
                    total += self.count(value, stop_after)
                    if key == "name":
                        total += CHAT_TOKENS_PER_NAME
                elif key == "content" and isinstance(value, list):
                    # Content parts: count the text parts (images etc. are not modelled).
                    for part in value:
                        if isinstance(part, dict) and isinstance(part.get("text"), str):
                            total += self.count(part["text"], stop_after)
        return total


class _RustEncoder:
    """bpe-openai's Rust tokenizer called directly. Importing the `bpe_openai` package
    decodes three whole vocabularies in Python at import time (about 1.5 s, most of the
    emulator's start-up); its compiled module holds the same encodings and is ready in
    under 0.1 s. Same ids (checked against the package in tests/serve/test_serve_protocol.py)."""

    def __init__(self, backend: Any) -> None:
        self._tok = backend

    def encode_ordinary(self, text: str) -> list[int]:
        return list(self._tok.encode(text))

    def decode(self, ids: list[int]) -> str:
        return str(self._tok.decode(list(ids)))


def rust_cl100k() -> _RustEncoder | None:
    """cl100k_base from bpe-openai's compiled module, without importing its package."""
    import importlib.util
    import os

    try:
        pkg = importlib.util.find_spec("bpe_openai")
        if pkg is None or pkg.origin is None:
            return None
        folder = os.path.dirname(pkg.origin)
        names = [n for n in os.listdir(folder) if n.startswith("_bindings.") and
                 n.endswith((".so", ".pyd"))]
        if not names:
            return None
        spec = importlib.util.spec_from_file_location("bpe_openai._bindings",
                                                      os.path.join(folder, names[0]))
        if spec is None or spec.loader is None:
            return None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return _RustEncoder(module.tokenizer_for_encoding("cl100k_base"))
    except Exception:  # an unexpected layout: the package's own API below
        return None


@lru_cache(maxsize=1)
def get_tokenizer() -> PromptTokenizer:
    """The process-wide tokenizer: cl100k_base if `bpe-openai` imports, else approximate."""
    fast = rust_cl100k()
    if fast is not None:
        return PromptTokenizer(name="cl100k_base", exact=True, _encoder=fast)
    try:
        with warnings.catch_warnings():  # the package uses a deprecated importlib API
            warnings.simplefilter("ignore", DeprecationWarning)
            import bpe_openai

            encoder = bpe_openai.get_encoding("cl100k_base")
    except Exception:  # ImportError, or a broken wheel: fall back, never fail to serve
        return PromptTokenizer(name="approx-chars/4", exact=False)
    return PromptTokenizer(name="cl100k_base", exact=True, _encoder=encoder)


def model_tokenizer(spec: str) -> PromptTokenizer:
    """`serve --tokenizer`: the served model's own tokenizer (a tokenizer.json, a folder
    holding one, a Hugging Face model id, or tiktoken:<encoding>), so prompts are counted
    as that model counts them; with a chat template beside it (tokenizer_config.json), chat
    prompts are rendered with it. Bad input raises RidgelineError."""
    tok = load_tokenizer(spec)
    assert tok is not None
    encoder = tok if hasattr(tok, "encode_ordinary") else _EncodeAdapter(tok)
    return PromptTokenizer(name=tok.name, exact=True, _encoder=encoder,
                           chat_template=load_chat_template(spec))


@dataclass(frozen=True)
class ChatTemplate:
    """A Hugging Face chat template (jinja2), rendered as transformers renders it: a
    sandboxed environment with trim_blocks and lstrip_blocks, `messages`,
    `add_generation_prompt=True`, the config's special tokens, and `raise_exception`."""

    source: str
    special: tuple[tuple[str, str], ...] = ()

    def render(self, messages: list[dict[str, Any]]) -> str:
        return _compiled(self.source).render(messages=messages, add_generation_prompt=True,
                                             **dict(self.special))


@lru_cache(maxsize=8)
def _compiled(source: str) -> Any:
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(source)


def load_chat_template(spec: str) -> ChatTemplate | None:
    """The chat template of tokenizer_config.json beside a tokenizer.json (or in a folder);
    None when there is none. A template without jinja2 installed is an error, not a silent
    fallback to OpenAI's framing."""
    import json
    from pathlib import Path

    path = Path(spec)
    folder = path if path.is_dir() else path.parent
    cfg_path = folder / "tokenizer_config.json"
    if spec.startswith("tiktoken:") or not cfg_path.is_file():
        return None

    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RidgelineError(f"--tokenizer: {cfg_path}: not readable JSON ({exc})") from None
    template = cfg.get("chat_template") if isinstance(cfg, dict) else None
    if isinstance(template, list):  # named templates: transformers takes "default"
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    if not isinstance(template, str):
        return None
    try:
        import jinja2  # noqa: F401
    except ImportError:
        raise RidgelineError(f"--tokenizer: {cfg_path} has a chat template, which needs "
                             "jinja2 (pip install 'ridgeline[tokenizer]')") from None
    special = []
    for key in ("bos_token", "eos_token", "unk_token", "pad_token"):
        value = cfg.get(key)
        if isinstance(value, dict):  # AddedToken form
            value = value.get("content")
        if isinstance(value, str):
            special.append((key, value))
    return ChatTemplate(template, tuple(special))


class _EncodeAdapter:
    def __init__(self, tok: Any) -> None:
        self._tok = tok

    def encode_ordinary(self, text: str) -> list[int]:
        return list(self._tok.encode(text))

    def decode(self, ids: list[int]) -> str:
        return str(self._tok.decode(ids))


_CYCLE_CHARS = sum(len(w) for w in FILLER_WORDS)
_PREFIX_CHARS = tuple(sum(len(w) for w in FILLER_WORDS[:i]) for i in range(len(FILLER_WORDS)))


def filler_chars(n_tokens: int) -> int:
    """Characters in the first n tokens of the filler stream."""
    q, r = divmod(n_tokens, len(FILLER_WORDS))
    return q * _CYCLE_CHARS + _PREFIX_CHARS[r]


def filler_stop(n_tokens: int, stops: list[str]) -> tuple[int, int] | None:
    """vLLM's stop strings over the first n filler tokens: generation goes on until a stop
    string is complete, and the text is cut where it begins. Returns (tokens generated,
    characters of text kept) for the stop completed first, or None if none occurs."""
    text = filler_text(0, n_tokens)
    best: tuple[int, int] | None = None
    for stop in stops:
        at = text.find(stop) if stop else -1
        if at < 0:
            continue
        lo, hi = 1, n_tokens  # the fewest tokens whose text holds the whole stop string
        while lo < hi:
            mid = (lo + hi) // 2
            if filler_chars(mid) >= at + len(stop):
                hi = mid
            else:
                lo = mid + 1
        if best is None or (lo, at) < best:
            best = (lo, at)
    return best


def filler_text(start_index: int, n_tokens: int) -> str:
    """Output tokens start_index .. start_index + n_tokens - 1 of the filler stream."""
    words = FILLER_WORDS
    k = len(words)
    return "".join(words[(start_index + i) % k] for i in range(n_tokens))


__all__ = ["FILLER_WORDS", "PromptTokenizer", "filler_chars", "filler_stop", "filler_text",
           "get_tokenizer", "model_tokenizer"]

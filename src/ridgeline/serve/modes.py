"""What the emulated model says: `serve --mode timing|echo|random` (llm-d-inference-sim's modes).

- `timing` (the default): deterministic filler text, one cl100k token per word; the output
  length is the request's (max_tokens, or a natural stop drawn from --eos-lengths).
- `echo`: the completion is the request's text (a completions prompt, or the last user
  message of a chat), cut to max_tokens; it ends with "stop" when the whole text fits.
- `random`: random words, seeded (the request's `seed`, else the server's stream), as many
  as the output length the timing mode would produce.

Text is handed to the renderer as a tuple of token pieces (a word with its leading space),
so streaming sends one piece per output token.

>>> echo_pieces("Hello there, world")
('Hello', ' there,', ' world')
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

MODES = ("timing", "echo", "random")
_PIECE = re.compile(r"\s*\S+")
# Words for `random` mode: common English words, so the output reads as text.
RANDOM_WORDS = (
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be",
    "by", "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but",
    "have", "an", "had", "they", "you", "were", "their", "one", "all", "we", "can", "her",
    "has", "there", "been", "if", "more", "when", "will", "would", "who", "so", "no",
    "model", "token", "server", "request", "time", "data", "first", "system", "new",
    "value", "number", "light", "water", "river", "stone", "quiet", "bright", "open",
)


def echo_pieces(text: str) -> tuple[str, ...]:
    """The text as token pieces: each non-space run with the whitespace before it."""
    return tuple(_PIECE.findall(text))


def request_text(req: Any) -> str:
    """The text echo mode returns: the completions prompt (text), or the chat request's
    last user message (its text parts joined)."""
    prompt = getattr(req, "prompt", None)
    if prompt is not None:
        if isinstance(prompt, str):
            return prompt
        if prompt and isinstance(prompt[0], str):
            return str(prompt[0])
        return ""   # token ids: no text to echo
    for message in reversed(req.messages):
        if message.role == "user":
            content = message.content
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return " ".join(str(part.get("text", "")) for part in content
                                if isinstance(part, dict) and part.get("type") == "text")
            return ""
    return ""


def random_pieces(n_tokens: int, rng: np.random.Generator) -> tuple[str, ...]:
    """n random words (the first without a leading space)."""
    idx = rng.integers(0, len(RANDOM_WORDS), size=n_tokens)
    return tuple((" " if i else "") + RANDOM_WORDS[int(k)] for i, k in enumerate(idx))


__all__ = ["MODES", "RANDOM_WORDS", "echo_pieces", "random_pieces", "request_text"]

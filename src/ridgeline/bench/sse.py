"""Server-sent events, incrementally: bytes in as they arrive, OpenAI stream chunks out.

The client timestamps each network read, not each parsed event: every event completed by
one read arrived at the same moment, so they share that read's time. Parsing never blocks
on a partial line; the remainder waits for the next read.

>>> p = SSEParser()
>>> p.feed(b'data: {"choices":[{"text":"Hi"}]}\\n\\ndata: [DO')
['{"choices":[{"text":"Hi"}]}']
>>> p.feed(b'NE]\\n\\n')
['[DONE]']
>>> parse_chunk('{"choices":[{"delta":{"role":"assistant"}}]}').text
''
"""

from __future__ import annotations

import json
from dataclasses import dataclass


class SSEParser:
    """Split an SSE byte stream into the `data` payloads of complete events.

    Follows the SSE rules that matter for OpenAI-style servers: lines end in LF, CRLF or
    CR; `data:` lines of one event are joined with newlines; a blank line ends an event;
    comment lines (starting with `:`) and other fields (`event:`, `id:`, `retry:`) are
    skipped, except that an `event: error` marks the event's data as an error payload.
    """

    __slots__ = ("_buf", "_data", "_event")

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[str] = []
        self._event = ""

    def feed(self, raw: bytes) -> list[str]:
        """Add bytes; return the data payloads of every event they completed."""
        buf = self._buf + raw if self._buf else raw
        if b"\r" in buf:
            # Normalise CRLF and lone CR; a trailing CR may be half of a CRLF, keep it.
            keep_cr = buf.endswith(b"\r")
            buf = buf[:-1] if keep_cr else buf
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            if keep_cr:
                buf += b"\r"
        lines = buf.split(b"\n")
        self._buf = lines.pop()
        out: list[str] = []
        for line in lines:
            if not line:
                if self._data:
                    payload = "\n".join(self._data)
                    out.append(("\x00error:" + payload) if self._event == "error" else payload)
                self._data = []
                self._event = ""
                continue
            if line.startswith(b"data:"):
                value = line[5:]
                if value.startswith(b" "):
                    value = value[1:]
                self._data.append(value.decode("utf-8", errors="replace"))
            elif line.startswith(b"event:"):
                self._event = line[6:].strip().decode("utf-8", errors="replace")
            # comments (":...") and id:/retry: fields carry nothing we need
        return out

    def flush(self) -> list[str]:
        """End of stream: a last event not followed by a blank line still counts."""
        out = self.feed(b"\n\n") if (self._buf or self._data) else []
        self._buf = b""
        return out


@dataclass(slots=True)
class Chunk:
    """What one OpenAI streaming chunk says, for either API.

    `text` is the visible output (completions `text` or chat `delta.content`);
    `reasoning` is `delta.reasoning_content` (or `delta.reasoning`). A role-only or empty
    delta has neither and is not an output event.
    """

    text: str = ""
    reasoning: str = ""
    has_choices: bool = False
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    # Prompt tokens the server answered from its prefix cache (vLLM/OpenAI
    # usage.prompt_tokens_details.cached_tokens, llama.cpp timings.cache_n).
    cached_tokens: int | None = None
    error: str | None = None
    done: bool = False

    @property
    def is_output(self) -> bool:
        return bool(self.text or self.reasoning)


class MalformedChunk(ValueError):
    """A data payload that is neither `[DONE]` nor a JSON object."""


def parse_chunk(payload: str) -> Chunk:
    """Interpret one SSE data payload from /v1/completions or /v1/chat/completions."""
    if payload.startswith("\x00error:"):
        return Chunk(error=payload[7:][:500] or "error event")
    if payload.strip() == "[DONE]":
        return Chunk(done=True)
    try:
        obj = json.loads(payload)
    except json.JSONDecodeError:
        raise MalformedChunk(f"not JSON: {payload[:80]!r}") from None
    if not isinstance(obj, dict):
        raise MalformedChunk(f"not a JSON object: {payload[:80]!r}")
    chunk = Chunk()
    err = obj.get("error")
    if err:
        chunk.error = (err.get("message") or json.dumps(err)) if isinstance(err, dict) else str(
            err)
        chunk.error = chunk.error[:500]
    usage = obj.get("usage")
    if isinstance(usage, dict):
        chunk.prompt_tokens = _int_or_none(usage.get("prompt_tokens"))
        chunk.completion_tokens = _int_or_none(usage.get("completion_tokens"))
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict):
            chunk.cached_tokens = _int_or_none(details.get("cached_tokens"))
    timings = obj.get("timings")
    if isinstance(timings, dict) and "cache_n" in timings:
        chunk.cached_tokens = _int_or_none(timings.get("cache_n"))
    choices = obj.get("choices")
    if isinstance(choices, list) and choices:
        chunk.has_choices = True
        choice = choices[0]
        if isinstance(choice, dict):
            chunk.finish_reason = choice.get("finish_reason")
            delta = choice.get("delta")
            if isinstance(delta, dict):
                chunk.text = delta.get("content") or ""
                chunk.reasoning = delta.get("reasoning_content") or delta.get("reasoning") or ""
            else:
                chunk.text = choice.get("text") or ""
    return chunk


def _int_or_none(value: object) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


__all__ = ["Chunk", "MalformedChunk", "SSEParser", "parse_chunk"]

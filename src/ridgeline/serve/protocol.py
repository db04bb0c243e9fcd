"""OpenAI request models for the emulator, and OpenAI-style error bodies.

Only what changes the emulated timing or the response shape is modelled: `stop` (the
filler output is cut before the stop string, finish_reason "stop"), `n` (n identical
choices), `logprobs`/`top_logprobs` (synthetic values in OpenAI's shapes); `tools`,
`tool_choice` and `response_format` get synthetic, schema-valid tool calls and JSON
(serve/structured.py). Other fields (temperature, top_p, seed, ...) are accepted when they
have the right type and otherwise ignored, as are fields the emulator has never heard of.
Validation is strict about types (`"max_tokens": "5"` is a 400, as on OpenAI), so a bad
request is always a 400 with an OpenAI-style body, never a 500.

Extensions (vLLM's, plus one of ridgeline's):
- `ignore_eos`, `min_tokens` (vLLM sampling params) — see `OutputPlan` in app.py.
- `ridgeline: {"prompt_tokens": N}` sets the prompt length exactly, bypassing the tokenizer.

>>> CompletionRequest.model_validate({"prompt": "hi", "max_tokens": 4}).max_tokens
4
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

_CONFIG = ConfigDict(extra="allow", strict=True)


class StreamOptions(BaseModel):
    model_config = _CONFIG

    include_usage: bool | None = False
    continuous_usage_stats: bool | None = False


class RidgelineExtension(BaseModel):
    """The `ridgeline` extension object of a request."""

    model_config = ConfigDict(extra="forbid", strict=True)

    prompt_tokens: int | None = Field(None, ge=1)


class _CommonRequest(BaseModel):
    model_config = _CONFIG

    model: str | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    n: int | None = 1
    ignore_eos: bool | None = False
    min_tokens: int | None = 0
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    user: str | None = None
    ridgeline: RidgelineExtension | None = None


class CompletionRequest(_CommonRequest):
    """`POST /v1/completions`. `prompt` is text or token ids; one prompt per request."""

    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: int | None = 16  # OpenAI's default for completions
    echo: bool | None = False
    logprobs: int | None = None


class ChatMessage(BaseModel):
    model_config = _CONFIG

    role: str
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None


class ChatCompletionRequest(_CommonRequest):
    """`POST /v1/chat/completions`."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None


class RequestError(Exception):
    """A request the emulator refuses; becomes an OpenAI-style error response."""

    def __init__(self, message: str, *, status: int = 400, param: str | None = None,
                 err_type: str = "invalid_request_error", code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param
        self.err_type = err_type
        self.code = code

    def body(self) -> dict[str, Any]:
        return error_body(self.message, err_type=self.err_type, param=self.param,
                          code=self.code)


def error_body(message: str, *, err_type: str = "invalid_request_error",
               param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """OpenAI's error envelope: {"error": {"message", "type", "param", "code"}}."""
    return {"error": {"message": message, "type": err_type, "param": param, "code": code}}


def validation_to_error(exc: ValidationError) -> RequestError:
    """The first pydantic error as a one-line 400 naming the field."""
    first = exc.errors(include_url=False)[0]
    loc = ".".join(str(part) for part in first.get("loc", ()) if not isinstance(part, int))
    # Unions report one error per branch with the branch type in the location; keep the
    # field name only.
    field = loc.split(".")[0] if loc else None
    msg = first.get("msg", "invalid value")
    return RequestError(f"{field or 'body'}: {msg}", param=field)


def parse_request(kind: Literal["completion", "chat"], payload: object
                  ) -> CompletionRequest | ChatCompletionRequest:
    """Validate a decoded JSON body; raises RequestError (400) on any problem."""
    if not isinstance(payload, dict):
        raise RequestError("request body must be a JSON object")
    model = CompletionRequest if kind == "completion" else ChatCompletionRequest
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        raise validation_to_error(exc) from None


__all__ = [
    "ChatCompletionRequest",
    "ChatMessage",
    "CompletionRequest",
    "RequestError",
    "StreamOptions",
    "error_body",
    "parse_request",
    "validation_to_error",
]

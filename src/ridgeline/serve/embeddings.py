"""`POST /v1/embeddings`: OpenAI's request and response, timed as prefill-only requests.

Each input is one engine request of its prompt length and a single output position, so it
costs the engine what a prompt's prefill costs (and shares the batch with generation
requests); the response is sent when every input's prefill has ended. With fixed
latencies its time is the TTFT formula (fixed_timing.py).

The vectors are synthetic: unit-length, of `--embedding-dim` dimensions (or the request's
`dimensions`), a deterministic function of the input (the same text always gives the same
vector, different texts nearly orthogonal ones). `encoding_format` "float" or "base64"
(little-endian float32, as OpenAI's).

>>> v = embedding_vector("hello", 8)
>>> round(float((v * v).sum()), 6), v.shape
(1.0, (8,))
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from ridgeline.serve.protocol import RequestError

MAX_INPUTS = 2048   # OpenAI's bound on inputs per request
MAX_VALUES = 1 << 24   # numbers in one response (a bound on its size, about 300 MB of JSON)


@dataclass(frozen=True)
class EmbeddingRequest:
    model: str | None
    inputs: list[str | list[int]]
    dimensions: int | None
    encoding_format: str


def parse_embedding_request(body: Any) -> EmbeddingRequest:
    """Validate OpenAI's embeddings body; raises RequestError (400)."""
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    raw = body.get("input")
    inputs: list[str | list[int]]
    if isinstance(raw, str):
        inputs = [raw]
    elif isinstance(raw, list) and raw and all(isinstance(t, int) and not isinstance(t, bool)
                                               for t in raw):
        inputs = [list(raw)]
    elif isinstance(raw, list) and raw and all(
            isinstance(x, str) or (isinstance(x, list) and x and all(
                isinstance(t, int) and not isinstance(t, bool) for t in x)) for x in raw):
        inputs = list(raw)
    else:
        raise RequestError("input: a string, a list of strings, a list of token ids or a "
                           "list of lists of token ids (non-empty) is required", param="input")
    if len(inputs) > MAX_INPUTS:
        raise RequestError(f"input: at most {MAX_INPUTS} inputs, got {len(inputs)}",
                           param="input")
    if any(isinstance(x, list) and min(x) < 0 for x in inputs):
        raise RequestError("input: token ids must be >= 0", param="input")
    dims = body.get("dimensions")
    if dims is not None and (not isinstance(dims, int) or isinstance(dims, bool)
                             or not 1 <= dims <= 65536):
        raise RequestError(f"dimensions: must be an integer in [1, 65536], got {dims!r}",
                           param="dimensions")
    if dims is not None and dims * len(inputs) > MAX_VALUES:
        raise RequestError(f"dimensions x inputs: at most {MAX_VALUES} values a request",
                           param="dimensions")
    fmt = body.get("encoding_format", "float")
    if fmt not in ("float", "base64"):
        raise RequestError(f"encoding_format: got {fmt!r}; allowed: float, base64",
                           param="encoding_format")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise RequestError("model: must be a string", param="model")
    return EmbeddingRequest(model, inputs, dims, fmt)


def embedding_vector(item: str | list[int], dims: int) -> np.ndarray:
    """A unit vector determined by the input."""
    key = item if isinstance(item, str) else ",".join(map(str, item))
    seed = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little")
    v = np.random.default_rng(seed).standard_normal(dims)
    return v / np.linalg.norm(v)


def embeddings_body(req: EmbeddingRequest, model: str, dims: int,
                    prompt_tokens: list[int]) -> dict[str, Any]:
    data = []
    for i, item in enumerate(req.inputs):
        v = embedding_vector(item, dims)
        emb: Any = (base64.b64encode(v.astype("<f4").tobytes()).decode()
                    if req.encoding_format == "base64" else v.tolist())
        data.append({"object": "embedding", "index": i, "embedding": emb})
    total = int(sum(prompt_tokens))
    return {"object": "list", "data": data, "model": model,
            "usage": {"prompt_tokens": total, "total_tokens": total}}


__all__ = ["EmbeddingRequest", "embedding_vector", "embeddings_body",
           "parse_embedding_request"]

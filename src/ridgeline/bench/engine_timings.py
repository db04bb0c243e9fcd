"""The engine's own per-request timing fields, kept beside the client's times.

llama.cpp's server ends a stream with a chunk carrying `timings` (prompt_n, prompt_ms,
predicted_n, predicted_ms, cache_n, ...). The client stores them in the trace record as
`engine_timings` (an extra field; readers that do not know it ignore it), so a calibration
can check the client's clock against the engine's and fit on either.

>>> parse_timings('{"choices":[],"timings":{"prompt_n":5,"prompt_ms":12.5,"x":"y"}}')
{'prompt_n': 5, 'prompt_ms': 12.5}
>>> parse_timings('{"choices":[{"text":"a"}]}') is None
True
"""

from __future__ import annotations

import json
from typing import Any

# The llama.cpp fields worth keeping (numbers only).
TIMING_FIELDS = ("prompt_n", "prompt_ms", "prompt_per_token_ms", "predicted_n",
                 "predicted_ms", "predicted_per_token_ms", "cache_n")


def has_timings(payload: str) -> bool:
    """Cheap pre-check on the raw payload (most chunks have no timings)."""
    return '"timings"' in payload


def parse_timings(payload: str) -> dict[str, Any] | None:
    """The numeric `timings` fields of one SSE data payload, or None."""
    if not has_timings(payload):
        return None
    try:
        obj = json.loads(payload)
    except ValueError:
        return None
    t = obj.get("timings") if isinstance(obj, dict) else None
    if not isinstance(t, dict):
        return None
    out = {k: t[k] for k in TIMING_FIELDS
           if isinstance(t.get(k), (int, float)) and not isinstance(t.get(k), bool)}
    return out or None


__all__ = ["TIMING_FIELDS", "has_timings", "parse_timings"]

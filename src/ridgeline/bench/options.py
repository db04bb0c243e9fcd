"""Validation of `ridgeline bench` options that are not plain numbers (one-line errors).

>>> parse_extra_body('{"top_k": 20}')
{'top_k': 20}
>>> parse_extra_body('[1]')  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ridgeline.errors.RidgelineError: --extra-body: got '[1]'; allowed: a JSON object, ...
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlparse

from ridgeline.errors import RidgelineError

SAVE_RESULT_FORMATS = ("vllm", "aiperf-csv")
# Fields the load generator itself sets per request; overriding them breaks the measurement.
_RESERVED_BODY_KEYS = ("stream", "prompt", "messages")


def parse_extra_body(text: str | None) -> dict[str, Any]:
    """`--extra-body`: a JSON object merged into every request body."""
    if text is None:
        return {}
    example = """allowed: a JSON object, e.g. '{"top_k": 20}'"""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RidgelineError(f"--extra-body: not JSON ({exc.msg} at character {exc.pos}); "
                             f"{example}") from None
    except RecursionError:
        raise RidgelineError(f"--extra-body: JSON nested too deeply; {example}") from None
    if not isinstance(obj, dict):
        raise RidgelineError(f"--extra-body: got {text!r}; {example}")
    bad = [k for k in _RESERVED_BODY_KEYS if k in obj]
    if bad:
        raise RidgelineError(f"--extra-body: {', '.join(bad)} is set by the load generator "
                             "itself; use --dataset/--api instead")
    return obj


def check_save_result(formats: list[str] | None) -> list[str]:
    out = []
    for f in formats or []:
        if f not in SAVE_RESULT_FORMATS:
            raise RidgelineError(f"--save-result: got {f!r}; allowed: "
                                 f"{', '.join(SAVE_RESULT_FORMATS)}")
        if f not in out:
            out.append(f)
    return out


def check_telemetry_interval(interval_ms: float) -> None:
    if not 10 <= interval_ms <= 60_000:
        raise RidgelineError(f"--telemetry-interval-ms: got {interval_ms:g}; allowed: 10 to "
                             "60000")


def parse_percentiles(text: str) -> list[float]:
    """`--metric-percentiles 50,90,99`: numbers in (0, 100]."""
    out = []
    for part in str(text).split(","):
        try:
            p = float(part)
        except ValueError:
            raise RidgelineError(f"--metric-percentiles: got {text!r}; allowed: numbers in "
                                 "(0, 100], comma-separated, e.g. 50,90,99") from None
        if not 0 < p <= 100:
            raise RidgelineError(f"--metric-percentiles: got {part!r}; allowed: numbers in "
                                 "(0, 100]")
        out.append(p)
    return out


def parse_metrics_url(url: str | None) -> str | None:
    if url is None:
        return None
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise RidgelineError(f"--server-metrics: got {url!r}; allowed: an http(s) URL, e.g. "
                             "http://127.0.0.1:8000/metrics")
    return url


__all__ = ["SAVE_RESULT_FORMATS", "check_save_result", "check_telemetry_interval",
           "parse_extra_body", "parse_metrics_url", "parse_percentiles"]

"""Which tool wrote a result file, from its first bytes (`detect_format`).

Its own module so that the reader (which suggests the right importer for a foreign file) and
the importers share it without importing each other.

>>> FORMATS
('ridgeline', 'vllm', 'aiperf', 'guidellm', 'llmperf')
"""

from __future__ import annotations

import json
from pathlib import Path

FORMATS = ("ridgeline", "vllm", "aiperf", "guidellm", "llmperf")
_PEEK_BYTES = 65_536


def detect_format(path: str | Path) -> str | None:
    """Guess the format of a result file from its first bytes; None when unknown."""
    p = Path(path)
    if p.suffix == ".gz":
        return "ridgeline"
    with open(p, "rb") as fh:
        head = fh.read(_PEEK_BYTES).decode("utf-8", errors="replace")
    text = head.lstrip()
    if not text:
        return None
    first_line = text.split("\n", 1)[0]
    try:
        first = json.loads(first_line)
    except (ValueError, RecursionError):
        first = None
    if isinstance(first, dict):
        if first.get("type") == "header":
            return "ridgeline"
        if "metadata" in first and ("metrics" in first or "error" in first):
            return "aiperf"
    if text.startswith("["):
        if "end_to_end_latency_s" in head or "ttft_s" in head or "number_output_tokens" in head:
            return "llmperf"
        return None
    if text.startswith("{"):
        if '"benchmarks"' in head and ("guidellm" in head or '"requests"' in head
                                       or "generative_benchmark" in head):
            return "guidellm"
        if any(k in head for k in ('"ttfts"', '"request_throughput"', '"endpoint_type"',
                                   '"mean_ttft_ms"', '"num_prompts"')):
            return "vllm"
        if '"benchmarks"' in head:
            return "guidellm"
    return None

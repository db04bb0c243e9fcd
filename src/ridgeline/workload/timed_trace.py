"""A replay file read into arrays (`TimedTrace`), and the checks of its fields (a token
count, a timestamp): every replay format's reader (workload/timed_trace_reader.py, trace_formats.py,
load_test_configs.py) builds one, so it lives apart from any of them.

>>> _count(12.0, "input_length", "line 3"), _time(1500, "timestamp", "line 3", scale=1e-3)
(12, 1.5)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ridgeline.errors import RidgelineError

MAX_RECORD_TOKENS = 10_000_000     # the largest context of any served model
MAX_TIMESTAMP_S = 1e10             # 317 years after the epoch (or the trace's start)
# Bounds on a replay file: rows beyond this are corrupt, not traffic.
MAX_REPLAY_ROWS = 20_000_000       # BurstGPT's whole release is 5.3 M rows
# `format=` of a replay spec: the files' own formats, and load-test configs read as
# traces (here, not with the readers, so that checking a spec loads no reader)
OTHER_FORMATS = ("azure", "vidur", "vidur-lengths", "vidur-arrivals", "sharegpt")
UNTIMED_FORMATS = ("vidur-lengths", "sharegpt")
CONFIG_FORMATS = ("inference-perf", "vllm-result", "guidellm", "aiperf")
FORMATS = ("burstgpt", "mooncake", "session", *OTHER_FORMATS, *CONFIG_FORMATS)


@dataclass
class TimedTrace:
    times_s: np.ndarray          # float64, sorted, first at 0
    prompt_tokens: np.ndarray    # int64 (-1: unknown)
    output_tokens: np.ndarray    # int64 (-1: unknown)
    format: str
    # Mooncake: ids of each prompt's blocks (equal ids = equal content), in the same order
    hash_ids: list[tuple[int, ...]] | None = None
    # shared prefixes for the simulator's prefix cache (Mooncake's hash_ids mapped by
    # workload/prefix_groups.py; a load-test config's prompt groups): group id (-1: none)
    # and shared leading tokens per request
    prefix_group: np.ndarray | None = None
    prefix_tokens: np.ndarray | None = None
    # formats without timestamps (ShareGPT, Vidur length files): False, times_s all 0
    timed: bool = True
    # the prompt tokens one hash id stands for (Mooncake 512, a session trace 16)
    block_tokens: int = 512
    # a session trace: each request's session (its root request's chat id), in time order,
    # and the seconds from its parent request's arrival to its own (NaN for a session's
    # first request): the user's or agent's think time plus the parent's serving time
    session: np.ndarray | None = None
    parent_gap_s: np.ndarray | None = None


def _count(value: object, what: str, where: str) -> int:
    """A token count: a whole number from 0 to MAX_RECORD_TOKENS (-1 when absent)."""
    if value is None:
        return -1
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        x = float("nan")
    if not (0 <= x <= MAX_RECORD_TOKENS and x == int(x)):
        raise RidgelineError(f"{where}: {what}: got {_short(value)}; allowed: a whole number of "
                             f"tokens from 0 to {MAX_RECORD_TOKENS:,}")
    return int(x)


def _time(value: object, what: str, where: str, scale: float = 1.0) -> float:
    """A timestamp: finite, from 0 to MAX_TIMESTAMP_S seconds (after `scale`)."""
    try:
        x = float(value) * scale  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        x = float("nan")
    if not 0 <= x <= MAX_TIMESTAMP_S:
        raise RidgelineError(f"{where}: {what}: got {_short(value)}; allowed: a finite time >= 0 "
                             f"(at most {MAX_TIMESTAMP_S:g} s)")
    return x


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."

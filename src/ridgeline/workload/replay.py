"""Timestamped production traces: BurstGPT CSV and Mooncake JSONL, read into arrays.

One parser for every consumer (simulate's `--arrival replay:`, bench datasets):

- BurstGPT CSV (header ``Timestamp,Model,Request tokens,Response tokens,Total tokens,
  Log Type``): Timestamp in seconds.
- Mooncake JSONL (one object per line: ``timestamp`` in milliseconds, ``input_length``,
  ``output_length``).

Times are sorted and shifted so the first request is at 0, then divided by `speedup`
(speedup=2 replays the trace at twice its rate: every inter-arrival time halves).

>>> import tempfile, os
>>> p = os.path.join(tempfile.mkdtemp(), "m.jsonl")
>>> _ = open(p, "w").write('{"timestamp": 1000, "input_length": 5, "output_length": 2}\\n'
...                        '{"timestamp": 3000, "input_length": 7, "output_length": 3}\\n')
>>> t = read_timed_trace(p, speedup=2.0)
>>> t.times_s.tolist(), t.prompt_tokens.tolist(), t.format
([0.0, 1.0], [5, 7], 'mooncake')
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ridgeline.errors import RidgelineError

BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")


@dataclass
class TimedTrace:
    times_s: np.ndarray          # float64, sorted, first at 0
    prompt_tokens: np.ndarray    # int64 (-1: unknown)
    output_tokens: np.ndarray    # int64 (-1: unknown)
    format: str
    # Mooncake: ids of each prompt's blocks (equal ids = equal content), in the same order
    hash_ids: list[tuple[int, ...]] | None = None


def sniff_format(path: Path) -> str:
    """'burstgpt', 'mooncake', or 'other' (a trace or a column of seconds)."""
    with open(path, encoding="utf-8") as fh:
        first = fh.readline().strip()
    if first.startswith("{"):
        try:
            obj = json.loads(first)
        except json.JSONDecodeError:
            return "other"
        return "mooncake" if "timestamp" in obj and "input_length" in obj else "other"
    cols = [c.strip() for c in first.split(",")]
    return "burstgpt" if all(c in cols for c in BURSTGPT_COLUMNS) else "other"


def read_timed_trace(path_text: str, speedup: float = 1.0, field: str = "--arrival"
                     ) -> TimedTrace:
    """Read a BurstGPT CSV or Mooncake JSONL file (see the module docstring)."""
    path = Path(path_text)
    if not path.is_file():
        raise RidgelineError(f"{field}: replay file {path_text!r} not found")
    if not speedup > 0:
        raise RidgelineError(f"{field}: speedup={speedup} must be > 0")
    fmt = sniff_format(path)
    t: list[float] = []
    p: list[int] = []
    o: list[int] = []
    h: list[tuple[int, ...]] = []
    if fmt == "burstgpt":
        with open(path, encoding="utf-8", newline="") as fh:
            for lineno, row in enumerate(csv.DictReader(fh), 2):
                try:
                    t.append(float(row["Timestamp"]))
                    p.append(int(float(row["Request tokens"])))
                    o.append(int(float(row["Response tokens"])))
                except (TypeError, ValueError):
                    raise RidgelineError(f"{field}: {path_text!r} line {lineno}: not a "
                                         "BurstGPT row (Timestamp, Request tokens, Response "
                                         "tokens)") from None
    elif fmt == "mooncake":
        with open(path, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                    t.append(float(obj["timestamp"]) / 1e3)
                    p.append(int(obj.get("input_length", -1)))
                    o.append(int(obj.get("output_length", -1)))
                    h.append(tuple(int(x) for x in obj.get("hash_ids") or ()))
                except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                    raise RidgelineError(f"{field}: {path_text!r} line {lineno}: not a "
                                         "Mooncake record (timestamp ms, input_length, "
                                         "output_length)") from None
    else:
        raise RidgelineError(f"{field}: {path_text!r} is neither BurstGPT CSV nor Mooncake "
                             "JSONL")
    if not t:
        raise RidgelineError(f"{field}: replay file {path_text!r} holds no requests")
    times = np.asarray(t, dtype=np.float64)
    order = np.argsort(times, kind="stable")
    times = (times[order] - times[order[0]]) / speedup
    return TimedTrace(times, np.asarray(p, dtype=np.int64)[order],
                      np.asarray(o, dtype=np.int64)[order], fmt,
                      [h[i] for i in order] if fmt == "mooncake" else None)

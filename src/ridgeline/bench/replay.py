"""Replay a production trace: arrival times and lengths from BurstGPT or Mooncake files.

`--replay FILE [--replay-speed X]`: request i is sent at its recorded time (relative to the
first, divided by X) with a prompt of its recorded input length and `max_tokens` = its
recorded output length (add `--ignore-eos` so the server produces all of them).

Formats (detected from the content):

    BurstGPT CSV   header `Timestamp,Model,Request tokens,Response tokens,Total tokens,
                   Log Type`; Timestamp in seconds. Rows with 0 response tokens (failed
                   requests in BurstGPT) are skipped.
    Mooncake JSONL one object per line: `timestamp` (ms), `input_length`, `output_length`,
                   `hash_ids` (ids of the prompt's 512-token blocks; equal ids = equal
                   content, so the trace's own prefix sharing is reproduced: block h is the
                   same text in every request that lists it)

Prompt texts: unique per request except where a Mooncake trace says blocks are shared (the
header records `prompt_reuse: "trace hash_ids"`).

>>> import tempfile, os
>>> p = os.path.join(tempfile.mkdtemp(), "b.csv")
>>> _ = open(p, "w").write("Timestamp,Model,Request tokens,Response tokens,Total tokens,"
...                        "Log Type\\n5,ChatGPT,100,20,120,Conversation log\\n"
...                        "7.5,GPT-4,50,0,50,Conversation log\\n9,GPT-4,30,4,34,API log\\n")
>>> r = load_replay(p, speed=2.0)
>>> r.kind, r.times_s, r.prompt_tokens, r.output_tokens
('burstgpt', (0.0, 2.0), (100, 30), (20, 4))
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ridgeline.bench.client import BenchRequest
from ridgeline.errors import RidgelineError

MOONCAKE_BLOCK_TOKENS = 512
_BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")


@dataclass(frozen=True)
class ReplayTrace:
    """Arrival times (s, from 0, already divided by the speed) and lengths per request."""

    path: str
    kind: str
    speed: float
    times_s: tuple[float, ...]
    prompt_tokens: tuple[int, ...]
    output_tokens: tuple[int, ...]
    hash_ids: tuple[tuple[int, ...], ...] | None = None
    skipped: int = 0

    def describe(self) -> dict[str, object]:
        out: dict[str, object] = {"kind": f"replay:{self.kind}", "path": self.path,
                                  "replay_speed": self.speed, "requests": len(self.times_s)}
        if self.skipped:
            out["skipped_rows"] = self.skipped
        return out


def load_replay(path: str, speed: float = 1.0) -> ReplayTrace:
    if not (speed > 0 and math.isfinite(speed)):
        raise RidgelineError(f"--replay-speed: got {speed:g}; allowed: > 0")
    p = Path(path)
    if not p.is_file():
        raise RidgelineError(f"--replay: file {path!r} not found")
    with open(p, encoding="utf-8") as fh:
        first = fh.readline().strip()
    if first.startswith("{"):
        return _mooncake(p, speed)
    if all(c in first for c in _BURSTGPT_COLUMNS):
        return _burstgpt(p, speed)
    raise RidgelineError(f"--replay: {path!r} is neither a BurstGPT CSV (header with "
                         "Timestamp, Request tokens, Response tokens) nor a Mooncake JSONL "
                         "(timestamp, input_length, output_length)")


def _finish(path: Path, kind: str, speed: float, rows: list[tuple], skipped: int,
            with_hashes: bool) -> ReplayTrace:
    if not rows:
        raise RidgelineError(f"--replay: {str(path)!r} holds no usable requests")
    rows.sort(key=lambda r: r[0])
    t0 = rows[0][0]
    return ReplayTrace(
        str(path), kind, speed, tuple((r[0] - t0) / speed for r in rows),
        tuple(r[1] for r in rows), tuple(r[2] for r in rows),
        tuple(r[3] for r in rows) if with_hashes else None, skipped)


def _burstgpt(path: Path, speed: float) -> ReplayTrace:
    rows: list[tuple] = []
    skipped = 0
    with open(path, newline="", encoding="utf-8") as fh:
        for lineno, row in enumerate(csv.DictReader(fh), 2):
            try:
                t = float(row["Timestamp"])
                n_in = int(float(row["Request tokens"]))
                n_out = int(float(row["Response tokens"]))
            except (KeyError, TypeError, ValueError):
                raise RidgelineError(f"--replay: {str(path)!r} line {lineno}: Timestamp, "
                                     "Request tokens and Response tokens must be numbers"
                                     ) from None
            if n_out < 1 or n_in < 1:
                skipped += 1  # BurstGPT logs failed requests with 0 response tokens
                continue
            rows.append((t, n_in, n_out, ()))
    return _finish(path, "burstgpt", speed, rows, skipped, False)


def _mooncake(path: Path, speed: float) -> ReplayTrace:
    rows: list[tuple] = []
    skipped = 0
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                t = float(obj["timestamp"]) / 1e3
                n_in, n_out = int(obj["input_length"]), int(obj["output_length"])
                hashes = tuple(int(h) for h in obj.get("hash_ids") or ())
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                raise RidgelineError(f"--replay: {str(path)!r} line {lineno}: expected "
                                     "{timestamp, input_length, output_length, hash_ids}"
                                     ) from None
            if n_out < 1 or n_in < 1:
                skipped += 1
                continue
            rows.append((t, n_in, n_out, hashes))
    return _finish(path, "mooncake", speed, rows, skipped, True)


def replay_requests(trace: ReplayTrace, n: int, nonce: int, tokenizer: object = None
                    ) -> list[BenchRequest]:
    """The first n requests: prompts of the recorded lengths (shared blocks where the
    Mooncake hash_ids say so), max_tokens = recorded output length."""
    from ridgeline.bench.dataset import exact_text
    from ridgeline.bench.prompts import text_rng

    if n > len(trace.times_s):
        raise RidgelineError(f"--requests: {n} asked but the replay file holds "
                             f"{len(trace.times_s)} requests")
    rng = text_rng(0, nonce, 0)
    blocks: dict[int, str] = {}

    def block(h: int) -> str:
        if h not in blocks:
            blocks[h] = exact_text(MOONCAKE_BLOCK_TOKENS, np.random.default_rng(
                [nonce, h, 0xB10C]), tokenizer)  # type: ignore[arg-type]
        return blocks[h]

    out = []
    for i in range(n):
        n_in = trace.prompt_tokens[i]
        hashes = trace.hash_ids[i] if trace.hash_ids is not None else ()
        if hashes:
            # Full blocks from the shared table; the last block is this request's own tail.
            n_full = min(len(hashes), n_in // MOONCAKE_BLOCK_TOKENS)
            parts = [block(h) for h in hashes[:n_full]]
            tail = n_in - n_full * MOONCAKE_BLOCK_TOKENS
            if tail > 0:
                parts.append(exact_text(tail, rng, tokenizer))  # type: ignore[arg-type]
            prompt = " ".join(parts)
            tag_at = len(prompt) - len(parts[-1]) if tail > 0 else len(prompt)
        else:
            prompt, tag_at = exact_text(n_in, rng, tokenizer), 0  # type: ignore[arg-type]
        out.append(BenchRequest(f"r{i}", prompt, trace.output_tokens[i], n_in, tag_at=tag_at))
    return out


__all__ = ["MOONCAKE_BLOCK_TOKENS", "ReplayTrace", "load_replay", "replay_requests"]

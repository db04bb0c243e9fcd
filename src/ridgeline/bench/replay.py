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
    Session JSONL  the Qwen-Bailian traces: `chat_id`, `parent_chat_id`, `timestamp` (s),
                   lengths, `hash_ids` of 16-token blocks (shared the same way)
    and the Azure and Vidur traces (the one parser, ridgeline.workload.timed_trace_reader).

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

from dataclasses import dataclass

import numpy as np

from ridgeline.bench.client import BenchRequest
from ridgeline.bench.dataset import exact_text
from ridgeline.bench.prompts import text_rng
from ridgeline.errors import RidgelineError
from ridgeline.workload.timed_trace_reader import MAX_SPEEDUP, MIN_SPEEDUP, read_timed_trace

MOONCAKE_BLOCK_TOKENS = 512
# A recorded gap longer than this (after --replay-speed) would leave the load generator
# idle, to all appearances hung: refused unless --duration bounds the run.
MAX_REPLAY_GAP_S = 600.0


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
    # `--workload` (bench/workload_plan.py): shared prefixes as the simulator's groups (the
    # first prefix_tokens[i] prompt tokens of request i are group prefix_group[i]'s text;
    # -1: none), a closed loop of `users` (times unused), and the workload's description
    prefix_group: tuple[int, ...] | None = None
    prefix_tokens: tuple[int, ...] | None = None
    users: int | None = None
    workload: dict[str, object] | None = None
    # the prompt tokens one hash id stands for (Mooncake 512, a session trace 16)
    block_tokens: int = MOONCAKE_BLOCK_TOKENS

    def describe(self) -> dict[str, object]:
        out: dict[str, object] = {"kind": f"replay:{self.kind}", "path": self.path,
                                  "replay_speed": self.speed, "requests": len(self.times_s)}
        if self.skipped:
            out["skipped_rows"] = self.skipped
        if self.workload is not None:
            out["kind"] = "workload"
            out["workload"] = self.workload
            if self.prefix_group is not None:
                out["prefix_groups"] = len({g for g in self.prefix_group if g >= 0})
        return out


def load_replay(path: str, speed: float = 1.0) -> ReplayTrace:
    """The file through the one parser (`ridgeline.workload.timed_trace_reader`), without the
    rows that cannot be replayed (no prompt or no response tokens: BurstGPT's failed requests)."""
    if not (MIN_SPEEDUP <= speed <= MAX_SPEEDUP):
        raise RidgelineError(f"--replay-speed: got {speed:g}; allowed: {MIN_SPEEDUP:g} to "
                             f"{MAX_SPEEDUP:g}")
    tt = read_timed_trace(path, speed, field="--replay")
    if not tt.timed:
        raise RidgelineError(f"--replay: {path!r} ({tt.format}) has no timestamps; allowed: a "
                             "timed trace (a file of prompts: --dataset)")
    keep = np.flatnonzero((tt.prompt_tokens >= 1) & (tt.output_tokens >= 1))
    if keep.size == 0:
        raise RidgelineError(f"--replay: {path!r} holds no usable requests")
    times = tt.times_s[keep] - tt.times_s[keep[0]]
    return ReplayTrace(
        str(path), tt.format, speed, tuple(float(x) for x in times),
        tuple(int(x) for x in tt.prompt_tokens[keep]),
        tuple(int(x) for x in tt.output_tokens[keep]),
        tuple(tt.hash_ids[i] for i in keep) if tt.hash_ids is not None else None,
        int(tt.times_s.size - keep.size), block_tokens=tt.block_tokens)


def check_replay_gaps(trace: ReplayTrace, requests: int | None,
                      duration_s: float | None, field: str = "--replay") -> list[str]:
    """Refuse a replay of the first `requests` requests with a gap over MAX_REPLAY_GAP_S
    (unless `duration_s` bounds the run); warning lines when the replay outlasts it."""
    times = np.asarray(trace.times_s[:requests or len(trace.times_s)], dtype=np.float64)
    if times.size < 2:
        return []
    gaps = np.diff(times)
    i = int(np.argmax(gaps))
    span_s = float(times[-1])
    if duration_s is None and gaps[i] > MAX_REPLAY_GAP_S:
        speed = trace.speed * gaps[i] / 60.0
        fix = (f"pass --replay-speed {speed:.3g} (1 minute) or --duration to bound the run"
               if field == "--replay" else f"pass --duration to bound the run, or --requests "
               f"{i + 1} to stop before it")
        raise RidgelineError(
            f"{field}: {trace.path!r} waits {gaps[i]:,.0f} s between requests {i} and "
            f"{i + 1}" + (f" (at --replay-speed {trace.speed:g})" if field == "--replay"
                          else "") + f"; allowed: gaps up to {MAX_REPLAY_GAP_S:g} s: {fix}")
    # The schedule keeps arrivals before the duration (bench/load.py): one at it is not sent.
    if duration_s is not None and span_s >= duration_s:
        return [f"warning: {field}: the {times.size:,} requests span {span_s:,.0f} s, "
                f"reaching --duration {duration_s:g} s: those at or after it are not sent"]
    return []


def replay_requests(trace: ReplayTrace, n: int, nonce: int, tokenizer: object = None
                    ) -> list[BenchRequest]:
    """The first n requests: prompts of the recorded lengths (shared blocks where the
    Mooncake hash_ids say so, a group's shared text where prefix groups say so),
    max_tokens = recorded output length."""
    if n > len(trace.times_s):
        raise RidgelineError(f"--requests: {n} asked but the replay file holds "
                             f"{len(trace.times_s)} requests")
    rng = text_rng(0, nonce, 0)
    blocks: dict[int, str] = {}

    def block(h: int) -> str:
        if h not in blocks:
            blocks[h] = exact_text(trace.block_tokens, np.random.default_rng(
                [nonce, h, 0xB10C]), tokenizer)  # type: ignore[arg-type]
        return blocks[h]

    prefixes: dict[tuple[int, int], str] = {}

    def prefix(group: int, k: int) -> str:
        if (group, k) not in prefixes:
            prefixes[group, k] = exact_text(k, np.random.default_rng(
                [nonce, group, k, 0x9F1C]), tokenizer)  # type: ignore[arg-type]
        return prefixes[group, k]

    out = []
    for i in range(n):
        n_in = trace.prompt_tokens[i]
        hashes = trace.hash_ids[i] if trace.hash_ids is not None else ()
        group = trace.prefix_group[i] if trace.prefix_group is not None else -1
        if hashes:
            # Full blocks from the shared table; the last block is this request's own tail.
            n_full = min(len(hashes), n_in // trace.block_tokens)
            parts = [block(h) for h in hashes[:n_full]]
            tail = n_in - n_full * trace.block_tokens
            if tail > 0:
                parts.append(exact_text(tail, rng, tokenizer))  # type: ignore[arg-type]
            prompt = " ".join(parts)
            tag_at = len(prompt) - len(parts[-1]) if tail > 0 else len(prompt)
        elif group >= 0 and trace.prefix_tokens is not None and trace.prefix_tokens[i] > 0:
            # the group's shared text, then this request's own tail
            k = min(trace.prefix_tokens[i], n_in)
            prompt = prefix(group, k)
            if n_in > k:
                prompt += " " + exact_text(n_in - k, rng, tokenizer)  # type: ignore[arg-type]
            tag_at = len(prompt)
        else:
            prompt, tag_at = exact_text(n_in, rng, tokenizer), 0  # type: ignore[arg-type]
        out.append(BenchRequest(f"r{i}", prompt, trace.output_tokens[i], n_in, tag_at=tag_at))
    return out


__all__ = ["MAX_REPLAY_GAP_S", "MOONCAKE_BLOCK_TOKENS", "ReplayTrace", "check_replay_gaps",
           "load_replay", "replay_requests"]

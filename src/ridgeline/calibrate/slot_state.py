"""llama-server's LRU slot order, followed from the requests a client sent.

With per-slot KV (`-np N`, no `-kvu`) the slot model needs the server's LRU order when a
load point starts (docs/calibration.md, "The slot model"). ridgeline rarely has the server's
log, but it always has the client's side: which requests were sent when, when each ended,
and which were pinned (`id_slot`). Replaying them through `sim.slots.replay_requests` gives
the order they leave behind:

- `calibrate engine` replays its own probes and stores the order in the profile
  (`scheduling.slot_order_after_calibration`), cross-checked against `GET /slots` when the
  server answers it;
- `verify` replays each measured trace's send and end times to get the order the next trace
  starts from. That uses the measured arrivals and finish times only, the server's state,
  not the latencies being predicted.

Ends closer than `same_step_s` are one engine step (released in slot order): half the
profile's smallest step time, since two different steps end at least one step apart, while
one step's streams reach the client within a few ms of each other.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ridgeline.sim.slots import replay_requests
from ridgeline.trace.importers import load_trace

Request = tuple[float, float, "int | None"]   # (send, end) wall-clock seconds, id_slot


def pin_of(pin_slots: bool, kind: str, batch: int) -> int:
    """The `pin_slots` a probe point's requests are sent with (0: LRU). Decode and context
    probes: B streams in slots 0..B-1. Prefill probes go to slot 0 too: their short prompts
    (16 tokens) can share > 10% with a cached one (the bench's shared prefix), and
    llama-server's default `-sps 0.1` would then pick the slot by similarity, which the
    slot-order replay (below) cannot see. The open probe keeps LRU."""
    return batch if pin_slots and kind in ("decode", "context", "prefill") else 0


def same_step_s_of(profile: Any) -> float:
    """Ends closer than this are one engine step: half the smallest fitted step time."""
    return 0.5 * float(min(profile.step_s))


def trace_start_unix_s(trace: Any) -> float | None:
    """Wall-clock time of a trace's first send; None when the trace has no wall clock."""
    t0 = getattr(trace.header, "start_time_unix_s", None)
    sent = np.asarray(trace.sent_s, dtype=np.float64)
    if t0 is None or not math.isfinite(float(t0)) or not np.isfinite(sent).any():
        return None
    return float(t0) + float(np.nanmin(sent))


def trace_requests(trace: Any, pin: Callable[[str], int | None] | None = None,
                   offset_s: float = 0.0) -> list[Request]:
    """(send, end, id_slot) of every request the trace sent (failed ones too: they may have
    held a slot), shifted by `offset_s`. A request's end is its `end_s`, else its last output
    event, else its send time."""
    out: list[Request] = []
    offs = trace.event_offsets
    for i, rid in enumerate(trace.ids):
        s = float(trace.sent_s[i])
        if not math.isfinite(s):
            continue
        e = float(trace.end_s[i])
        if not math.isfinite(e):
            e = float(trace.event_times_s[offs[i + 1] - 1]) if offs[i + 1] > offs[i] else s
        out.append((s + offset_s, e + offset_s, pin(rid) if pin else None))
    return out


def id_slot_of(rid: str, pin_slots: int) -> int:
    """The `id_slot` the bench client sends with `pin_slots` (bench/client.py)."""
    digits = rid[len(rid.rstrip("0123456789")):]
    return int(digits or 0) % pin_slots


def probe_requests(points: list[Any], pinned: bool) -> tuple[list[Request], float | None]:
    """calibrate's requests, in wall-clock seconds, and when the last one ended. With
    `pinned`, decode, context and prefill probes carry `id_slot` = request number mod B
    (`pin_of`); the bench's warm-up requests (not in the trace, run to completion before its
    t = 0) are put just before the trace's first send."""
    out: list[Request] = []
    for pt in points:
        tr = load_trace(pt.trace_path)
        t0 = getattr(tr.header, "start_time_unix_s", None)
        if t0 is None:
            raise ValueError(f"{pt.trace_path}: no start_time_unix_s")
        b = pin_of(pinned, pt.kind, int(pt.batch))

        def pin(rid: str, b: int = b) -> int | None:
            return id_slot_of(rid, b) if b else None

        bench = getattr(tr.header, "bench", None) or {}
        warm = int(bench.get("warmup_requests_excluded") or 0) if isinstance(bench, dict) else 0
        first = float(t0) + (float(np.nanmin(tr.sent_s)) if len(tr.ids) else 0.0)
        for k in range(warm):       # sequential, ending before the trace's first send
            at = first - 1e-3 * (warm - k)
            out.append((at, at + 5e-4, pin(f"warmup-{k}")))
        out += trace_requests(tr, pin, float(t0))
    ends = [e for _, e, _ in out]
    return out, (max(ends) if ends else None)


def server_slots(base_url: str, timeout_s: float = 5.0) -> list[dict[str, Any]] | None:
    """llama-server's `GET /slots` (None when it does not answer: `--no-slots`, other
    engines)."""
    import json
    import urllib.request

    root = base_url.rstrip("/")
    root = root[:-3] if root.endswith("/v1") else root
    try:
        with urllib.request.urlopen(root + "/slots", timeout=timeout_s) as resp:
            data = json.loads(resp.read(1 << 22))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, list) and all(isinstance(d, dict) for d in data) else None


def cross_check(order: list[int], released: list[int], slots: list[dict[str, Any]] | None
                ) -> str:
    """Compare the replay with `/slots`: a slot never used has no `id_task` there, and must
    be one the replay never used (`released`: the slots it used, by last release).
    Returns the sentence for the profile's provenance."""
    if slots is None:
        return "not cross-checked (GET /slots did not answer)"
    never_server = sorted(int(d["id"]) for d in slots if "id" in d and "id_task" not in d)
    never_replay = sorted(set(order) - set(released))
    if never_server != never_replay:
        return (f"GET /slots DISAGREES: never-used slots {never_server} there, "
                f"{never_replay} in the replay")
    by_task = [int(d["id"]) for d in sorted((d for d in slots if "id_task" in d),
                                            key=lambda d: int(d["id_task"]))]
    same = by_task == released
    return (f"GET /slots agrees on the never-used slots {never_server or 'none'}; its last "
            f"tasks' arrival order {' '.join(map(str, by_task))} "
            + ("matches the replayed release order" if same else
               f"vs release order {' '.join(map(str, released))} (they differ when "
               "requests finish out of arrival order)"))


def calibration_slot_order(points: list[Any], pinned: bool, n_slots: int, same_step_s: float,
                           base_url: str | None = None) -> tuple[list[int], float | None, str]:
    """(the LRU order calibrate leaves behind, when, its provenance sentence)."""
    reqs, end = probe_requests(points, pinned)
    rep = replay_requests(reqs, n_slots, None, same_step_s)
    note = (f"replayed from calibrate's {len(reqs)} requests (pinned probes in their id_slot, "
            f"others by LRU; ends within {same_step_s * 1e3:.3g} ms = one step; {rep.waited} "
            "waited for a slot)")
    if base_url:
        note += "; " + cross_check(rep.order, rep.released, server_slots(base_url))
    return rep.order, end, note


__all__ = ["calibration_slot_order", "cross_check", "id_slot_of", "probe_requests",
           "same_step_s_of", "server_slots", "trace_requests", "trace_start_unix_s"]

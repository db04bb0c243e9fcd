"""The simulator's engine core in C (`_core.c`), loaded with ctypes, and when it applies.

`simulate` runs a workload here when the C core is built and the run is one it covers:
the fast mode and the roofline step time through its compiled path (`CompiledStep`), with
any arrivals (open or closed loop), any router, prefix groups with or without the prefix
cache, and P/D disaggregation. Other step-time models and the step-by-step mode run in the
Python engine, which stays the reference: the two give the same trace bit for bit
(tests/sim/test_sim_core.py), the C core only faster (docs/BENCHMARKS.md).

`RIDGELINE_SIM_CORE=python` forces the Python engine (tests compare the two with it).
Without a C compiler at install time the extension is not built and every run takes the
Python engine; `ridgeline simulate --json` says which one ran (`simulation.engine_core`).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from ridgeline.perf.ops import WORK_VARS
from ridgeline.sim.engine import EngineStats, _compiled_step
from ridgeline.sim.result import (
    STATUS_OK,
    STATUS_REJECTED,
    SimResult,
    expand_segments,
    stream_summary,
)

_I64P = ctypes.POINTER(ctypes.c_int64)
_F64P = ctypes.POINTER(ctypes.c_double)
_NVARS = len(WORK_VARS)
_C_NVARS = 11   # _core.c's NVARS: the step-time terms it reads per operator
_ROUTERS = {"round-robin": 0, "least-outstanding": 1, "prefix-affinity": 2, "least-kv": 3}
_STAT_COLUMNS = 11
# Arrivals handed to the core per call (progress and Ctrl-C are seen between calls).
DISPATCH_WINDOW = 1 << 14
_lib: Any = None
_lib_error: str | None = None
# The extension is optional (not built without a C compiler at install time): its file is
# found here, loaded with ctypes on first use.
_core_file: str | None = None
_core_missing: str | None = None
try:
    from ridgeline.sim import _core  # type: ignore[attr-defined]

    _core_file = _core.__file__
except ImportError as exc:
    _core_missing = str(exc)


def _load() -> Any:
    """The shared library, or None (not built; the reason in `_lib_error`)."""
    global _lib, _lib_error
    if _lib is not None or _lib_error is not None:
        return _lib
    try:
        if _core_file is None:
            raise OSError(_core_missing)
        lib = ctypes.CDLL(_core_file)
    except OSError as exc:
        _lib_error = f"the C engine core is not built ({exc})"
        return None
    lib.rl_new.restype = ctypes.c_void_p
    lib.rl_new.argtypes = [_I64P, _F64P, _F64P, _F64P, _F64P, _F64P]
    lib.rl_free.argtypes = [ctypes.c_void_p]
    lib.rl_run.restype = ctypes.c_int64
    lib.rl_run.argtypes = [ctypes.c_void_p, _F64P, _I64P, _I64P, _I64P, _I64P, _F64P,
                           ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64]
    lib.rl_pending.argtypes = [ctypes.c_void_p, _I64P]
    lib.rl_drain.argtypes = [ctypes.c_void_p, _I64P, _I64P, _I64P, _I64P, _I64P, _F64P,
                             _F64P, _F64P, _I64P, _F64P]
    lib.rl_set_direct.argtypes = [ctypes.c_void_p, _F64P, _I64P, ctypes.c_int64]
    lib.rl_set_xfer.argtypes = [ctypes.c_void_p, _F64P, _F64P, ctypes.c_int64]
    lib.rl_stats.argtypes = [ctypes.c_void_p, _I64P]
    lib.rl_step_seconds.restype = ctypes.c_double
    lib.rl_step_seconds.argtypes = [ctypes.c_void_p] + [ctypes.c_int64] * 6
    _lib = lib
    return lib


def available() -> bool:
    return _load() is not None


def _ptr(a: np.ndarray, kind: Any) -> Any:
    return a.ctypes.data_as(kind)


def blocker(wl: Any, config: Any, step_model: Any, cluster: Any, mode: str) -> str | None:
    """Why this run takes the Python engine (None: the C core runs it)."""
    why = engine_blocker(step_model, config)
    if why:
        return why
    if mode != "fast":
        return "the step-by-step reference mode"
    if getattr(wl, "timeout_s", None) is not None:
        return "a client timeout (aborts run on the Python engine, step mode)"
    if getattr(wl, "user_of", None) is not None:
        return "closed-loop users with their own start times (a replayed measurement)"
    if getattr(cluster, "own_pools", False):
        return ("prefill and decode pools with their own engine configurations (the C core "
                "holds one)")
    if cluster.replicas > 1 and cluster.router not in _ROUTERS:
        return f"router {cluster.router}"
    if len(wl) and (int(wl.prompt_tokens.min()) < 1 or int(wl.output_tokens.min()) < 1):
        return "a request with no prompt or output tokens"
    grouped = wl.prefix_group is not None and bool(np.any(wl.prefix_group >= 0))
    if grouped and (wl.prefix_tokens is None or bool(np.any(
            (wl.prefix_group >= 0) & ((wl.prefix_tokens < 0)
                                      | (wl.prefix_tokens > wl.prompt_tokens))))):
        return "prefix tokens outside [0, prompt tokens]"   # the Python engine's error
    return None


def engine_blocker(step_model: Any, config: Any) -> str | None:
    """Why the C core cannot run this engine at all (None: it can). Also the reason a P/D
    run cannot stream: only the C core carries a request's first token across the
    hand-off from a prefill replica to a decode one."""
    if os.environ.get("RIDGELINE_SIM_CORE", "").lower() == "python":
        return "RIDGELINE_SIM_CORE=python"
    if _load() is None:
        return _lib_error
    if _NVARS != _C_NVARS:
        return f"the C core reads {_C_NVARS} work variables, perf/ops.py has {_NVARS}"
    if getattr(step_model, "_window", 0.0):
        return ("sliding-window layers (their min(T, w) KV reads are not a linear form of the "
                "step's sums, which the C core evaluates)")
    if not getattr(config, "vllm_loop", True):
        return ("the SGLang scheduler (prefill-first batches, new-token-ratio admission, lpm "
                "or overlap scheduling: the C core has vLLM's loop only)")
    if getattr(config, "capacity_policy", "vllm") != "vllm":
        return f"the {config.capacity_policy} capacity policy (TensorRT-LLM preset)"
    if _compiled(step_model, config) is None:
        return "a step-time model without the roofline's compiled path"
    return None


def _compiled(step_model: Any, config: Any) -> tuple[Any, list[float], list[float]] | None:
    compiled = _compiled_step(step_model)
    if compiled is None:
        return None
    rows = compiled.decode_rows(config.max_num_seqs + 1)
    if rows is None:
        return None
    return compiled, rows[0], rows[1]


class Core:
    """One run's C state (freed with the object)."""

    def __init__(self, config: Any, step_model: Any, replicas: int, router: str,
                 record_timeline: bool, cluster: Any = None, concurrency: int = 0) -> None:
        lib = _load()
        got = _compiled(step_model, config)
        if lib is None or got is None:
            raise RuntimeError("the C engine core does not apply")
        compiled, dec_p, dec_q = got
        prog = compiled.program
        self.lib = lib
        self.replicas = replicas
        rows = np.ascontiguousarray(prog["rows"], dtype=np.float64)
        cfg = np.array([replicas, _ROUTERS.get(router, 0), config.max_num_seqs,
                        config.max_num_batched_tokens, int(config.chunked_prefill),
                        config.block_size_tokens, config.num_kv_blocks, int(record_timeline),
                        len(dec_p), rows.shape[0], int(prog["has_jd"]), int(prog["has_lin"]),
                        int(prog["moe_u"]), int(config.enable_prefix_caching),
                        cluster.pd[0] if cluster is not None and cluster.pd else 0,
                        concurrency], dtype=np.int64)
        kv = ((cluster.kv_transfer_latency_s, cluster.kv_bytes_per_token,
               cluster.link_bandwidth_bytes_s, float(cluster.link_queue))
              if cluster is not None else (0.0, 0.0, 1.0, 0.0))
        fcfg = np.array([compiled.c_dc, compiled.m_dc, prog["num_experts"], prog["miss"], *kv],
                        dtype=np.float64)
        vecs = np.concatenate([prog["lin"], prog["jd_comp"], prog["jd_mem"]]).astype(
            np.float64)
        self._keep = (np.asarray(dec_p, dtype=np.float64), np.asarray(dec_q, dtype=np.float64),
                      rows.reshape(-1) if rows.size else np.zeros(1), vecs)
        dp, dq, rw, vv = self._keep
        self.handle = lib.rl_new(_ptr(cfg, _I64P), _ptr(fcfg, _F64P), _ptr(dp, _F64P),
                                 _ptr(dq, _F64P), _ptr(rw, _F64P), _ptr(vv, _F64P))
        if not self.handle:
            raise MemoryError("the C engine core could not allocate its state")

    def __del__(self) -> None:
        handle = getattr(self, "handle", None)
        if handle:
            self.lib.rl_free(handle)
            self.handle = None

    def step_seconds(self, pf_tokens: int, pf_pairs: int, pf_ctx: int, pf_seqs: int,
                     n_dec: int, dec_ctx: int) -> float:
        return float(self.lib.rl_step_seconds(self.handle, pf_tokens, pf_pairs, pf_ctx,
                                              pf_seqs, n_dec, dec_ctx))

    def run(self, arrival: np.ndarray | None, prompt: np.ndarray, output: np.ndarray,
            group: np.ndarray | None, prefix_tokens: np.ndarray | None,
            think: np.ndarray | None, max_dispatch: int, limit: int) -> int:
        """Dispatch up to `max_dispatch` arrivals. 0: all done; 1: outputs wait (drain
        them); 2: call again."""
        st = int(self.lib.rl_run(
            self.handle, None if arrival is None else _ptr(arrival, _F64P),
            _ptr(prompt, _I64P), _ptr(output, _I64P),
            None if group is None else _ptr(group, _I64P),
            None if prefix_tokens is None else _ptr(prefix_tokens, _I64P),
            None if think is None else _ptr(think, _F64P), prompt.size,
            0 if arrival is None else arrival.size, max_dispatch, limit))
        if st == -2:
            raise MemoryError("the C engine core ran out of memory")
        if st == -4:
            raise RuntimeError("the C engine core stopped (error 4): a request emitted more "
                               "tokens than it asked for")
        if st < 0:
            raise RuntimeError(f"the C engine core stopped (error {-st}): an engine made no "
                               "progress")
        return st

    def pending(self) -> tuple[int, int, int, int]:
        """Outputs, token times and timeline rows waiting; requests done so far."""
        sizes = np.zeros(4, dtype=np.int64)
        self.lib.rl_pending(self.handle, _ptr(sizes, _I64P))
        a, b, c, d = sizes.tolist()
        return a, b, c, d

    def drain(self) -> dict[str, np.ndarray]:
        n, n_ev, n_tl, _ = self.pending()
        i64 = {k: np.empty(n, dtype=np.int64) for k in ("id", "rep", "pre", "status", "ntok")}
        f64 = {k: np.empty(n, dtype=np.float64) for k in ("sent", "end")}
        events = np.empty(n_ev, dtype=np.float64)
        t_i64 = np.empty(6 * n_tl, dtype=np.int64)
        t_f64 = np.empty(2 * n_tl, dtype=np.float64)
        self.lib.rl_drain(self.handle, *(_ptr(i64[k], _I64P) for k in
                                         ("id", "rep", "pre", "status", "ntok")),
                          _ptr(f64["sent"], _F64P), _ptr(f64["end"], _F64P),
                          _ptr(events, _F64P), _ptr(t_i64, _I64P), _ptr(t_f64, _F64P))
        out: dict[str, np.ndarray] = {**i64, **f64, "events": events}
        ti, tf = t_i64.reshape(6, n_tl), t_f64.reshape(2, n_tl)
        out.update(t_rep=ti[0], t_batch=ti[1], t_pf=ti[2], t_dec=ti[3], t_used=ti[4],
                   t_wait=ti[5], t_start=tf[0], t_end=tf[1])
        return out

    def set_direct(self, events: np.ndarray, offsets: np.ndarray) -> None:
        """Write each request's token times straight to its slot of `events` (float64):
        request i's at events[offsets[i]:offsets[i + 1]] (int64, n + 1), sized by the tokens
        it asked for; `drain` then returns no token times. A request emitting more than its
        slot holds stops the run (error 4), never writes past it. Kept alive with the core."""
        assert events.dtype == np.float64 and offsets.dtype == np.int64
        assert events.flags.c_contiguous and offsets.flags.c_contiguous
        self._direct = (events, offsets)
        self.lib.rl_set_direct(self.handle, _ptr(events, _F64P), _ptr(offsets, _I64P),
                               offsets.size - 1)

    def set_xfer(self, wait_s: np.ndarray, transfer_s: np.ndarray) -> None:
        """P/D: write each handed-off request's link wait and transfer time to its entry
        (float64, one per request). Kept alive with the core."""
        assert wait_s.dtype == np.float64 and transfer_s.dtype == np.float64
        self._xfer = (wait_s, transfer_s)
        self.lib.rl_set_xfer(self.handle, _ptr(wait_s, _F64P), _ptr(transfer_s, _F64P),
                             min(wait_s.size, transfer_s.size))

    def stats(self) -> tuple[np.ndarray, tuple[int, int, int]]:
        out = np.zeros(_STAT_COLUMNS * self.replicas + 3, dtype=np.int64)
        self.lib.rl_stats(self.handle, _ptr(out, _I64P))
        per = out[:_STAT_COLUMNS * self.replicas].reshape(self.replicas, _STAT_COLUMNS)
        steps, batch_sum, max_used = out[-3:].tolist()
        return per, (steps, batch_sum, max_used)


def _engine_stats(per: np.ndarray, num_kv_blocks: int) -> list[dict[str, Any]]:
    out = []
    for row in per.tolist():
        running, waiting, used, pre, prompt, gen, fin, rej, steps, queries, hits = row
        out.append(EngineStats(
            num_running=running, num_waiting=waiting, kv_usage_fraction=used / num_kv_blocks,
            kv_blocks_used=used, num_kv_blocks=num_kv_blocks, num_preemptions_total=pre,
            prompt_tokens_total=prompt, generation_tokens_total=gen, num_finished_total=fin,
            num_rejected_total=rej, num_steps_total=steps,
            prefix_cache_queries_tokens_total=queries,
            prefix_cache_hits_tokens_total=hits).to_dict())
    return out


def _status_names(codes: np.ndarray) -> list[str]:
    names = (STATUS_OK, STATUS_REJECTED)
    return [names[c] for c in codes.tolist()]


def _gather(events: np.ndarray, ntok: np.ndarray, order: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """Token times in `order` of records whose times lie back to back in `events`."""
    starts = np.zeros(ntok.size, dtype=np.int64)
    np.cumsum(ntok[:-1], out=starts[1:])
    lens = ntok[order]
    offsets = np.zeros(ntok.size + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    some = lens > 0     # `expand_segments` takes non-empty segments (rejections have none)
    return offsets, expand_segments(events, starts[order][some], lens[some])


def run(wl: Any, config: Any, step_model: Any, cluster: Any,
        progress: Callable[[int], None] | None,
        sink: Callable[[Any], None] | None, chunk_requests: int) -> Any:
    """`simulate` on the C core (call only where `blocker` is None)."""
    n = len(wl)
    replicas = cluster.num_instances
    router = cluster.router if replicas > 1 else "round-robin"
    concurrency = int(wl.concurrency or 0) if wl.arrival_s is None else 0
    core = Core(config, step_model, replicas, router, record_timeline=sink is None,
                cluster=cluster, concurrency=concurrency)
    arrival = (np.ascontiguousarray(wl.arrival_s, dtype=np.float64)
               if wl.arrival_s is not None else None)
    think = None
    if concurrency:
        think = np.ascontiguousarray(wl.think_s if wl.think_s is not None else np.zeros(n),
                                     dtype=np.float64)
    prompt = np.ascontiguousarray(wl.prompt_tokens, dtype=np.int64)
    output = np.ascontiguousarray(wl.output_tokens, dtype=np.int64)
    group = ptoks = None
    if wl.prefix_group is not None and bool(np.any(wl.prefix_group >= 0)):
        group = np.ascontiguousarray(wl.prefix_group, dtype=np.int64)
        ptoks = np.ascontiguousarray(wl.prefix_tokens if wl.prefix_tokens is not None
                                     else np.zeros(n), dtype=np.int64)
    roles = (["prefill"] * cluster.pd[0] + ["decode"] * cluster.pd[1] if cluster.pd
             else ["mixed"] * replicas)
    # Without a sink every output is kept to the end, and the core writes each request's
    # token times straight into its slot of the result (id order, sized by the tokens it
    # asked for): no finish-order buffer, drain copy, concatenation or gather of them.
    limit = max(1, chunk_requests) if sink is not None else 1 << 62
    slots = None
    if sink is None:
        slots = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(output, out=slots[1:])
        direct = np.empty(int(slots[-1]), dtype=np.float64)
        core.set_direct(direct, slots)
        if cluster.pd:
            xfer = (np.full(n, np.nan), np.full(n, np.nan))
            core.set_xfer(*xfer)
    parts: list[dict[str, np.ndarray]] = []
    totals = {"finished": 0, "rejected": 0, "preemptions": 0, "chunks": 0}
    next_progress = 1000
    done = 0

    def flush() -> None:
        part = core.drain()
        if sink is None:
            if part["id"].size or part["t_rep"].size:
                parts.append(part)
            return
        ids = part["id"]
        order = np.argsort(ids, kind="stable")
        offsets, events = _gather(part["events"], part["ntok"], order)
        status = part["status"][order]
        rejected = int(np.count_nonzero(status))
        totals["finished"] += ids.size - rejected
        totals["rejected"] += rejected
        totals["preemptions"] += int(part["pre"].sum())
        totals["chunks"] += 1
        gid = ids[order]
        if gid.size:
            sink(SimResult(
                sent_s=part["sent"][order], end_s=part["end"][order],
                prompt_tokens=wl.prompt_tokens[gid], output_tokens=wl.output_tokens[gid],
                status=_status_names(status), replica=part["rep"][order],
                preemptions=part["pre"][order], event_offsets=offsets, event_times_s=events,
                timeline={}, engine_stats=[], mode="fast", roles=roles, request_ids=gid,
                core="c"))

    while True:
        st = core.run(arrival, prompt, output, group, ptoks, think, DISPATCH_WINDOW, limit)
        _, _, _, done = core.pending()
        if st == 1:
            flush()
        if progress is not None and done >= next_progress:
            next_progress = (done // 1000 + 1) * 1000
            progress(done)
        if st == 0:
            break
    flush()
    per, (steps, batch_sum, max_used) = core.stats()
    engine_stats = _engine_stats(per, config.num_kv_blocks)
    if sink is not None:
        return stream_summary(engine_stats, "fast", roles, "c", steps=steps,
                              batch_sum=batch_sum, max_kv_blocks=max_used, **totals)
    cat = {k: (np.concatenate([p[k] for p in parts]) if parts else
               np.zeros(0, dtype=np.float64 if k in ("sent", "end", "events", "t_start",
                                                     "t_end") else np.int64))
           for k in ("id", "rep", "pre", "status", "ntok", "sent", "end", "events", "t_rep",
                     "t_batch", "t_pf", "t_dec", "t_used", "t_wait", "t_start", "t_end")}
    ids = cat["id"]
    if ids.size != n or (n and not np.array_equal(np.sort(ids), np.arange(n))):
        raise RuntimeError(f"the C engine core returned {ids.size} outcomes for {n} requests")
    assert slots is not None
    res = _result(cat, *_from_slots(direct, slots, cat["ntok"], ids), wl, engine_stats, roles)
    if cluster.pd:
        res.kv_transfer_wait_s, res.kv_transfer_s = xfer
    return res


def _from_slots(events: np.ndarray, slots: np.ndarray, ntok: np.ndarray, ids: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """Offsets and token times of a direct run: `events` itself when every request filled
    its slot; else (rejections: 0 or 1 of their tokens) the filled part of each slot, in id
    order."""
    lens = np.zeros(slots.size - 1, dtype=np.int64)
    lens[ids] = ntok
    if np.array_equal(lens, np.diff(slots)):
        return slots, events
    offsets = np.zeros(lens.size + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    some = lens > 0
    return offsets, expand_segments(events, slots[:-1][some], lens[some])


def _result(cat: dict[str, np.ndarray], offsets: np.ndarray, events: np.ndarray, wl: Any,
            engine_stats: list[dict[str, Any]], roles: list[str]) -> Any:
    """The run's SimResult from its drained columns (finish order; `offsets`, `events`
    already in id order)."""
    order = np.argsort(cat["id"], kind="stable")
    tl_order = np.argsort(cat["t_rep"], kind="stable")
    timeline = {
        "replica": cat["t_rep"][tl_order], "start_s": cat["t_start"][tl_order],
        "end_s": cat["t_end"][tl_order], "batch_size": cat["t_batch"][tl_order],
        "prefill_tokens": cat["t_pf"][tl_order], "decode_seqs": cat["t_dec"][tl_order],
        "kv_blocks_used": cat["t_used"][tl_order], "num_waiting": cat["t_wait"][tl_order]}
    return SimResult(
        sent_s=cat["sent"][order], end_s=cat["end"][order],
        prompt_tokens=wl.prompt_tokens.copy(), output_tokens=wl.output_tokens.copy(),
        status=_status_names(cat["status"][order]), replica=cat["rep"][order],
        preemptions=cat["pre"][order], event_offsets=offsets, event_times_s=events,
        timeline=timeline, engine_stats=engine_stats, mode="fast", roles=roles, core="c")

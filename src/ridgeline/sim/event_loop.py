"""The discrete-event loop: arrivals, routing, and each replica's steps on a virtual clock.

Two modes give the same trace (a test checks it bit for bit):

- "step": the reference. Every step goes through the public `Engine.step`, and each emitted
  token is recorded as it is reported.
- "fast": event-driven. Runs of decode-only steps between batch-changing events (an arrival,
  a finish, a KV shortage) advance in one numpy computation (`Engine.decode_run`), and tokens
  are recorded compactly as (first step, last step) segments on the replica's step-end times,
  expanded exactly at the end.

Causality: a step starting at `s` sees every request that arrived at or before `s`. Replicas
advance in order of their next step's start; with dynamic arrivals (closed-loop users, P/D
hand-offs) a replica's run also stops where another busy replica's next step starts, since that
step may produce an arrival.

>>> import numpy as np
>>> from ridgeline.perf.step_time import LinearStepTime
>>> from ridgeline.sim.engine import EngineConfig
>>> wl = Workload(prompt_tokens=np.array([10, 10]), output_tokens=np.array([3, 2]),
...               arrival_s=np.array([0.0, 0.05]))
>>> res = simulate(wl, EngineConfig(num_kv_blocks=16), LinearStepTime(base_s=0.01))
>>> res.events_s(0).round(6).tolist(), res.events_s(1).round(6).tolist()
([0.01, 0.02, 0.03], [0.06, 0.07])
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np

from ridgeline.perf.step_time import StepTimeModel
from ridgeline.sim import core
from ridgeline.sim.cluster import ClusterConfig, Replica, Router
from ridgeline.sim.engine import Engine, EngineConfig
from ridgeline.sim.engine_costs import EngineCosts, apply_request_overhead

# The result type and its helpers (sim/result.py), used here and re-exported.
from ridgeline.sim.result import (  # noqa: F401
    STATUS_OK,
    STATUS_REJECTED,
    STATUS_TIMEOUT,
    TIMELINE_COLUMNS,
    TRACE_TIME_DECIMALS,
    SimResult,
    stream_summary,
)
from ridgeline.sim.result import expand_segments as _expand_segments
from ridgeline.sim.sequence import REJECTED, WAITING, EngineRequest, Sequence

_NEW, _HANDOFF = 0, 1
HEAP_MIN_REPLICAS = 2   # static arrivals over this many replicas: `_run_heap`
# Routers that read nothing but outstanding counts (or nothing): `_run_lazy` applies.
LAZY_ROUTERS = frozenset({"least-outstanding", "round-robin", "prefix-affinity"})


@dataclass
class Workload:
    """What the simulated clients ask for, one array entry per request.

    Open loop: `arrival_s` (sorted). Closed loop: `concurrency` users, each sending its next
    request `think_s[i]` seconds after its previous one ended (all users start at t=0).
    Closed loop by named users (a measured closed-loop run replayed as it ran): `user_of[i]`
    is request i's user, `user_start_s[u]` when user u sends its first request; each user
    sends its own requests in index order, the next `think_s[j]` after its previous ended.
    `prefix_group[i] >= 0` puts the first `prefix_tokens[i]` prompt tokens in a shared group.
    """

    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    arrival_s: np.ndarray | None = None
    concurrency: int | None = None
    think_s: np.ndarray | None = None
    prefix_group: np.ndarray | None = None
    prefix_tokens: np.ndarray | None = None
    # A client timeout: a request unfinished this long after it was sent is aborted (the
    # engine frees it; status "error", error_kind "timeout"). Step mode, one replica.
    timeout_s: float | None = None
    user_of: np.ndarray | None = None
    user_start_s: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.prompt_tokens = np.asarray(self.prompt_tokens, dtype=np.int64)
        self.output_tokens = np.asarray(self.output_tokens, dtype=np.int64)
        if (self.arrival_s is None) == (self.concurrency is None):
            raise ValueError("give arrival_s (open loop) or concurrency (closed loop)")
        if (self.user_of is None) != (self.user_start_s is None):
            raise ValueError("give user_of and user_start_s together")
        if self.user_of is not None and self.user_start_s is not None:
            self.user_of = np.asarray(self.user_of, dtype=np.int64)
            self.user_start_s = np.asarray(self.user_start_s, dtype=np.float64)
            users = self.user_start_s.size
            if self.user_of.size != self.prompt_tokens.size or self.concurrency != users or \
                    (self.user_of.size and (self.user_of.min() < 0
                                            or self.user_of.max() >= users)):
                raise ValueError("user_of: one user in [0, concurrency) per request, "
                                 "user_start_s: one start per user")
        if self.arrival_s is not None:
            self.arrival_s = np.asarray(self.arrival_s, dtype=np.float64)
            if np.any(np.diff(self.arrival_s) < 0):
                raise ValueError("arrival_s must be sorted")

    def __len__(self) -> int:
        return int(self.prompt_tokens.size)


class _Window:
    """A long array read as Python scalars a window at a time: `w[i]`, `len(w)`. Reads go
    mostly forward (arrivals in order), so each window is converted about once."""

    __slots__ = ("array", "buf", "lo", "size")

    def __init__(self, array: np.ndarray, size: int = 1 << 14) -> None:
        self.array = array
        self.size = size
        self.lo = 0
        self.buf: list[Any] = array[:size].tolist()

    def __len__(self) -> int:
        return len(self.array)

    def __getitem__(self, i: int) -> Any:
        j = i - self.lo
        if 0 <= j < len(self.buf):
            return self.buf[j]
        if not 0 <= i < len(self.array):
            raise IndexError(i)
        self.lo = i - i % self.size
        self.buf = self.array[self.lo:self.lo + self.size].tolist()
        return self.buf[i - self.lo]


class _Sim:
    """One run. See the module docstring."""

    def __init__(self, wl: Workload, config: EngineConfig, model: StepTimeModel,
                 cluster: ClusterConfig, mode: str,
                 progress: Callable[[int], None] | None,
                 sink: Callable[[SimResult], None] | None = None,
                 chunk_requests: int = 5_000, record_scheduled: bool = False) -> None:
        if mode not in ("fast", "step"):
            raise ValueError("mode must be 'fast' or 'step'")
        self.fast = mode == "fast"
        self.mode = mode
        self.wl = wl
        self.cluster = cluster
        n = len(wl)
        self.n = n
        if cluster.pd:
            p, d = cluster.pd
            roles = ["prefill"] * p + ["decode"] * d
        else:
            roles = ["mixed"] * cluster.replicas
        self.reps = [Replica(i, role, Engine(*cluster.engine_for(role, config, model)))
                     for i, role in enumerate(roles)]
        entry = [r for r in self.reps if r.role != "decode"]
        self.entry_router = Router(cluster.router, entry)
        self.decode_router = Router(cluster.router, [r for r in self.reps if r.role == "decode"])
        self.affinity = cluster.router == "prefix-affinity"
        self.dynamic = cluster.pd is not None or wl.concurrency is not None
        self.multi = len(self.reps) > 1
        self.dyn: list[tuple[float, int, int, int]] = []
        self.dyn_seq = 0
        # Per-request inputs as Python scalars: whole lists in a batch run (fastest), windows
        # over the arrays when streaming (a list costs ~36 B an entry: memory would grow
        # with the run).
        seq_of: Callable[[np.ndarray], Any] = (
            (lambda a: a.tolist()) if sink is None else _Window)
        self.static = seq_of(wl.arrival_s) if wl.arrival_s is not None else []
        self.ptr = 0
        self.prompt = seq_of(wl.prompt_tokens)
        self.output = seq_of(wl.output_tokens)
        self.group = seq_of(wl.prefix_group) if wl.prefix_group is not None else None
        self.ptoks = seq_of(wl.prefix_tokens) if wl.prefix_tokens is not None else None
        self.think = seq_of(wl.think_s if wl.think_s is not None else np.zeros(n))
        self.sent = [math.nan] * n
        self.end = [math.nan] * n
        self.status = [STATUS_OK] * n
        self.replica = [-1] * n
        self.preempt = [0] * n
        # P/D: each handed-off request's wait for its prefill instance's link, and the
        # transfer itself (NaN: not transferred)
        self.xfer_wait: list[float] | None = [math.nan] * n if cluster.pd else None
        self.xfer: list[float] | None = [math.nan] * n if cluster.pd else None
        # P/D with link queues: the decode replica each in-flight KV transfer was sent to
        self.handoff_to: dict[int, Replica] = {}
        self.seg_req: list[int] = []
        self.seg_rep: list[int] = []
        self.seg_a: list[int] = []
        self.seg_b: list[int] = []
        self.events: list[list[float]] = [[] for _ in range(n)] if not self.fast else []
        self.done = 0
        self.progress = progress
        self._progress_next = 1000
        self.next_req = 0
        # `_run_lazy`: brings the picked replica up to an arrival before it is added.
        self._before_add: Callable[[Replica, float], None] | None = None
        self.stream = _Stream(self, sink, chunk_requests) if sink is not None else None
        if self.stream is not None and (not self.fast or cluster.pd):
            raise ValueError("streaming results need the fast mode and no P/D split")
        if self.stream is not None:
            # Outcomes of in-flight requests only: a chunk's entries leave with the chunk.
            from collections import defaultdict

            self.sent, self.end, self.replica = {}, {}, {}
            self.status = {}    # rejected ones; default ok
            self.preempt = defaultdict(int)
        self.timeout_s = wl.timeout_s
        self.deadlines: list[tuple[float, int]] = []
        if self.timeout_s is not None and (self.fast or self.multi or cluster.pd
                                           or self.stream is not None):
            raise ValueError("a client timeout needs the step mode, one replica, no P/D "
                             "and no streaming")
        # Step mode only: each request's first scheduling is read off its sequence after
        # every step (`_advance_step`), as the emulator's driver does.
        self.scheduled: list[float] | None = [math.nan] * n if record_scheduled else None
        self.unscheduled: dict[int, Sequence] = {}
        if record_scheduled and (self.fast or self.stream is not None):
            raise ValueError("recording scheduled times needs the step mode, no streaming")
        self.user_next: list[list[int]] | None = None
        if wl.user_of is not None and wl.user_start_s is not None:
            per_user: list[list[int]] = [[] for _ in range(wl.user_start_s.size)]
            for i, u in enumerate(wl.user_of.tolist()):
                per_user[u].append(i)
            for u, reqs in enumerate(per_user):
                if reqs:
                    self._push(float(wl.user_start_s[u]), _NEW, reqs[0])
            self.user_next = [reqs[:0:-1] for reqs in per_user]   # the rest, reversed: pop()
            self.user_of = wl.user_of.tolist()
        elif wl.concurrency is not None:
            for i in range(min(wl.concurrency, n)):
                self._push(0.0, _NEW, i)
            self.next_req = min(wl.concurrency, n)

    # ---- arrivals ------------------------------------------------------------------------

    def _push(self, t: float, kind: int, i: int) -> None:
        heapq.heappush(self.dyn, (t, self.dyn_seq, kind, i))
        self.dyn_seq += 1

    def _next_arrival(self) -> float:
        a = self.static[self.ptr] if self.ptr < len(self.static) else math.inf
        if self.dyn and self.dyn[0][0] < a:
            return self.dyn[0][0]
        return a

    def _dispatch_next(self) -> Replica | None:
        """Hand the next arrival to a replica; return it (None: rejected)."""
        st = self.stream
        if st is not None and len(st.pending) >= st.chunk_requests:
            st.flush()   # here no finished sequence is waiting to be booked
        a = self.static[self.ptr] if self.ptr < len(self.static) else math.inf
        if self.dyn and self.dyn[0][0] < a:
            t, _, kind, i = heapq.heappop(self.dyn)
        else:
            t, kind, i = a, _NEW, self.ptr
            self.ptr += 1
        group = self.group[i] if self.group is not None else -1
        if group >= 0:
            pgroup, ptoks = group, self.ptoks[i]  # type: ignore[index]
        else:
            pgroup, ptoks = None, 0
        key = (group if group >= 0 else i) if self.affinity else -1
        dest: Replica | None = None
        if kind == _NEW:
            self.sent[i] = t
            r = self.entry_router.pick(key)
            if self._before_add is not None:
                self._before_add(r, t)
            out = 1 if self.cluster.pd else self.output[i]
            req = EngineRequest(str(i), self.prompt[i], out, t, pgroup, ptoks)
        else:
            dest = self.handoff_to.pop(i, None)
            if dest is not None:
                dest.received(self.prompt[i])
            r = dest if dest is not None else self.decode_router.pick(key)
            req = EngineRequest(str(i), self.prompt[i], self.output[i], t, pgroup, ptoks,
                                kv_ready_tokens=self.prompt[i], generated_tokens=1)
        sch = r.engine.scheduler
        seq = sch.add(req)
        if seq.state == REJECTED:
            sch.pending_rejected.clear()   # reported here, not by a later step
            if dest is not None:    # its load fell without a request leaving the engine
                self.decode_router.note_finished(r)
            self.status[i] = STATUS_REJECTED
            self._request_done(i, t)
            return None
        self.replica[i] = r.index
        if self.scheduled is not None and kind == _NEW:
            self.unscheduled[i] = seq
        if self.timeout_s is not None:
            heapq.heappush(self.deadlines, (t + self.timeout_s, i))
        if r.busy_until_s < t:
            r.busy_until_s = t
        return r

    def _expire(self, r: Replica, now_s: float) -> None:
        """Abort every request whose client gave up by now_s (step mode, one replica)."""
        dl = self.deadlines
        while dl and dl[0][0] <= now_s:
            d, i = heapq.heappop(dl)
            if math.isnan(self.end[i]) and r.engine.abort_request(str(i)):
                self.status[i] = STATUS_TIMEOUT
                self._request_done(i, d)

    # ---- completions ---------------------------------------------------------------------

    def _request_done(self, i: int, end_s: float) -> None:
        self.end[i] = end_s
        self.done += 1
        if self.stream is not None:
            self.stream.done(i)
        if self.next_req and self.next_req < self.n:   # closed loop: the user's next request
            j = self.next_req
            self.next_req += 1
            self._push(end_s + self.think[j], _NEW, j)
        elif self.user_next is not None:               # named users: this user's next one
            rest = self.user_next[self.user_of[i]]
            if rest:
                j = rest.pop()
                self._push(end_s + self.think[j], _NEW, j)
        if self.progress is not None and self.done >= self._progress_next:
            self._progress_next += 1000
            self.progress(self.done)

    def _seq_done(self, r: Replica, i: int, end_s: float) -> None:
        (self.decode_router if r.role == "decode" else self.entry_router).note_finished(r)
        if r.role == "prefill" and self.output[i] > 1:
            cl = self.cluster
            start = end_s
            if cl.link_queue:
                # The decode replica is the router's choice when the transfer is queued (the
                # prefill's end); the prefill replica's outbound link and the decode
                # replica's inbound link each carry one KV at a time, and a transfer starts
                # once both are free (in the order the transfers were queued).
                group = self.group[i] if self.group is not None else -1
                d = self.decode_router.pick((group if group >= 0 else i)
                                            if self.affinity else -1)
                self.handoff_to[i] = d
                d.expect(self.prompt[i])
                start = max(end_s, r.link_free_s, d.link_in_free_s)
                r.link_free_s = d.link_in_free_s = start + cl.link_busy_s(self.prompt[i])
            arrive = start + cl.transfer_s(self.prompt[i])
            if self.xfer is not None and self.xfer_wait is not None:
                self.xfer_wait[i] = start - end_s
                self.xfer[i] = arrive - start
            self._push(arrive, _HANDOFF, i)
        else:
            self._request_done(i, end_s)

    def _finished_fast(self, r: Replica, seq: Sequence) -> None:
        i = int(seq.request_id)
        self.preempt[i] += seq.preemptions
        for a, b in seq.segments:
            self.seg_req.append(i)
            self.seg_rep.append(r.index)
            self.seg_a.append(a)
            self.seg_b.append(b)
        st = self.stream
        if st is None:
            self._seq_done(r, i, r.step_end_s[seq.finish_step])
        else:
            self._seq_done(r, i, r.step_end_s[seq.finish_step - st.base[r.index]])

    # ---- replicas ------------------------------------------------------------------------

    def _advance_fast(self, r: Replica, t_next: float) -> None:
        """Event-driven: replica r's next run of decode-only steps that start before t_next,
        or else its next step."""
        eng = r.engine
        sch = eng.scheduler
        t0 = r.busy_until_s
        tl = r.tl
        if eng.can_fast_forward():
            stop = t_next
            if self.dynamic and self.multi:
                for o in self.reps:
                    if o is not r and o.busy_until_s < stop and o.engine.scheduler.seqs:
                        stop = o.busy_until_s
            if stop > t0:
                n_dec = sch.dec_count
                ends, used, finished = eng.decode_run(t0, stop)
                k = len(ends)
                if k:
                    r.step_end_s.extend(ends)
                    tl[0].append(t0)
                    if k > 1:
                        tl[0].extend(ends[:-1])
                        tl[1].extend([n_dec] * k)
                        tl[2].extend([0] * k)
                        tl[3].extend([n_dec] * k)
                        tl[5].extend([len(sch.waiting)] * k)
                    else:
                        tl[1].append(n_dec)
                        tl[2].append(0)
                        tl[3].append(n_dec)
                        tl[5].append(len(sch.waiting))
                    tl[4].extend(used)
                    r.busy_until_s = ends[-1]
                    for seq in finished:
                        self._finished_fast(r, seq)
                    return
        n_before = sch.step_index
        out = eng.step_compact(t0)
        if self._close_step(r, t0, n_before, out) is None:
            return
        for seq in out.finished:
            self._finished_fast(r, seq)

    @staticmethod
    def _close_step(r: Replica, t0: float, n_before: int, out: Any) -> float | None:
        """Book a step that started at t0 (its end, the replica's clock, the timeline) and
        return its end time; None when the engine only preempted (no step was taken)."""
        sch = r.engine.scheduler
        if sch.step_index == n_before:
            if not out.preempted:
                raise RuntimeError(f"replica {r.index}: engine made no progress at {t0}")
            return None
        end = t0 + out.duration_s
        r.step_end_s.append(end)
        r.busy_until_s = end
        _log_step(r.tl, t0, out.prefill_seqs, out.prefill_tokens, out.decode_seqs, sch)
        return end

    def _advance_step(self, r: Replica, t_next: float) -> None:
        """Reference: replica r's next step through the public `Engine.step`."""
        eng = r.engine
        sch = eng.scheduler
        t0 = r.busy_until_s
        n_before = sch.step_index
        res = eng.step(t0)
        # A request's first scheduling computes some of its prompt: only a step with a
        # prefill can have scheduled one.
        if self.unscheduled and res.prefill_seqs:
            for i in [i for i, seq in self.unscheduled.items() if seq.state != WAITING]:
                self.scheduled[i] = t0      # type: ignore[index]
                del self.unscheduled[i]
        for rid in res.preempted:
            self.preempt[int(rid)] += 1
        end = self._close_step(r, t0, n_before, res)
        if end is None:
            return
        events = self.events
        for rid, _ in res.emitted:
            events[int(rid)].append(end)
        for rid in res.finished:
            self._seq_done(r, int(rid), end)

    # ---- the loop ------------------------------------------------------------------------

    def run(self) -> SimResult:
        reps = self.reps
        advance = self._advance_fast if self.fast else self._advance_step
        next_arrival, dispatch = self._next_arrival, self._dispatch_next
        # Without dynamic arrivals the next arrival changes only when it is dispatched.
        dynamic = self.dynamic
        if len(reps) == 1:
            r = reps[0]
            sch = r.engine.scheduler
            timeout = self.timeout_s is not None
            while True:
                t_next = next_arrival()
                while r.busy_until_s < t_next and sch.seqs:
                    if timeout:
                        self._expire(r, r.busy_until_s)
                        if not sch.seqs:
                            break
                    advance(r, t_next)
                    if dynamic:
                        t_next = next_arrival()
                if t_next == math.inf:
                    break
                dispatch()
            return self._finish()
        if not dynamic and len(reps) >= HEAP_MIN_REPLICAS:
            if self.fast and self.cluster.router in LAZY_ROUTERS:
                return self._run_lazy()
            return self._run_heap(advance)
        while True:
            t_next = next_arrival()
            while True:
                best = None
                bt = t_next
                for r in reps:
                    if r.busy_until_s < bt and r.engine.scheduler.seqs:
                        best, bt = r, r.busy_until_s
                if best is None:
                    break
                advance(best, t_next)
                if dynamic:
                    t_next = next_arrival()
            if t_next == math.inf:
                break
            dispatch()
        return self._finish()

    def _run_heap(self, advance: Callable[[Replica, float], None]) -> SimResult:
        """Many replicas, static arrivals: the busy replicas in a heap by (clock, index),
        the same choice as the scan in `run` (its ties go to the lowest index too) at
        O(log R) a step instead of O(R). A replica's clock changes only when it steps
        (popped first) or when an idle one (not in the heap) gets a request."""
        reps = self.reps
        heap: list[tuple[float, int]] = []
        queued = [False] * len(reps)
        push, pop = heapq.heappush, heapq.heappop
        next_arrival, dispatch = self._next_arrival, self._dispatch_next
        while True:
            t_next = next_arrival()
            while heap and heap[0][0] < t_next:
                idx = pop(heap)[1]
                r = reps[idx]
                advance(r, t_next)
                if r.engine.scheduler.seqs:
                    push(heap, (r.busy_until_s, idx))
                else:
                    queued[idx] = False
            if t_next == math.inf:
                break
            r = dispatch()
            if r is not None and not queued[r.index] and r.engine.scheduler.seqs:
                queued[r.index] = True
                push(heap, (r.busy_until_s, r.index))
        return self._finish()

    def _run_lazy(self) -> SimResult:
        """Many replicas, static arrivals, a router that reads only outstanding counts: a
        replica is advanced only when a request can leave it before the next arrival, or
        when it gets one; the others wait, their counts exact.

        The same trace as `_run_heap`, which advances every busy replica through every step
        starting before each arrival: a replica's steps do not depend on other replicas'
        arrivals, and the router sees a count change exactly when a sequence finishes in a
        step starting before the arrival. The heap holds, per busy replica, a time before
        which nothing leaves it (`Scheduler.next_finish_start_s`, a lower bound: a replica
        advanced early is harmless) and a version (an entry older than the replica's last
        change is dropped)."""
        reps = self.reps
        heap: list[tuple[float, int, int]] = []
        version = [0] * len(reps)
        push, pop = heapq.heappush, heapq.heappop
        next_arrival, dispatch = self._next_arrival, self._dispatch_next
        advance = self._advance_fast

        def catch_up(r: Replica, t: float) -> None:
            """Advance r through its steps that start before t."""
            sch = r.engine.scheduler
            while r.busy_until_s < t and sch.seqs:
                advance(r, t)

        def schedule(r: Replica) -> None:
            sch = r.engine.scheduler
            version[r.index] += 1
            if sch.seqs:
                # Never below the replica's clock (the bound carries its own rounding
                # margin): an entry below it would be popped again for the same arrival,
                # with nothing to advance, forever.
                push(heap, (sch.next_finish_start_s(r.busy_until_s), r.index,
                            version[r.index]))

        self._before_add = catch_up
        while True:
            t_next = next_arrival()
            while heap and heap[0][0] < t_next:
                _, idx, v = pop(heap)
                if v != version[idx]:
                    continue
                r = reps[idx]
                catch_up(r, t_next)
                schedule(r)
            if t_next == math.inf:
                break
            r = dispatch()
            if r is not None:
                schedule(r)
        return self._finish()

    def _finish(self) -> SimResult:
        if self.stream is None:
            return self._result()
        self.stream.flush()
        return self.stream.summary()

    def _result(self) -> SimResult:
        n = self.n
        if self.fast:
            ends_by_rep = [np.asarray(r.step_end_s, dtype=np.float64) for r in self.reps]
            rep_off = np.concatenate(([0], np.cumsum([e.size for e in ends_by_rep])))
            all_ends = np.concatenate(ends_by_rep) if ends_by_rep else np.zeros(0)
            req = np.asarray(self.seg_req, dtype=np.int64)
            order = np.argsort(req, kind="stable")
            req = req[order]
            start = (rep_off[np.asarray(self.seg_rep, dtype=np.int64)]
                     + np.asarray(self.seg_a, dtype=np.int64))[order]
            lens = (np.asarray(self.seg_b, dtype=np.int64)
                    - np.asarray(self.seg_a, dtype=np.int64) + 1)[order]
            counts = np.bincount(req, weights=lens, minlength=n).astype(np.int64)
            offsets = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(counts, out=offsets[1:])
            events = _expand_segments(all_ends, start, lens)
        else:
            counts = np.fromiter(map(len, self.events), dtype=np.int64, count=n)
            offsets = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(counts, out=offsets[1:])
            events = np.fromiter(chain.from_iterable(self.events), dtype=np.float64,
                                 count=int(offsets[-1]))
        tl_cols: dict[str, list[np.ndarray]] = {c: [] for c in TIMELINE_COLUMNS}
        for r in reps_sorted(self.reps):
            k = len(r.step_end_s)
            tl_cols["replica"].append(np.full(k, r.index, dtype=np.int64))
            tl_cols["start_s"].append(np.asarray(r.tl[0], dtype=np.float64))
            tl_cols["end_s"].append(np.asarray(r.step_end_s, dtype=np.float64))
            for name, col in zip(TIMELINE_COLUMNS[3:], r.tl[1:], strict=True):
                tl_cols[name].append(np.asarray(col, dtype=np.int64))
        timeline = {c: (np.concatenate(v) if v else np.zeros(0)) for c, v in tl_cols.items()}
        return SimResult(
            sent_s=np.asarray(self.sent, dtype=np.float64),
            end_s=np.asarray(self.end, dtype=np.float64),
            prompt_tokens=self.wl.prompt_tokens.copy(),
            output_tokens=self.wl.output_tokens.copy(),
            status=self.status,
            replica=np.asarray(self.replica, dtype=np.int64),
            preemptions=np.asarray(self.preempt, dtype=np.int64),
            event_offsets=offsets, event_times_s=events, timeline=timeline,
            engine_stats=[r.engine.stats().to_dict() for r in self.reps],
            mode=self.mode, roles=[r.role for r in self.reps],
            scheduled_engine_s=(None if self.scheduled is None
                                else np.asarray(self.scheduled, dtype=np.float64)),
            kv_transfer_wait_s=(None if self.xfer_wait is None else
                                np.asarray(self.xfer_wait, dtype=np.float64)),
            kv_transfer_s=(None if self.xfer is None else
                           np.asarray(self.xfer, dtype=np.float64)),
        )


class _Stream:
    """Hands finished requests to the sink in chunks and trims what they no longer need:
    each replica's step end times before the first step any of its in-flight sequences
    emitted on (`base[r]` is the absolute index of `step_end_s[0]`), and the timeline rows,
    folded into totals first."""

    def __init__(self, sim: _Sim, sink: Callable[[SimResult], None],
                 chunk_requests: int) -> None:
        self.sim = sim
        self.sink = sink
        self.chunk_requests = max(1, chunk_requests)
        self.pending: list[int] = []
        self.base = [0] * len(sim.reps)
        self.steps = 0
        self.batch_sum = 0
        self.max_kv_blocks = 0
        self.chunks = 0
        self.finished = 0
        self.rejected = 0
        self.preemptions = 0

    def done(self, i: int) -> None:
        self.pending.append(i)

    def flush(self) -> None:
        sim = self.sim
        ids = np.asarray(sorted(self.pending), dtype=np.int64)
        self.pending = []
        reps = sim.reps
        ends_by_rep = [np.asarray(r.step_end_s, dtype=np.float64) for r in reps]
        rep_off = np.concatenate(([0], np.cumsum([e.size for e in ends_by_rep])))
        all_ends = np.concatenate(ends_by_rep)
        req = np.asarray(sim.seg_req, dtype=np.int64)
        rep = np.asarray(sim.seg_rep, dtype=np.int64)
        a = np.asarray(sim.seg_a, dtype=np.int64)
        lens = np.asarray(sim.seg_b, dtype=np.int64) - a + 1
        start = rep_off[rep] + a - np.asarray(self.base, dtype=np.int64)[rep]
        sim.seg_req, sim.seg_rep, sim.seg_a, sim.seg_b = [], [], [], []
        order = np.argsort(req, kind="stable")
        local = np.searchsorted(ids, req[order])
        counts = np.bincount(local, weights=lens[order], minlength=ids.size).astype(np.int64)
        offsets = np.zeros(ids.size + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        events = _expand_segments(all_ends, start[order], lens[order])
        idl = ids.tolist()
        wl = sim.wl
        status = [sim.status.pop(i, STATUS_OK) for i in idl]
        preempt = np.array([sim.preempt.pop(i, 0) for i in idl],
                           dtype=np.int64)
        self.finished += status.count(STATUS_OK)
        self.rejected += len(status) - status.count(STATUS_OK)
        self.preemptions += int(preempt.sum())
        chunk = SimResult(
            sent_s=np.array([sim.sent.pop(i) for i in idl],
                            dtype=np.float64),
            end_s=np.array([sim.end.pop(i) for i in idl],
                           dtype=np.float64),
            prompt_tokens=wl.prompt_tokens[ids], output_tokens=wl.output_tokens[ids],
            status=status,
            replica=np.array([sim.replica.pop(i, -1) for i in idl],
                             dtype=np.int64),
            preemptions=preempt,
            event_offsets=offsets, event_times_s=events, timeline={}, engine_stats=[],
            mode=sim.mode, roles=[r.role for r in reps], request_ids=ids)
        self._trim()
        self.chunks += 1
        if ids.size:
            self.sink(chunk)

    def _trim(self) -> None:
        for r in self.sim.reps:
            tl = r.tl
            if tl[0]:
                self.steps += len(tl[0])
                self.batch_sum += sum(tl[1])
                self.max_kv_blocks = max(self.max_kv_blocks, max(tl[4]))
                for col in tl:
                    col.clear()
            first = self.base[r.index] + len(r.step_end_s)
            for seq in r.engine.scheduler.seqs.values():
                if seq.segments:
                    first = min(first, seq.segments[0][0])
                elif seq.seg_start >= 0:
                    first = min(first, seq.seg_start)
            drop = first - self.base[r.index]
            if drop > 0:
                del r.step_end_s[:drop]
                self.base[r.index] = first

    def summary(self) -> SimResult:
        sim = self.sim
        return stream_summary(
            [r.engine.stats().to_dict() for r in sim.reps], sim.mode,
            [r.role for r in sim.reps], "python", steps=self.steps, finished=self.finished,
            rejected=self.rejected, preemptions=self.preemptions, batch_sum=self.batch_sum,
            max_kv_blocks=self.max_kv_blocks, chunks=self.chunks)


def _log_step(tl: list[list[Any]], t0: float, prefill_seqs: int, prefill_tokens: int,
              decode_seqs: int, sch: Any) -> None:
    """Append one engine step to a replica's timeline columns (see TIMELINE_COLUMNS)."""
    tl[0].append(t0)
    tl[1].append(prefill_seqs + decode_seqs)
    tl[2].append(prefill_tokens)
    tl[3].append(decode_seqs)
    tl[4].append(sch.pool.used_blocks)
    tl[5].append(len(sch.waiting))


def reps_sorted(reps: list[Replica]) -> list[Replica]:
    return sorted(reps, key=lambda r: r.index)


def simulate(workload: Workload, config: EngineConfig, step_model: StepTimeModel,
             cluster: ClusterConfig | None = None, *, mode: str = "fast",
             progress: Callable[[int], None] | None = None,
             sink: Callable[[SimResult], None] | None = None,
             chunk_requests: int = 5_000, record_scheduled: bool = False) -> SimResult:
    """Run the workload through the engine(s) on a virtual clock (t=0: the first arrival).

    `record_scheduled`: also record when each request was first scheduled
    (`SimResult.scheduled_engine_s`); the run takes the reference step mode (the same trace).

    `progress(done)` is called about every 1000 completed requests. With `sink`, finished
    requests go to `sink` in chunks of about `chunk_requests` (a `SimResult` whose
    `request_ids` are the global ids, in id order within the chunk) as the run goes, and
    the engine timeline is folded into totals and dropped: memory is bounded by what is
    in flight. The result is then a summary: no per-request columns (they left with the
    chunks), `timeline` empty, totals in `stream_stats` (see `_Stream`).
    """
    cluster = cluster or ClusterConfig()
    if workload.timeout_s is not None or record_scheduled:
        mode = "step"     # aborts at deadlines: the reference engine (same trace either way)
    costs = None
    if config.request_overhead_s or config.request_overhead_steps:
        costs = EngineCosts(request_overhead_s=config.request_overhead_s,
                            request_overhead_steps=config.request_overhead_steps)
        if sink is not None:
            inner = sink
            sink = lambda chunk: inner(apply_request_overhead(chunk, costs))  # noqa: E731
    if core.blocker(workload, config, step_model, cluster, mode) is None:
        res = core.run(workload, config, step_model, cluster, progress, sink, chunk_requests)
    else:
        res = _Sim(workload, config, step_model, cluster, mode, progress, sink,
                   chunk_requests, record_scheduled).run()
    # The per-request costs shift token times only (no feedback into batching): applied
    # here, after either engine, so the Python engine and the C core stay identical.
    return res if sink is not None else apply_request_overhead(res, costs)

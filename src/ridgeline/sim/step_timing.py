"""How the scheduler times its steps: the step-time calls and the caches that make them cheap.

Mixed into `Scheduler` (sim/scheduler.py), which holds the policy; this module only turns a
step's work into seconds. Three paths, all giving the same bits as one step-time call per step:

- llama.cpp's per-slot KV (`Scheduler.slots`): each step timed by its slots' graphs.
- The roofline model's compiled path (`use_compiled`): each step in Python floats,
  max(dc * c_dc + P, dc * m_dc + Q), without arrays.
- Any other step-time model: one vectorized call times a step together with the decode-only
  steps likely to follow it (`LOOKAHEAD_DECODE_STEPS` of them, with the decode set as it is
  and as it is left after its first finish); later steps read them from a small cache keyed
  by (decode seqs, sum of a), used only while the decode set is still that one.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

import numpy as np

from ridgeline.perf.fast_step import CompiledStep
from ridgeline.sim.sequence import DECODE, Sequence
from ridgeline.sim.slots import SlotSteps

# time_fn(prefill_tokens, prefill_attn_pairs, prefill_context_tokens, prefill_seqs,
#         decode_seqs, decode_context_tokens) -> step seconds; six float64 arrays of one shape
TimeFn = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray],
                  np.ndarray]
# Decode-only steps timed ahead with each single step (one step-time call then covers the
# step and the decode steps likely to follow it; used only if the batch is still the same).
LOOKAHEAD_DECODE_STEPS = 32


class StepTimingMixin:
    """Step durations and their caches, for `Scheduler` (which sets the attributes below)."""

    # The scheduler's state this mixin reads (set in `Scheduler.__init__`).
    max_num_seqs: int
    slots: SlotSteps | None
    dec_count: int
    dec_a_sum: int
    dec_heap: list[tuple[int, int, Sequence]]

    def _init_step_timing(self) -> None:
        # (decode_seqs, sum of a) -> (first step, durations): decode-only steps timed ahead
        self._dcache: dict[tuple[int, int], tuple[int, list[float]]] = {}
        # Scalar step times (`use_compiled`): the compiled (P, Q) function of steps with
        # prefill work, P and Q of decode-only steps by decode_seqs, the dc coefficients.
        self._pq: Callable[[float, float, float, float, float], tuple[float, float]] | None \
            = None
        self._dec_p: list[float] = []
        self._dec_q: list[float] = []
        self._c_dc = self._m_dc = 0.0

    def use_compiled(self, compiled: CompiledStep) -> bool:
        """Time steps one by one in Python floats with the roofline model's compiled path
        (the engine calls this when its step-time model is `RooflineStepTime`, whose
        `step_time_s` is that path for the simulator's calls). A step's seconds are
        max(dc * c_dc + P, dc * m_dc + Q), P and Q from the compiled function (prefill work)
        or the decode-only table, the very operations `CompiledStep._columns` does
        elementwise: the same bits, without the arrays and without timing decode steps
        ahead. False (nothing changes) where that path does not apply."""
        rows = compiled.decode_rows(self.max_num_seqs + 1)
        if rows is None:
            return False
        self._pq = compiled.pq
        self._dec_p, self._dec_q = rows
        self._c_dc, self._m_dc = compiled.c_dc, compiled.m_dc
        return True

    def _time_scalar(self, pf_tokens: int, pf_pairs: int, pf_ctx: int, pf_seqs: int,
                     n_dec: int, dec_ctx: int) -> float:
        """One step's seconds (`use_compiled`; requires n_dec < len(self._dec_p))."""
        if pf_tokens or pf_pairs or pf_ctx or pf_seqs:
            p, q = self._pq(float(pf_tokens), float(pf_pairs), float(pf_ctx),  # type: ignore[misc]
                            float(pf_seqs), float(n_dec))
        else:
            p, q = self._dec_p[n_dec], self._dec_q[n_dec]
        dc = float(dec_ctx)
        x = dc * self._c_dc + p
        y = dc * self._m_dc + q
        return x if x > y else y

    def _step_duration(self, time_fn: TimeFn, n: int, graphs: list[int] | None,
                       has_chunks: bool, pf_tokens: int, pf_pairs: int, pf_ctx: int,
                       pf_seqs: int, n_dec: int, dec_ctx: int) -> float:
        """The duration of step n, from its work."""
        if graphs is not None:
            return self.slots.duration_s(  # type: ignore[union-attr]
                graphs, pf_pairs, dec_ctx)
        if self._pq is not None and n_dec < len(self._dec_p):
            return self._time_scalar(pf_tokens, pf_pairs, pf_ctx, pf_seqs, n_dec, dec_ctx)
        # Other models: a decode-only step may already be timed; otherwise one call times it
        # together with the decode steps that follow if the batch stays as it now is.
        cached = (None if has_chunks
                  else self._cached_decode_time(n, n_dec, dec_ctx - n_dec * n))
        if cached is not None:
            return cached
        return self._time_with_spec(time_fn, n, pf_tokens, pf_pairs, pf_ctx, pf_seqs, n_dec,
                                    dec_ctx)

    def _cached_decode_time(self, n: int, n_dec: int, a_sum: int) -> float | None:
        e = self._dcache.get((n_dec, a_sum))
        if e is None or not e[0] <= n < e[0] + len(e[1]):
            return None
        return e[1][n - e[0]]

    def _store_decode_times(self, n_dec: int, a_sum: int, first: int, durs: list[float]
                            ) -> None:
        if len(self._dcache) >= 16:
            self._dcache.clear()
        self._dcache[(n_dec, a_sum)] = (first, durs)

    def _time_with_spec(self, time_fn: TimeFn, n: int, pf_tokens: int, pf_pairs: int,
                        pf_ctx: int, pf_seqs: int, n_dec: int, dec_ctx: int) -> float:
        """Time step n, and in the same call the decode-only steps that would follow it:
        with the decode set as it now is up to its first finish, then (if that finish is
        near) with the set left after it."""
        k = LOOKAHEAD_DECODE_STEPS
        b1, a1 = self.dec_count, self.dec_a_sum
        m1, b2, a2, m2 = k, 0, 0, 0
        if b1:
            heap = self.dec_heap
            while heap and (heap[0][2].state != DECODE
                            or heap[0][2].finish_step != heap[0][0]):
                heapq.heappop(heap)
            f1 = heap[0][0]
            if f1 < n + k:
                m1 = f1 - n
                cnt, a_fin = self._finishing_at(f1)
                b2, a2 = b1 - cnt, a1 - a_fin
                m2 = k if b2 else 0
        w = np.zeros((6, 1 + m1 + m2))
        w[0, 0], w[1, 0], w[2, 0], w[3, 0] = pf_tokens, pf_pairs, pf_ctx, pf_seqs
        w[4, 0], w[5, 0] = n_dec, dec_ctx
        idx = np.arange(n + 1, n + 1 + m1 + m2, dtype=np.int64)
        w[4, 1:1 + m1] = b1
        w[5, 1:1 + m1] = a1 + b1 * idx[:m1]
        if m2:
            w[4, 1 + m1:] = b2
            w[5, 1 + m1:] = a2 + b2 * idx[m1:]
        d = time_fn(w[0], w[1], w[2], w[3], w[4], w[5]).tolist()
        if b1:
            self._store_decode_times(b1, a1, n + 1, d[1:1 + m1])
        if m2:
            self._store_decode_times(b2, a2, n + 1 + m1, d[1 + m1:])
        return d[0]

    def _finishing_at(self, f: int) -> tuple[int, int]:
        """(count, sum of a) of the decoding sequences that finish in step f (heap walk)."""
        heap = self.dec_heap
        stack = [0]
        count = a_sum = 0
        while stack:
            i = stack.pop()
            if i >= len(heap) or heap[i][0] != f:
                continue   # children of a larger key are larger still
            seq = heap[i][2]
            if seq.state == DECODE and seq.finish_step == f:
                count += 1
                a_sum += seq.a
            stack.append(2 * i + 1)
            stack.append(2 * i + 2)
        return count, a_sum

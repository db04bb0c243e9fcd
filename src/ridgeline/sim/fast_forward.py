"""The fast-forward: many decode-only steps of a scheduler advanced in one go.

Mixed into `Scheduler` (sim/scheduler.py). Between events that change the batch (an arrival
that can be admitted, a finish, a lack of KV blocks), `decode_run` advances the decode-only
steps in one computation: step i of the run reads `sum_a + B * (n0 + i)` context tokens and
needs `residue[(-(n0+i)) % bs]` new KV blocks, both closed forms. It adds the step durations
one at a time, exactly as single steps do, so a fast-forwarded run and the same steps taken
one by one give bit-identical end times.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable

import numpy as np

from ridgeline.sim.kv_cache import BlockPool
from ridgeline.sim.sequence import DECODE, Sequence, StepOutcome
from ridgeline.sim.step_timing import LOOKAHEAD_DECODE_STEPS, StepTimingMixin, TimeFn

# Decode steps a run takes in the scalar loop before switching to arrays (numpy's overhead
# pays off only on long runs).
SCALAR_DECODE_STEPS = 8
# ... and the steps left that make an array evaluation worth its fixed cost.
ARRAY_DECODE_STEPS = 64


class FastForwardMixin(StepTimingMixin):
    """`decode_run` and its helpers, for `Scheduler` (which sets the attributes below)."""

    # The scheduler's state and policy hooks this mixin uses (set in `Scheduler`).
    waiting: deque[Sequence]
    prefilling: list[Sequence]
    pool: BlockPool
    bs: int
    kv_groups: int
    win: bool
    win_groups: int
    win_residue: list[int]
    dec_residue: list[int]
    step_index: int
    generation_tokens_total: int
    ratio_init: float
    ratio_steps: int
    lpm: bool
    head_admissible: Callable[[], bool]
    _win_activate: Callable[[int], None]
    _win_next_activation: Callable[[], int]
    _finish_decodes: Callable[[int, StepOutcome], None]

    def _decode_times(self, time_fn: TimeFn, n: int, m: int,
                      after_finish: tuple[int, int] | None = None) -> list[float]:
        """Durations of decode-only steps n .. n+m-1 with the current decode set; with
        `after_finish` = (decode seqs, sum of a) of the set left after step n+m-1, the same
        call also times the decode steps that follow it."""
        n_dec, a_sum = self.dec_count, self.dec_a_sum
        k = LOOKAHEAD_DECODE_STEPS if after_finish and after_finish[0] else 0
        w = np.zeros((6, m + k))
        idx = np.arange(n, n + m + k, dtype=np.int64)
        w[4, :m] = n_dec
        w[5, :m] = a_sum + n_dec * idx[:m]
        if k:
            b2, a2 = after_finish  # type: ignore[misc]
            w[4, m:] = b2
            w[5, m:] = a2 + b2 * idx[m:]
        d = time_fn(w[0], w[1], w[2], w[3], w[4], w[5]).tolist()
        self._store_decode_times(n_dec, a_sum, n, d[:m])
        if k:
            self._store_decode_times(b2, a2, n + m, d[m:])
        return d[:m]

    def can_fast_forward(self) -> bool:
        """Only decodes run, and the next step would not admit anyone."""
        if (self.ratio_init or self.lpm) and self.waiting:
            # SGLang's admission changes every step (the reservations shrink as the decodes
            # go on) and lpm reorders the queue: step one at a time
            return False
        return self.dec_count > 0 and not self.prefilling and self.slots is None and \
            not self.head_admissible()

    def next_finish_start_s(self, now_s: float) -> float:
        """A time before which no sequence can leave this engine if nothing new arrives: a
        lower bound on the start of the decode step in which the first decoding sequence
        finishes. A router that advances an engine only when this falls before an arrival
        sees the same outstanding counts as one that advances every engine to every arrival.

        `now_s` (no look-ahead) unless the next steps are decode-only, timed by the compiled
        path (`use_compiled`) and certain to find their KV blocks. Then k steps come before
        the finishing one, each at least as long as the first (a step's seconds grow with
        the decode context, which only grows): now + k * first, less a rounding margin
        (far above the summation's error), and never below `now_s`.
        O(1), reads only.
        """
        b = self.dec_count
        if not self.can_fast_forward() or self._pq is None or b >= len(self._dec_p):
            return now_s
        heap = self.dec_heap
        while heap and (heap[0][2].state != DECODE or heap[0][2].finish_step != heap[0][0]):
            heapq.heappop(heap)
        n0 = self.step_index
        k = heap[0][0] - n0            # decode steps before the finishing one
        cd, md = self._c_dc, self._m_dc
        # Each decoding sequence takes at most one block per bs steps.
        if k <= 0 or cd < 0 or md < 0 or \
                b * self.kv_groups * -(-(k + 1) // self.bs) > self.pool.free_blocks:
            return now_s
        dc = float(self.dec_a_sum + b * n0)
        x = dc * cd + self._dec_p[b]
        y = dc * md + self._dec_q[b]
        first = x if x > y else y
        return now_s + k * first * (1.0 - 1e-9)

    def decode_run(self, now_s: float, stop_before_s: float, time_fn: TimeFn,
                   max_steps: int = 1 << 30) -> tuple[list[float], list[int], list[Sequence]]:
        """Advance the decode-only steps that start before `stop_before_s`, in one go.

        Stops after the first step in which a sequence finishes, before the first step that
        would lack KV blocks, and after `max_steps`. Returns (step end times, KV blocks used
        after each step, finished sequences). Requires `can_fast_forward()`.

        Step durations come in vectorized chunks (one step-time call per chunk); the loop
        below only adds them up, one addition per step exactly as single steps do, so both
        give bit-identical end times.
        """
        heap = self.dec_heap
        while heap and (heap[0][2].state != DECODE or heap[0][2].finish_step != heap[0][0]):
            heapq.heappop(heap)
        n0 = self.step_index
        finish_step = heap[0][0]
        n_end = n0 + min(finish_step - n0 + 1, max_steps)
        groups = self.kv_groups
        if self.win:
            # Up to the next decode that starts to free (its frees change the run's phases).
            self._win_activate(n0)
            n_end = min(n_end, max(self._win_next_activation(), n0 + 1))
        freed_total = 0
        pool = self.pool
        free = pool.free_blocks
        used0 = pool.used_blocks
        residue, bs = self.dec_residue, self.bs
        ends: list[float] = []
        used: list[int] = []
        need_total = 0
        t = now_s
        n = n0
        durs: list[float] = []
        base = n0
        chunk = 16
        b = self.dec_count
        if self._pq is not None and b < len(self._dec_p) and not self.win:
            # Scalar step times (`use_compiled`): the decode set is fixed within the run.
            p, q, cd, md = self._dec_p[b], self._dec_q[b], self._c_dc, self._m_dc
            a_sum = self.dec_a_sum
            n_scalar_end = min(n_end, n0 + SCALAR_DECODE_STEPS)
            while True:
                while n < n_scalar_end and t < stop_before_s:
                    need = residue[(-n) % bs]
                    if need_total + need > free:
                        break
                    dc = float(a_sum + b * n)
                    x = dc * cd + p
                    y = dc * md + q
                    d = x if x > y else y
                    t = t + d
                    need_total += need
                    ends.append(t)
                    used.append(used0 + need_total)
                    n += 1
                if n < n_scalar_end or n == n_end or t >= stop_before_s:
                    break
                # Steps left before the stop time, at the last step's (growing) duration:
                until_stop = (stop_before_s - t) / d
                left = n_end - n if until_stop >= n_end - n else int(until_stop) + 1
                if left < ARRAY_DECODE_STEPS:
                    n_scalar_end = min(n_end, n + SCALAR_DECODE_STEPS)
                    continue
                # A long run: the same operations on arrays.
                n, t, need_total = _decode_run_arrays(
                    n, n_end, left, t, stop_before_s, need_total, free, used0, b, a_sum,
                    (p, q, cd, md), residue, ends, used)
                break
        while n < n_end and t < stop_before_s:
            need = groups * residue[(-n) % bs]
            if need_total - freed_total + need > free:
                break
            i = n - base
            if i >= len(durs):
                e = self._dcache.get((self.dec_count, self.dec_a_sum))
                if e is not None and e[0] <= n < e[0] + len(e[1]):
                    base, durs = e
                else:
                    m = min(chunk, n_end - n)
                    after = None
                    if n + m == n_end == finish_step + 1:
                        cnt, a_fin = self._finishing_at(finish_step)
                        after = (self.dec_count - cnt, self.dec_a_sum - a_fin)
                    durs, base = self._decode_times(time_fn, n, m, after), n
                    chunk *= 4
                i = n - base
            t = t + durs[i]
            need_total += need
            if self.win:
                freed_total += self.win_groups * self.win_residue[n % bs]
            ends.append(t)
            used.append(used0 + need_total - freed_total)
            n += 1
        if n == n0:
            return ends, used, []
        if freed_total:
            pool.release([], freed_total)
        pool.allocate(need_total)
        self.generation_tokens_total += self.dec_count * (n - n0)
        self.ratio_steps += n - n0
        self.step_index = n
        out = StepOutcome()
        self._finish_decodes(n - 1, out)
        if out.finished:
            # The last step's finishes free blocks after it: the timeline's last row shows that.
            used[-1] = pool.used_blocks
        return ends, used, out.finished


def _decode_run_arrays(n: int, n_end: int, expect: int, t: float, stop_before_s: float,
                       need_total: int, free: int, used0: int, b: int, a_sum: int,
                       pq_cd_md: tuple[float, float, float, float], residue: list[int],
                       ends: list[float], used: list[int]) -> tuple[int, float, int]:
    """The scalar loop of `Scheduler.decode_run` on numpy arrays, bit for bit: each step's
    seconds are max(dc * c_dc + P, dc * m_dc + Q) with dc = a_sum + b * n (an integer, exact
    in float64), end times a running sum (`np.cumsum` adds left to right, one addition a
    step, as the loop does), and the run stops at the first step starting at or after
    `stop_before_s` or lacking KV blocks. `expect`: the steps likely left (the first chunk's
    size). Appends to `ends` and `used`; returns the next step index, the clock and the
    blocks taken."""
    p, q, cd, md = pq_cd_md
    bs = len(residue)
    # Blocks each step needs, by step index mod bs: step n needs residue[(-n) % bs].
    need_by_phase = np.asarray([residue[(-j) % bs] for j in range(bs)], dtype=np.int64)
    chunk = expect + 8
    while n < n_end and t < stop_before_s:
        m = min(chunk, n_end - n)
        dc = np.arange(a_sum + b * n, a_sum + b * (n + m), b, dtype=np.float64)[:m]
        x = dc * cd
        x += p
        dc *= md
        dc += q
        clock = np.empty(m + 1)
        clock[0] = t
        np.maximum(x, dc, out=clock[1:])
        np.cumsum(clock, out=clock)           # clock[i] = start of step n + i
        need = need_by_phase.take(np.arange(n, n + m) % bs)
        np.cumsum(need, out=need)
        need += used0 + need_total            # blocks used after each step
        k = int(np.searchsorted(clock[:m], stop_before_s, "left"))
        if need[m - 1] > used0 + free:
            k = min(k, int(np.searchsorted(need, used0 + free, "right")))
        if k:
            ends.extend(clock[1:k + 1].tolist())
            used.extend(need[:k].tolist())
            need_total = int(need[k - 1]) - used0
            t = float(clock[k])
            n += k
        if k < m:
            break
        chunk *= 4
    return n, t, need_total

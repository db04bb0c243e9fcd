"""The continuous-batching scheduler: vLLM V1's policy (and SGLang's, TensorRT-LLM's options).

One step, in order (vLLM's `Scheduler.schedule`, FCFS):

1. Decodes first: every decoding sequence computes one token. If the KV pool lacks the blocks
   they need, the most recently admitted running request is preempted (recompute: its blocks
   are freed, it goes back to the head of the waiting queue and later recomputes its prompt
   plus the tokens it had generated), until the rest fit.
2. Running prefills (chunked prefill) get chunks from the remaining token budget
   `max_num_batched_tokens - decodes`, in admission order.
3. If nothing was preempted in this step, waiting requests are admitted in FCFS order while
   fewer than `max_num_seqs` run, budget is left and the KV pool has their blocks. With
   chunked prefill a request may take a partial chunk; without it, its whole (remaining)
   prompt must fit in the budget (head-of-line blocking, as in vLLM).

Decoding sequences are kept as aggregates (count, sum of contexts, counts of block-boundary
phases, a heap of finish steps), so a step costs O(changes), not O(batch). Between events that
change the batch, `decode_run` (sim/fast_forward.py) advances many decode-only steps in one
numpy computation; a step's seconds come from sim/step_timing.py. This module is the policy
alone.

Deviation (rare, documented): when a running prefill chunk cannot get blocks and the most
recently admitted request is an already-scheduled decode, the chunk waits instead of preempting.

SGLang's policy (`configure_sglang`, from `EngineConfig`; all off by default, leaving the
loop above as it is): with `prefill_first` a step is a prefill batch (steps 2 and 3, the whole
budget) whenever one can be formed, and a decode batch (step 1 alone) otherwise; the decoding
sequences skip a prefill batch (`_pause_decodes` shifts their aggregates by one step). With
a new-token ratio, admission also keeps KV for the decodes' future tokens
(`reserved_new_tokens`). With `lpm`, the waiting queue is ordered by cached prefix length.

Sliding-window models (`KVLayout` with window groups, vLLM's hybrid allocator): a step first
allocates what its chunks and decodes need (window groups keep the blocks of the last w - 1
computed tokens plus the new ones), and after it runs each sequence frees the blocks that
left its window (vLLM frees them at that sequence's next allocation, which for a running
sequence is the next step; a step's frees are all counted before its allocations, where vLLM
interleaves them request by request). A decoding sequence then frees one block per window
group every B steps once past its window (`win_residue`, activated from `_win_heap`).
"""

from __future__ import annotations

import heapq
from collections import deque

from ridgeline.sim.fast_forward import FastForwardMixin
from ridgeline.sim.kv_cache import BlockPool, KVLayout
from ridgeline.sim.sequence import (
    ABORTED,
    DECODE,
    FINISHED,
    PREFILL,
    REJECTED,
    WAITING,
    EngineRequest,
    Sequence,
    StepOutcome,
)
from ridgeline.sim.slots import SlotSteps
from ridgeline.sim.step_timing import StepTimingMixin, TimeFn

# SGLang orders by longest prefix match only while at most this many wait (its
# schedule_policy.py falls back to FCFS above it).
LPM_MAX_WAITING = 128
# SGLang re-estimates the new-token ratio after a retraction as (decoded tokens + this many
# steps per request) / the requests' max new tokens.
RETRACT_DECODE_STEPS = 20
# Prefix-cache keys of the blocks a retracted request leaves cached: (this, request id)
# names its own chain, block i being the i-th block of its tokens.
RETRACTED_KEY = "retracted"


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class Scheduler(FastForwardMixin, StepTimingMixin):
    """Waiting queue, running set, decode aggregates and the KV pool of one engine.

    Step timing (`use_compiled`, `_step_duration`) comes from `StepTimingMixin`
    (sim/step_timing.py), the fast-forward (`can_fast_forward`, `next_finish_start_s`,
    `decode_run`) from `FastForwardMixin` (sim/fast_forward.py)."""

    def __init__(self, max_num_seqs: int, max_num_batched_tokens: int, chunked_prefill: bool,
                 pool: BlockPool, no_evict: bool = False, layout: KVLayout | None = None
                 ) -> None:
        # no_evict: TensorRT-LLM's GUARANTEED_NO_EVICT capacity policy: a request is admitted
        # only if the KV blocks of its whole life (prompt + max output) fit beside those
        # reserved for the running ones, so a started request is never preempted.
        self.no_evict = no_evict
        self.reserved: dict[Sequence, int] = {}
        self.reserved_blocks = 0
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.chunked_prefill = chunked_prefill
        self.pool = pool
        self.bs = pool.block_size_tokens
        # KV groups (`KVLayout`): blocks a sequence holds; one pool block per group per B
        # tokens (a plain paged cache: one group, nothing freed before the end).
        self.layout = layout if layout is not None else KVLayout(self.bs)
        if self.layout.block_size_tokens != self.bs or self.layout.groups != pool.key_blocks:
            raise ValueError("KV layout and block pool disagree")
        self.kv_groups = self.layout.groups
        self.win = self.layout.windowed
        self.win_groups = self.layout.window_groups
        # Decodes past their window, by the step residue of their frees, and the others by
        # the step they get there: (step, admit order, seq).
        self.win_residue = [0] * self.bs
        self.win_active: set[Sequence] = set()
        self._win_heap: list[tuple[int, int, Sequence]] = []
        self.waiting: deque[Sequence] = deque()
        self.running: dict[Sequence, None] = {}     # admission order; a dict as an ordered set
        self.prefilling: list[Sequence] = []        # running, not yet decoding, admission order
        self.seqs: dict[str, Sequence] = {}         # unfinished requests by id
        self.done: list[Sequence] = []              # finished/aborted/rejected, for the caller
        self.keep_done = False
        # Decode aggregates.
        self.dec_count = 0
        self.dec_a_sum = 0
        self.dec_residue = [0] * self.bs
        self.dec_heap: list[tuple[int, int, Sequence]] = []
        # Counters.
        self.step_index = 0
        self.admit_counter = 0
        self.num_preemptions = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.num_finished = 0
        self.num_rejected = 0
        self.prefix_queries_tokens = 0
        self.prefix_hits_tokens = 0
        self.pending_rejected: list[Sequence] = []
        # Step times and their caches (sim/step_timing.py).
        self._init_step_timing()
        # llama.cpp with per-slot KV (sim/slots.py): each step timed by its slots' graphs.
        self.slots: SlotSteps | None = None
        # SGLang's policy (`configure_sglang`); off: vLLM V1's loop, untouched.
        self.prefill_first = False
        self.lpm = False
        self.ratio_init = self.ratio_min = self.ratio_decay = 0.0
        self.clip_tokens = 4096
        self.ratio_base = 0.0       # the ratio when the decay last restarted
        self.ratio_steps = 0        # decode steps since then
        # SGLang's retraction order (`_retract_fewest_outputs`) in place of vLLM's newest-first
        self.retract_fewest_outputs = False

    def configure_sglang(self, config: object) -> None:
        """Take SGLang's scheduling options from an `EngineConfig` (all off for vLLM)."""
        self.prefill_first = bool(getattr(config, "prefill_first", False))
        self.lpm = getattr(config, "schedule_policy", "fcfs") == "lpm"
        self.ratio_init = float(getattr(config, "new_token_ratio_init", 0.0))
        self.ratio_min = float(getattr(config, "new_token_ratio_min", 0.0))
        steps = int(getattr(config, "new_token_ratio_decay_steps", 600))
        self.ratio_decay = (self.ratio_init - self.ratio_min) / steps
        self.clip_tokens = int(getattr(config, "new_token_clip_tokens", 4096))
        self.ratio_base = self.ratio_init
        self.ratio_steps = 0

    def new_token_ratio(self) -> float:
        """SGLang's new-token ratio now: linear decay per decode step, floored (from the
        integer step count, so single steps and fast-forwarded runs agree bit for bit)."""
        return max(self.ratio_base - self.ratio_steps * self.ratio_decay, self.ratio_min)

    def reserved_new_tokens(self, n: int) -> float:
        """KV tokens SGLang's admission keeps for the decoding requests' future tokens before
        step n: ratio x the sum of min(remaining output, clip) over them."""
        ratio = self.new_token_ratio()
        if not ratio:
            return 0.0
        clip = self.clip_tokens
        left = 0
        for seq in self.running:
            if seq.state == DECODE:
                g = seq.g_join + (n - 1 - seq.join_step)    # tokens out after step n - 1
                left += min(seq.output_tokens - g, clip)
        return left * ratio

    def _prefix_match_tokens(self, seq: Sequence) -> int:
        """Cached prefix tokens the waiting `seq` would reuse now (read only)."""
        if not seq.may_have_cached_prefix or seq.num_computed:
            return 0
        return len(self._cached_prefix(seq)) * self.bs

    def _cached_prefix(self, seq: Sequence) -> list:
        """The cached blocks a waiting `seq` can start from: its shared prefix, then the
        blocks of its own that a retraction left cached, without a gap. At least one token
        must be computed to sample from (as vLLM: hits <= n - 1)."""
        limit = (seq.num_tokens - 1) // self.bs
        hits: list = []
        if seq.max_prefix_blocks:
            m = min(seq.max_prefix_blocks, limit)
            hits = (self.pool.lookup_keys(seq.block_keys, m) if seq.block_keys
                    else self.pool.lookup(seq.prefix_group, m))
        if seq.own_cached and len(hits) < limit:
            hits += self.pool.lookup((RETRACTED_KEY, seq.request_id), limit, len(hits))
        return hits

    def _order_lpm(self) -> None:
        """SGLang's lpm policy: the longest cached prefix first (a stable sort, so FCFS among
        equals); like SGLang, FCFS when more than 128 wait (the matching costs too much)."""
        if 1 < len(self.waiting) <= LPM_MAX_WAITING:
            self.waiting = deque(sorted(self.waiting,
                                        key=lambda s: -self._prefix_match_tokens(s)))

    def _transfer_head(self) -> bool:
        """The next admission is a transferred request's first decode (P/D)."""
        if not self.waiting or self.prefilling:
            return False
        head = self.waiting[0]
        return head.g > 0 and head.num_computed == head.num_tokens - 1

    def _pause_decodes(self, n: int) -> None:
        """A prefill-only step n: every decoding sequence skips it. Each one's timeline
        shifts by a step (context a + n stays, finish one step later), its emission segment
        closes before n and reopens after it."""
        shift: list[Sequence] = [s for s in self.running if s.state == DECODE]
        for seq in shift:
            if seq.seg_start <= n - 1:     # (not when step n - 1 was paused too)
                seq.segments.append((seq.seg_start, n - 1))
            seq.seg_start = n + 1
            seq.g_join += n - 1 - seq.join_step
            seq.join_step = n
            seq.a -= 1
            seq.finish_step += 1
        self.dec_a_sum -= len(shift)
        # residue[a % bs] counts moved to (a - 1) % bs
        self.dec_residue = self.dec_residue[1:] + self.dec_residue[:1]
        self.dec_heap = [(s.finish_step, s.admit_order, s) for s in shift]
        heapq.heapify(self.dec_heap)
        if self.win:
            # (w - 2 - a) % bs moves to (w - 1 - a) % bs; not-yet-freeing decodes start a
            # step later
            self.win_residue = self.win_residue[-1:] + self.win_residue[:-1]
            self._win_heap = [(act + 1, order, s) for act, order, s in self._win_heap
                              if s.state == DECODE and s.admit_order == order
                              and s not in self.win_active]
            heapq.heapify(self._win_heap)

    # ---- requests in and out -------------------------------------------------------------

    def add(self, req: EngineRequest) -> Sequence:
        if req.request_id in self.seqs:
            raise ValueError(f"request id {req.request_id!r} is already in the engine")
        seq = Sequence(req, self.bs)
        need = self._reserve_blocks(req) if self.no_evict else self._life_blocks(req)
        too_long = need > self.pool.num_blocks or (
            not self.chunked_prefill
            and req.prompt_tokens - req.kv_ready_tokens > self.max_num_batched_tokens
        )
        if too_long:
            seq.state = REJECTED
            self.num_rejected += 1
            self.pending_rejected.append(seq)
            if self.keep_done:
                self.done.append(seq)
            return seq
        self.seqs[req.request_id] = seq
        self.waiting.append(seq)
        return seq

    def abort(self, request_id: str) -> bool:
        seq = self.seqs.get(request_id)
        if seq is None:
            return False
        if seq.state == WAITING:
            self.waiting.remove(seq)
        else:
            self._evict(seq, self.step_index)
        seq.state = ABORTED
        self._retire(seq)
        return True

    def _life_blocks(self, req: EngineRequest) -> int:
        """The most blocks a request ever holds (prompt + output - 1 tokens of KV)."""
        tokens = req.prompt_tokens + req.output_tokens - 1
        if not self.win:
            return _cdiv(tokens, self.bs)
        chunk = self.max_num_batched_tokens if self.chunked_prefill else req.prompt_tokens
        return self.layout.max_held(tokens, chunk)

    def _reserve_blocks(self, req: EngineRequest) -> int:
        """The blocks GUARANTEED_NO_EVICT reserves for a request: TensorRT-LLM's
        getRemainingBlocksToCompletion, ceil((prompt + max new tokens) / block) (the output
        length stands for max new tokens, as a benchmark run with ignore_eos has it)."""
        if self.win:
            return self._life_blocks(req)
        return _cdiv(req.prompt_tokens + req.output_tokens, self.bs)

    def _retire(self, seq: Sequence) -> None:
        if self.no_evict:
            self.reserved_blocks -= self.reserved.pop(seq, 0)
        del self.seqs[seq.request_id]
        if self.keep_done:
            self.done.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.seqs)

    # ---- helpers -------------------------------------------------------------------------

    def _dec_remove(self, seq: Sequence) -> None:
        self.dec_count -= 1
        self.dec_a_sum -= seq.a
        self.dec_residue[seq.a % self.bs] -= 1
        if seq in self.win_active:
            self.win_active.discard(seq)
            self.win_residue[(self.layout.window_tokens - 2 - seq.a) % self.bs] -= 1

    def _held(self, seq: Sequence, slots: int, computed: int) -> int:
        """Private blocks of `seq` with `slots` token slots after `computed` tokens."""
        if not self.win:
            return _cdiv(slots, self.bs) - len(seq.shared)
        return self.layout.held(slots, computed, len(seq.shared))

    def _win_join(self, seq: Sequence, n: int) -> None:
        """A sequence decodes from step n + 1: when its decode steps start to free blocks.
        The block it frees after step m is the one skip(a + m + 1) adds; the first not
        shared comes at a + m + 1 - w + 1 = (shared + 1) B."""
        act = (len(seq.shared) + 1) * self.bs + self.layout.window_tokens - 2 - seq.a
        heapq.heappush(self._win_heap, (max(act, n + 1), seq.admit_order, seq))

    def _win_activate(self, n: int) -> None:
        """Decodes whose frees begin by step n join `win_residue`."""
        heap = self._win_heap
        while heap and heap[0][0] <= n:
            _, order, seq = heapq.heappop(heap)
            # (An entry of an earlier admission, before a preemption, is stale.)
            if seq.state == DECODE and seq.admit_order == order and seq not in self.win_active:
                self.win_active.add(seq)
                self.win_residue[(self.layout.window_tokens - 2 - seq.a) % self.bs] += 1

    def _win_next_activation(self) -> int:
        heap = self._win_heap
        while heap and (heap[0][2].state != DECODE or heap[0][2].admit_order != heap[0][1]
                        or heap[0][2] in self.win_active):
            heapq.heappop(heap)
        return heap[0][0] if heap else 1 << 62

    def _win_frees(self, n: int) -> int:
        """Blocks the decodes free after step n (their window moved past a block)."""
        self._win_activate(n)
        return self.win_groups * self.win_residue[n % self.bs]

    def _evict(self, seq: Sequence, n: int) -> None:
        """Take a running sequence out before step n runs: close its segment, free its KV."""
        if seq.state == DECODE:
            seq.g = seq.g_join + (n - 1 - seq.join_step)
            kv_tokens = seq.a + n
            if seq.seg_start <= n - 1:   # (not right after a prefill-first pause)
                seq.segments.append((seq.seg_start, n - 1))
            self._dec_remove(seq)
        else:
            kv_tokens = seq.num_computed
            self.prefilling.remove(seq)
        self.pool.release(seq.shared, self._held(seq, kv_tokens, kv_tokens))
        seq.shared = []
        seq.num_computed = 0
        seq.seg_start = -1
        del self.running[seq]

    def _preempt_tail(self, n: int) -> Sequence:
        victim = next(reversed(self.running))
        self._evict(victim, n)
        victim.state = WAITING
        victim.preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(victim)
        return victim

    def _schedule_decodes(self, n: int, out: StepOutcome) -> None:
        """Blocks for this step's decodes; preempt the most recently admitted request while
        blocks lack."""
        bs, pool = self.bs, self.pool
        groups = self.kv_groups
        need = groups * self.dec_residue[(-n) % bs] if self.dec_count else 0
        if need > pool.free_blocks and self.retract_fewest_outputs:
            need = self._retract_fewest_outputs(n, out, need)
        while need > pool.free_blocks:
            victim = next(reversed(self.running))
            if victim.state == DECODE and (victim.a + n) % bs == 0:
                need -= groups
            out.preempted.append(self._preempt_tail(n))
        if need:
            pool.allocate(need)
        if out.preempted and self.ratio_init:
            self._ratio_after_retract(n)

    def _retract_fewest_outputs(self, n: int, out: StepOutcome, need: int) -> int:
        """SGLang's retraction when the decodes lack KV: order the decoding requests by output
        tokens so far (most first), the shorter prompt first among equals, and retract from
        the end of that order (fewest outputs, then the longest prompt) at least one, and on
        until RETRACT_DECODE_STEPS tokens per remaining request are free or one is left.
        A retracted request waits at the back of the queue and recomputes what it lost when
        admitted again. With prefix caching on (SGLang's radix cache), the tokens its last
        prefill computed stay cached, evictable (`_keep_retracted_prefix`); the tokens it
        decoded since are freed. Returns the blocks this step's decodes still need."""
        bs, groups = self.bs, self.kv_groups
        decs = [s for s in self.running if s.state == DECODE]
        decs.sort(key=lambda s: (s.g_join + (n - 1 - s.join_step), -s.prompt_tokens),
                  reverse=True)
        keep = self.pool.enable_prefix_caching and not self.win
        first = True
        while len(decs) > 1 and (first or self.pool.free_blocks * bs
                                 < len(decs) * RETRACT_DECODE_STEPS):
            first = False
            victim = decs.pop()
            if (victim.a + n) % bs == 0:
                need -= groups
            if keep:
                self._keep_retracted_prefix(victim)
            self._evict(victim, n)
            victim.state = WAITING
            victim.preemptions += 1
            self.num_preemptions += 1
            self.waiting.append(victim)
            out.preempted.append(victim)
        return need

    def _keep_retracted_prefix(self, seq: Sequence) -> None:
        """SGLang's release of a retracted request (release_req: cache_finished_req with
        is_insert=False): the tokens in the radix tree stay there, unlocked and so
        evictable; the rest is freed. The tree holds what its last prefill computed
        (cache_unfinished_req inserts the prompt, and on a re-admission the prompt plus the
        outputs before it); decoded tokens enter the tree only when a request finishes. Its
        blocks beyond those already shared become cached under keys of its own, so a
        re-admission starts from them unless they were evicted in between (eviction order:
        the pool's LRU by release time, where SGLang's tree orders by last access)."""
        shared = seq.shared
        keys = seq.block_keys
        for i in range(len(shared), seq.fill_tokens // self.bs):
            # A block the request's content keys name is shared by content, as any prefix.
            key = keys[i] if keys and i < len(keys) else (
                (seq.prefix_group, i) if i < seq.max_prefix_blocks and not keys
                else ((RETRACTED_KEY, seq.request_id), i))
            if not self.pool.register(key):
                break
            shared.append(key)
        seq.own_cached = True

    def _ratio_after_retract(self, n: int) -> None:
        """SGLang's estimate after a retraction: (tokens decoded + RETRACT_DECODE_STEPS per
        request) / the requests' max new tokens, over those still decoding, at most 1."""
        done = total = count = 0
        for seq in self.running:
            if seq.state == DECODE:
                done += seq.g_join + (n - 1 - seq.join_step)
                total += seq.output_tokens
                count += 1
        if total:
            self.ratio_base = min(1.0, (done + RETRACT_DECODE_STEPS * count) / total)
            self.ratio_steps = 0

    def _output_reserve(self, seq: Sequence, chunk: int, computed: int | None = None) -> int:
        """The output tokens SGLang reserves with a prefill chunk: a request's (clipped)
        remaining output with its last chunk, none with a partial one."""
        c0 = seq.num_computed if computed is None else computed
        if c0 + chunk < seq.num_tokens:
            return 0
        return min(seq.output_tokens - seq.g, self.clip_tokens)

    def _admission_plan(self, seq: Sequence, budget: int, scheduled_any: bool
                        ) -> tuple[list, int, int, int] | None:
        """(prefix hits, computed tokens, chunk, new blocks) if `seq` can be admitted now."""
        bs, pool = self.bs, self.pool
        hits: list = []
        computed = seq.num_computed
        if seq.may_have_cached_prefix and computed == 0:
            hits = self._cached_prefix(seq)
            computed = len(hits) * bs
        remaining = seq.num_tokens - computed
        if self.chunked_prefill:
            chunk = min(remaining, budget)
        else:
            if remaining > budget and scheduled_any:
                return None
            chunk = remaining
        if self.win:
            # Nothing held yet: the window groups skip what is before the window.
            new_blocks = self.layout.held(computed + chunk, computed, len(hits))
        else:
            new_blocks = _cdiv(computed + chunk, bs) - _cdiv(computed, bs)
            if computed > len(hits) * bs:   # KV already present (transferred): its blocks
                new_blocks += _cdiv(computed, bs)
        free = pool.free_blocks - (pool.evictable_among(hits) if hits else 0)
        if new_blocks > free:
            return None
        return hits, computed, chunk, new_blocks

    def head_admissible(self) -> bool:
        """Would the next step admit the head of the waiting queue? (fast-forward guard)"""
        if not self.waiting or len(self.running) >= self.max_num_seqs:
            return False
        budget = self.max_num_batched_tokens - (0 if self.prefill_first else self.dec_count)
        if budget <= 0:
            return False
        head = self.waiting[0]
        if self.no_evict and head not in self.reserved and self.reserved_blocks + \
                self._reserve_blocks(head.req) > self.pool.num_blocks:
            return False
        return self._admission_plan(head, budget, self.dec_count > 0 and not self.prefill_first
                                    ) is not None

    # ---- one step ------------------------------------------------------------------------

    def step(self, now_s: float, time_fn: TimeFn, collect: bool) -> StepOutcome:
        """Schedule and run step number `step_index`, starting at now_s."""
        n = self.step_index
        bs, pool = self.bs, self.pool
        out = StepOutcome()

        # 1. Decodes first; preempt the most recently admitted request while blocks lack.
        # (Prefill-first, SGLang: only in a step that has no prefill work, below.)
        paused = False
        if self.lpm and self.waiting:
            self._order_lpm()
        # A request whose prompt KV came from a prefill instance (P/D) only decodes: it
        # joins the decode batch, as on SGLang's decode server.
        prefill_first = self.prefill_first and not self._transfer_head()
        if prefill_first:
            n_dec = 0
        else:
            self._schedule_decodes(n, out)
            n_dec = self.dec_count
        dec_ctx = self.dec_a_sum + n_dec * n
        budget = self.max_num_batched_tokens - n_dec
        chunks: list[tuple[Sequence, int]] = []
        # SGLang's admission: KV tokens free at the start of the step, less those kept for
        # the decodes' future tokens and those this step's prefills take (with their
        # outputs); computed when first needed.
        reserve = self.ratio_init > 0
        avail_tokens = pool.free_blocks * bs
        offset = -1.0

        # 2. Running prefills (only with chunked prefill can one be part-way).
        budget, offset = self._continue_prefills(n, out, budget, chunks, reserve, offset)

        # 3. Admit waiting requests (not in a step that had to preempt).
        if not out.preempted:
            self._admit_waiting(n, budget, chunks, n_dec > 0, reserve, avail_tokens, offset)

        if prefill_first:
            if chunks:
                if self.dec_count:
                    self._pause_decodes(n)     # a prefill batch: the decodes wait
                    paused = True
                dec_ctx = 0
            elif self.dec_count:
                self._schedule_decodes(n, out)     # no prefill batch: a decode batch
                n_dec = self.dec_count
                dec_ctx = self.dec_a_sum + n_dec * n
        if not chunks and n_dec == 0:
            # nothing to do: duration 0 (an idle SGLang restarts its new-token ratio)
            self.ratio_base, self.ratio_steps = self.ratio_init, 0
            return out
        if n_dec and not chunks:
            self.ratio_steps += 1       # SGLang decays the ratio on each decode batch
        graphs = None if self.slots is None else self.slots.step_graphs(
            self.running, [s for s in self.running if s.state == DECODE], chunks)

        # The work of the step. A one-token chunk of a sequence that has output already
        # (a transferred request's first step) is a decode.
        pf_tokens = pf_pairs = pf_ctx = pf_seqs = 0
        for seq, c in chunks:
            p = seq.num_computed
            if c == 1 and seq.g > 0 and p == seq.num_tokens - 1:
                n_dec += 1
                dec_ctx += p
            else:
                pf_tokens += c
                pf_pairs += c * p + c * (c + 1) // 2
                pf_ctx += p
                pf_seqs += 1
        out.prefill_tokens = pf_tokens
        out.prefill_seqs = pf_seqs
        out.decode_seqs = n_dec
        if collect and not paused:
            out.decode_ids = [s.request_id for s in self.running if s.state == DECODE]

        # Apply: decodes emit lazily; prefill chunks advance; completions emit a token.
        if not paused:
            self.generation_tokens_total += self.dec_count
        win_freed = self._win_frees(n) if self.win and self.dec_count and not paused else 0
        for seq, c in chunks:
            seq.num_computed += c
            if self.win:   # the blocks this chunk moved the window past
                t = seq.num_computed
                pool.release([], self._held(seq, t, t - c) - self._held(seq, t, t))
            if seq.max_prefix_blocks:
                self._register_prefix(seq)
            if seq.num_computed == seq.num_tokens:
                self._emit_first(seq, n, out)
        if chunks:
            self.prefilling = [s for s in self.prefilling if s.state == PREFILL]
        if win_freed:
            pool.release([], win_freed)
        self._finish_decodes(n, out)
        self.step_index = n + 1
        # Time the step (its effects above do not depend on its duration).
        out.duration_s = self._step_duration(time_fn, n, graphs, bool(chunks), pf_tokens,
                                             pf_pairs, pf_ctx, pf_seqs, n_dec, dec_ctx)
        return out

    def _continue_prefills(self, n: int, out: StepOutcome, budget: int,
                           chunks: list[tuple[Sequence, int]], reserve: bool, offset: float
                           ) -> tuple[int, float]:
        """Step n's chunks of the prefills already running, in order, while the token budget
        and the KV blocks last (preempting the latest admitted prefills for blocks, never a
        decode). Appends to `chunks`; returns (budget left, SGLang's reservation offset)."""
        bs, pool = self.bs, self.pool
        for seq in list(self.prefilling):
            if budget <= 0:
                break
            if seq.state != PREFILL:
                continue   # preempted just now, in this loop
            chunk = min(seq.num_tokens - seq.num_computed, budget)
            c0 = seq.num_computed
            new_blocks = (self._held(seq, c0 + chunk, c0) - self._held(seq, c0, c0)
                          if self.win else _cdiv(c0 + chunk, bs) - _cdiv(c0, bs))
            scheduled = True
            while new_blocks > pool.free_blocks:
                victim = next(reversed(self.running))
                if victim.state == DECODE:
                    scheduled = False       # see the module note: wait, do not un-schedule
                    break
                out.preempted.append(self._preempt_tail(n))
                if victim is seq:
                    scheduled = False
                    break
            if not scheduled:
                break
            pool.allocate(new_blocks)
            budget -= chunk
            chunks.append((seq, chunk))
            if reserve:
                if offset < 0:
                    offset = self.reserved_new_tokens(n)
                offset += chunk + self._output_reserve(seq, chunk)
        return budget, offset

    def _admit_waiting(self, n: int, budget: int, chunks: list[tuple[Sequence, int]],
                       has_decodes: bool, reserve: bool, avail_tokens: int, offset: float
                       ) -> None:
        """Admit waiting requests in queue order while seats, the token budget, the KV
        blocks and (SGLang) the admission reservations allow; appends their chunks."""
        pool = self.pool
        waiting = self.waiting
        while waiting and len(self.running) < self.max_num_seqs and budget > 0:
            seq = waiting[0]
            plan = self._admission_plan(seq, budget, bool(chunks) or has_decodes)
            if plan is None:
                break
            if self.no_evict and seq not in self.reserved:
                life = self._reserve_blocks(seq.req)
                if self.reserved_blocks + life > pool.num_blocks:
                    break
                self.reserved[seq] = life
                self.reserved_blocks += life
            hits, computed, chunk, new_blocks = plan
            if reserve:
                # SGLang's PrefillAdder: the whole rest of the prompt plus its output
                # (clipped) must fit in what the reservations leave. The cached prefix it
                # matched is locked first (`_lock_node`): evictable pages among it no longer
                # count as free.
                if offset < 0:
                    offset = self.reserved_new_tokens(n)
                left = seq.num_tokens - computed
                locked = pool.evictable_among(hits) * self.bs if hits else 0
                if left + min(seq.output_tokens - seq.g, self.clip_tokens) \
                        >= avail_tokens - offset - locked:
                    break
                offset += chunk + self._output_reserve(seq, chunk, computed) + locked
            waiting.popleft()
            if seq.may_have_cached_prefix and seq.num_computed == 0:
                self.prefix_queries_tokens += seq.num_tokens
                self.prefix_hits_tokens += computed
                if seq.req.cached_tokens is None:
                    seq.req.cached_tokens = computed
            if hits:
                pool.acquire(hits)
                seq.shared = hits
            seq.num_computed = computed
            pool.allocate(new_blocks)
            seq.state = PREFILL
            seq.admit_order = self.admit_counter
            self.admit_counter += 1
            self.running[seq] = None
            self.prefilling.append(seq)
            budget -= chunk
            chunks.append((seq, chunk))

    def _register_prefix(self, seq: Sequence) -> None:
        upto = min(seq.max_prefix_blocks, seq.num_computed // self.bs)
        i = len(seq.shared)
        keys = seq.block_keys
        pool, t = self.pool, seq.num_computed
        while i < upto:
            key = keys[i] if keys else (seq.prefix_group, i)
            # A cached block is held in every group (`BlockPool`): in a window group one
            # the window already passed is taken back.
            extra = 0
            if self.win:
                extra = pool.key_blocks - (self.layout.held(t, t, i)
                                           - self.layout.held(t, t, i + 1))
                if extra > pool.free_blocks:
                    break
            if not pool.register(key):
                break
            if extra:
                pool.allocate(extra)
            seq.shared.append(key)
            i += 1

    def _emit_first(self, seq: Sequence, n: int, out: StepOutcome) -> None:
        """A prefill (or a transferred request's first step) completed in step n."""
        if not seq.segments:     # first output of this request here (not a recompute)
            self.prompt_tokens_total += seq.prompt_tokens
        seq.g += 1
        self.generation_tokens_total += 1
        seq.fill_tokens = seq.num_computed
        seq.seg_start = n
        out.first_tokens.append(seq.request_id)
        if seq.g == seq.output_tokens:
            seq.segments.append((n, n))
            t = seq.num_computed
            self._finish(seq, self._held(seq, t, t), n, t)
            out.finished.append(seq)
            return
        seq.state = DECODE
        seq.a = seq.num_computed - n - 1
        seq.g_join = seq.g
        seq.join_step = n
        seq.finish_step = n + seq.output_tokens - seq.g
        heapq.heappush(self.dec_heap, (seq.finish_step, seq.admit_order, seq))
        self.dec_count += 1
        self.dec_a_sum += seq.a
        self.dec_residue[seq.a % self.bs] += 1
        if self.win:
            self._win_join(seq, n)

    def _finish(self, seq: Sequence, private: int, n: int, kv_tokens: int = 0) -> None:
        """Retire a finished sequence holding `private` blocks besides its shared ones."""
        keys = seq.block_keys
        # (Not with window groups: a reply block the window passed is no longer held.)
        if keys and len(keys) > len(seq.shared) and self.pool.enable_prefix_caching \
                and not self.win:
            # Content keys beyond the prompt name the reply's full blocks: cache them as
            # vLLM does, so a next turn that carries this reply reuses it.
            shared = seq.shared
            for i in range(len(shared), min(len(keys), kv_tokens // self.bs)):
                if not self.pool.register(keys[i]):
                    break
                shared.append(keys[i])
                private -= 1
        self.pool.release(seq.shared, private)
        seq.shared = []
        seq.state = FINISHED
        seq.finish_step = n
        del self.running[seq]
        self.num_finished += 1
        self._retire(seq)

    def _finish_decodes(self, n: int, out: StepOutcome) -> None:
        heap = self.dec_heap
        while heap:
            fs, _, seq = heap[0]
            if seq.state != DECODE or seq.finish_step != fs:
                heapq.heappop(heap)      # stale entry (preempted or aborted)
                continue
            if fs != n:
                break
            heapq.heappop(heap)
            seq.g = seq.output_tokens
            seq.segments.append((seq.seg_start, n))
            self._dec_remove(seq)
            t = seq.a + n + 1          # after this step's frees (`_win_frees`)
            self._finish(seq, self._held(seq, t, t), n, t)
            out.finished.append(seq)


"""llama-server's slots: which slot a request gets, and the graphs a step runs.

With `-np N` and no `-kvu`, llama.cpp keeps one KV stream per slot and runs each batch as the
ubatches `llama_batch_allocr::split_equal(n_ubatch, sequential=true)` builds (read in the
vendored llama.cpp of llama-cpp-python 0.3.36, commit 0c1e570; docs/calibration.md):

- **Slot choice** (`tools/server/server-context.cpp`, `get_available_slot`): with prompt
  similarity off (`-sps 0`, or no idle slot holding a prompt sharing > 10% of the new one),
  the idle slot with the smallest `t_last_used` wins, scanning slots 0..N-1 with `<=`, so a
  tie goes to the highest id. `t_last_used` is -1 until the slot's first release
  (`server_slot::release` sets it to the time): a fresh server hands out N-1, N-2, ..., 0,
  then the slot released longest ago. `cache_prompt: false` changes only how much of the
  prompt is reused (`n_past`), not this choice.
- **Batch order** (`update_slots`): one token per generating slot, in slot order, then the
  prompt tokens of the slots still prefilling, in slot order.
- **Ubatches** (`src/llama-batch.cpp`, `split_equal`, called from
  `llama_kv_cache::init_batch` whenever the cache has more than one stream): scanning the
  batch in order, a ubatch takes the first unused token's sequence, then every later
  sequence whose id is the last one taken + 1; each takes the same number of tokens k (as
  many as the shortest has left, at most n_ubatch / sequences, at least 1). So decodes in
  slots 0,2,4 are three graphs, in 0,1,2 one; a prompt joining running decodes gets a graph
  of its own (its first token rides with an adjacent decode run).

`SlotTable` holds the assignment for one simulated engine; `split_equal_sequential` is the
pure rule. The step's seconds are then the sum over its graphs of the profile's one-graph
time T(tokens) plus the attention term (`CalibrationProfile.graphs_time_s`).

>>> t = SlotTable(4)
>>> [t.acquire(k) for k in "abc"]          # a fresh server: highest id first
[3, 2, 1]
>>> t.release_all(["c", "a"]); t.acquire("d"), t.acquire("e")   # never used, then LRU
(0, 1)
>>> split_equal_sequential([(0, 1), (2, 1), (4, 1)], 512)       # three runs, three graphs
[1, 1, 1]
>>> split_equal_sequential([(0, 1), (1, 1), (2, 1), (3, 128)], 512)
[4, 127]
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any, NamedTuple


def split_equal_sequential(batch: list[tuple[int, int]], n_ubatch: int) -> list[int]:
    """Token counts of the ubatches of one batch, as `split_equal(n_ubatch, true)` makes them.

    `batch` lists (sequence id, tokens) in batch order, each sequence once (its tokens are
    contiguous in a llama-server batch: one decode token, or one prompt chunk).
    """
    left = [n for _, n in batch]
    ids = [s for s, _ in batch]
    out: list[int] = []
    while True:
        chain: list[int] = []            # indices into batch
        last = -1
        for i, s in enumerate(ids):
            if left[i] <= 0:
                continue
            if not chain or s == last + 1:
                chain.append(i)
                last = s
                if len(chain) > n_ubatch:
                    break
        if not chain:
            return out
        k = min(min(left[i] for i in chain), max(1, n_ubatch // len(chain)))
        for i in chain:
            left[i] -= k
        out.append(k * len(chain))


class SlotTable:
    """The slots of one llama-server: who holds which, and when each was last released."""

    def __init__(self, n_slots: int, lru_order: list[int] | None = None) -> None:
        """`lru_order`: the server's state at the start, the slots in the order a burst of
        requests would get them (see `lru_order`); default: a fresh server (N-1 .. 0)."""
        self.n_slots = n_slots
        self.t_last_used = [-1] * n_slots    # a release counter stands in for the clock
        if lru_order is not None:
            if sorted(lru_order) != list(range(n_slots)):
                raise ValueError(f"slot order {lru_order}: must list slots 0..{n_slots - 1} "
                                 "once each")
            for rank, s in enumerate(lru_order):
                self.t_last_used[s] = rank - n_slots    # all before the first release here
        self.holder: list[Hashable | None] = [None] * n_slots
        self.slot_of: dict[Hashable, int] = {}
        self._clock = 0

    def lru_order(self) -> list[int]:
        """The slots in the order `acquire` would hand them out now (idle ones first)."""
        return sorted(range(self.n_slots), key=lambda s: (self.holder[s] is not None,
                                                          self.t_last_used[s], -s))

    def take(self, key: Hashable, slot: int) -> None:
        """`key` got `slot` by other means (llama-server's `id_slot`, or read from its log)."""
        if self.holder[slot] is not None:
            raise ValueError(f"slot {slot} is busy")
        self.holder[slot] = key
        self.slot_of[key] = slot

    def acquire(self, key: Hashable) -> int:
        """The slot `get_available_slot` picks by LRU for a new request `key`."""
        if key in self.slot_of:
            return self.slot_of[key]
        best = -1
        for s in range(self.n_slots):
            if self.holder[s] is None and (best < 0
                                           or self.t_last_used[s] <= self.t_last_used[best]):
                best = s
        if best < 0:
            raise RuntimeError("no idle slot (the scheduler admitted more than -np requests)")
        self.holder[best] = key
        self.slot_of[key] = best
        return best

    def release_all(self, keys: Iterable[Hashable]) -> None:
        """Requests that ended in one step: `update_slots` releases them in slot order, each
        at a later time than the one before."""
        for s in sorted(self.slot_of.pop(k) for k in keys if k in self.slot_of):
            self._clock += 1
            self.t_last_used[s] = self._clock
            self.holder[s] = None

    def graphs(self, decoding: list[Hashable], prompts: list[tuple[Hashable, int]],
               n_ubatch: int) -> list[int]:
        """Token counts of the graphs of a step with these decodes and prompt chunks; new
        requests get their slots here, in the order given (the order they arrived)."""
        for k in [*decoding, *(k for k, _ in prompts)]:
            self.acquire(k)
        batch = sorted((self.slot_of[k], 1) for k in decoding)
        batch += sorted((self.slot_of[k], c) for k, c in prompts)
        return split_equal_sequential(batch, n_ubatch)


class SlotReplay(NamedTuple):
    """What `replay_requests` found."""

    order: list[int]        # the LRU order after the requests (idle slots first)
    waited: int             # requests that found no idle slot and waited
    released: list[int]     # slots released during the replay, by last release, oldest first


def replay_requests(requests: Iterable[tuple[float, float, int | None]], n_slots: int,
                    lru_order: list[int] | None = None, same_step_s: float = 0.0
                    ) -> SlotReplay:
    """llama-server's LRU slot order after it served `requests`, replayed from what a client
    saw: (send time, end time, `id_slot` or None) per request, all in seconds on one clock.

    A request takes a slot at its send time (its `id_slot`, or LRU) and gives it back at its
    end. Ends less than `same_step_s` after the first end of a group are one engine step
    (the client saw them a little apart): they are released together, in slot order, as
    `update_slots` does, and before any request sent in between (the server released them
    before the client saw the ends). A request that finds no idle slot (or its pinned slot
    busy) waits, first come first served, until a release. A request with no known end
    (NaN) ends when it was sent.

    >>> replay_requests([(0.0, 1.0, None), (0.1, 1.001, None)], 4, same_step_s=0.01).order
    [1, 0, 2, 3]
    """
    import math

    reqs = [(float(s), float(e) if math.isfinite(e) else float(s), pin)
            for s, e, pin in requests]
    t = SlotTable(n_slots, lru_order)
    # (time, kind, index): releases (0) before sends (1) at the same time
    events = sorted([(e, 0, i) for i, (_, e, _) in enumerate(reqs)] +
                    [(s, 1, i) for i, (s, _, _) in enumerate(reqs)])
    waiting: list[int] = []
    waited = 0

    def admit(i: int) -> bool:
        pin = reqs[i][2]
        if pin is not None:
            if not 0 <= pin < n_slots:
                raise ValueError(f"id_slot {pin}: the server has slots 0..{n_slots - 1}")
            if t.holder[pin] is not None:
                return False
            t.take(i, pin)
            return True
        if all(h is not None for h in t.holder):
            return False
        t.acquire(i)
        return True

    group: list[int] = []
    group_t = -math.inf
    done: set[int] = set()

    def flush() -> None:
        t.release_all([i for i in group if i in t.slot_of])
        done.update(group)
        group.clear()
        for i in list(waiting):         # deferred requests, in arrival order
            if i in done:
                waiting.remove(i)       # ended (failed) before it got a slot
            elif admit(i):
                waiting.remove(i)

    sends: list[int] = []               # sent while a group of ends is still open

    def send(i: int) -> None:
        nonlocal waited
        if i in done:
            return                      # ended no later than it was sent
        if waiting or not admit(i):
            waiting.append(i)
            waited += 1

    def close() -> None:
        flush()
        for i in sends:
            send(i)
        sends.clear()

    for time_s, kind, i in events:
        if group and time_s - group_t >= same_step_s:
            close()
        if kind == 0:
            if not group:
                group_t = time_s
            group.append(i)
        elif group:
            sends.append(i)
        else:
            send(i)
    close()
    released = sorted((s for s in range(n_slots) if t.t_last_used[s] > 0),
                      key=lambda s: t.t_last_used[s])
    return SlotReplay(t.lru_order(), waited, released)


def check_log(lines: Iterable[str], n_slots: int, stop_before: int | None = None
              ) -> tuple[int, int, list[int]]:
    """Replay a llama-server log's slot events (`selected slot by ...`, `stop processing`)
    through a `SlotTable`: (LRU choices the table predicted right, LRU choices in all, the
    LRU order at the log's end, or just before request number `stop_before` + 1 got its
    slot: the state a load point that starts there meets). Choices by id (`id_slot`) are
    taken as logged."""
    import re

    pick = re.compile(r"get_availabl: id +(\d+) \| task -?\d+ \| selected slot by (\w+)")
    stop = re.compile(r"release: id +(\d+) \| task -?\d+ \| stop processing")
    t = SlotTable(n_slots)
    right = total = 0
    n = 0
    for line in lines:
        m = pick.search(line)
        if m:
            slot, how = int(m.group(1)), m.group(2)
            if t.holder[slot] is not None:
                continue       # a deferred task logs its (busy) requested slot again
            if stop_before is not None and n == stop_before:
                break
            n += 1
            if how == "LRU":
                total += 1
                right += t.acquire(n) == slot
                if t.slot_of[n] != slot:     # follow the server, not the prediction
                    t.release_all([n])
                    t.take(n, slot)
            else:
                t.take(n, slot)
            continue
        m = stop.search(line)
        if m:
            slot = int(m.group(1))
            if t.holder[slot] is not None:
                t.release_all([t.holder[slot]])
    return right, total, t.lru_order()


class SlotSteps:
    """The scheduler's hook (`Scheduler.slots`): a step's graphs from its sequences' slots,
    and its seconds from the profile's one-graph table. Requests that left the engine since
    the last step (finished, preempted, aborted) give their slots back first."""

    def __init__(self, n_slots: int, n_ubatch: int,
                 graphs_time_s: Callable[[list[int], float, float], float],
                 lru_order: list[int] | None = None) -> None:
        self.table = SlotTable(n_slots, lru_order)
        self.n_ubatch = n_ubatch
        self.graphs_time_s = graphs_time_s

    def step_graphs(self, running: Iterable[Any], decoding: list[Any],
                    chunks: list[tuple[Any, int]]) -> list[int]:
        live = set(running)
        self.table.release_all([k for k in self.table.slot_of if k not in live])
        return self.table.graphs(decoding, chunks, self.n_ubatch)

    def duration_s(self, graphs: list[int], prefill_pairs: float, decode_pairs: float
                   ) -> float:
        return self.graphs_time_s(graphs, prefill_pairs, decode_pairs)


__all__ = ["SlotReplay", "SlotSteps", "SlotTable", "check_log", "replay_requests",
           "split_equal_sequential"]

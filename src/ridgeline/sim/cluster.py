"""Replicas behind a router, and prefill/decode disaggregation.

A cluster is N engine replicas (data parallel), each with its own KV pool and clock position.
A router picks the replica for each arriving request:

    round-robin          in turn
    least-outstanding    fewest requests waiting or running (ties: lowest index)
    least-kv             lowest KV-cache usage (ties: fewest outstanding, lowest index)

A decode instance's load counts the requests whose KV is on its way to it (P/D with
`link_queue`: the receiver is picked when the transfer is queued) and, for least-kv, their
prompts' KV blocks, as llm-d's and Dynamo's routers assign a request when its transfer
starts and the decode server allocates its KV then.
    prefix-affinity      a request of prefix group g goes to replica g mod N (every turn
                         of a session, every request sharing a system prompt, lands where
                         its prefix is cached); a request without a group, i mod N

Round-robin and prefix-affinity read no replica state: given the workload, each request's
replica is fixed (`assigned_replica`), so the replicas are independent and a run can be
sharded (`ridgeline.sim.fleet`).

With `pd=(P, D)` the first P replicas only prefill and the last D only decode. A request is
prefilled on a prefill instance, which emits its first token; its prompt KV then travels to a
decode instance, taking `latency + prompt_tokens * kv_bytes_per_token / link_bandwidth`
seconds, and the decode instance generates the rest. With `link_queue` each prefill
instance's outbound link and each decode instance's inbound link carry one transfer at a
time: when a prefill ends, the decode router picks the receiver (its choice at that moment),
and the transfer starts once the sender's outbound and the receiver's inbound link are both
free, holding both for `bytes / link_bandwidth`; transfers are served in the order they were
queued (prefill end; the same step's finishers in the engine's order). Under load they queue
on either side (the wait and the transfer time of each request are kept in the result).
`prefill_engine` / `decode_engine` give a pool its own engine configuration and step-time
model (its own parallelism, KV capacity and batch limits); None: the run's. Choices: the
prefill instance frees the KV when the first token is out (the transfer holds the links, not
prefill memory), the decode instance is picked when the transfer is queued (with
`link_queue`; without it, when the KV arrives), and each pool has its own router of the
same kind.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ridgeline.errors import RidgelineError
from ridgeline.sim.engine import Engine

ROUTERS = ("round-robin", "least-outstanding", "least-kv", "prefix-affinity")
# Routers whose choice depends only on the request (its index and prefix group).
STATELESS_ROUTERS = ("round-robin", "prefix-affinity")


def assigned_replica(router: str, replicas: int, index: np.ndarray,
                     prefix_group: np.ndarray | None) -> np.ndarray:
    """The replica each request goes to under a stateless router (the i-th arrival is
    request `index[i]`). Round-robin: i mod N; prefix-affinity: g mod N for group g >= 0,
    else i mod N."""
    by_index = index % replicas
    if router == "round-robin" or prefix_group is None:
        return by_index
    return np.where(prefix_group >= 0, prefix_group % replicas, by_index)


@dataclass(frozen=True)
class ClusterConfig:
    """How many replicas, how requests are routed, and the optional P/D split."""

    replicas: int = 1
    router: str = "round-robin"
    pd: tuple[int, int] | None = None
    kv_bytes_per_token: float = 0.0
    link_bandwidth_bytes_s: float = math.inf
    kv_transfer_latency_s: float = 0.0
    link_queue: bool = False
    link_kind: str = ""
    # (EngineConfig, step-time model) of a pool with its own configuration
    prefill_engine: tuple[Any, Any] | None = None
    decode_engine: tuple[Any, Any] | None = None

    def __post_init__(self) -> None:
        if self.router not in ROUTERS:
            raise RidgelineError(f"--router: got {self.router!r}; allowed: {', '.join(ROUTERS)}")
        if self.pd is None and self.replicas < 1:
            raise RidgelineError(f"--replicas: got {self.replicas}; allowed: >= 1")
        if self.pd is not None and (self.pd[0] < 1 or self.pd[1] < 1):
            raise RidgelineError(f"--pd: got {self.pd[0]}:{self.pd[1]}; allowed: P:D with "
                                 "P >= 1 and D >= 1")
        if self.link_bandwidth_bytes_s <= 0 or self.kv_bytes_per_token < 0:
            raise RidgelineError("--pd: KV transfer needs bandwidth > 0 and bytes/token >= 0")

    @property
    def num_instances(self) -> int:
        return self.pd[0] + self.pd[1] if self.pd else self.replicas

    def transfer_s(self, prompt_tokens: int) -> float:
        """Seconds to move a prompt's KV from a prefill to a decode instance."""
        return self.kv_transfer_latency_s + (
            prompt_tokens * self.kv_bytes_per_token / self.link_bandwidth_bytes_s)

    def link_busy_s(self, prompt_tokens: int) -> float:
        """Seconds a transfer holds its link (the bytes; the latency overlaps the next)."""
        return prompt_tokens * self.kv_bytes_per_token / self.link_bandwidth_bytes_s

    @property
    def own_pools(self) -> bool:
        """Whether a pool has its own engine configuration (the Python engine runs it)."""
        return self.prefill_engine is not None or self.decode_engine is not None

    def engine_for(self, role: str, config: Any, model: Any) -> tuple[Any, Any]:
        """The (EngineConfig, step-time model) of an instance of this role."""
        own = {"prefill": self.prefill_engine, "decode": self.decode_engine}.get(role)
        return own if own is not None else (config, model)

    def describe(self) -> dict[str, object]:
        out: dict[str, object] = {"router": self.router}
        if self.pd:
            out.update(prefill_instances=self.pd[0], decode_instances=self.pd[1],
                       kv_bytes_per_token=self.kv_bytes_per_token,
                       link_bandwidth_bytes_s=self.link_bandwidth_bytes_s,
                       kv_transfer_latency_s=self.kv_transfer_latency_s,
                       kv_link=self.link_kind or "given", kv_link_queue=self.link_queue)
        else:
            out["replicas"] = self.replicas
        return out


def parse_pd(text: str | None) -> tuple[int, int] | None:
    """`--pd 2:2` -> (2, 2)."""
    if text is None:
        return None
    p, sep, d = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return int(p), int(d)
    except ValueError:
        raise RidgelineError(f"--pd: got {text!r}; allowed: P:D, e.g. 2:2") from None


class Replica:
    """One engine instance and where its clock stands (the start of its next step)."""

    __slots__ = ("busy_until_s", "engine", "index", "inflight", "inflight_blocks",
                 "link_free_s", "link_in_free_s", "role", "step_end_s", "tl")

    def __init__(self, index: int, role: str, engine: Engine) -> None:
        self.index = index
        self.role = role                   # "mixed", "prefill" or "decode"
        self.engine = engine
        self.busy_until_s = 0.0
        self.link_free_s = 0.0             # a prefill instance's outbound KV link
        self.link_in_free_s = 0.0          # a decode instance's inbound KV link
        # Requests whose KV is on its way here (picked when their transfer was queued) and
        # the KV blocks they will take: the routers count them as this instance's load, as
        # a decode server holds their KV from the transfer's start.
        self.inflight = 0
        self.inflight_blocks = 0
        self.step_end_s: list[float] = []  # end time of every step, by step index
        # Timeline columns: start_s, batch_size, prefill_tokens, decode_seqs, kv_blocks_used,
        # num_waiting (one entry per step; end times are step_end_s).
        self.tl: tuple[list, list, list, list, list, list] = ([], [], [], [], [], [])

    def outstanding(self) -> int:
        return len(self.engine.scheduler.seqs) + self.inflight

    def kv_load(self) -> float:
        """KV use the least-kv router reads: blocks held, plus those of the transfers on
        their way here, over the pool."""
        pool = self.engine.scheduler.pool
        return (pool.used_blocks + self.inflight_blocks) / pool.num_blocks

    def expect(self, prompt_tokens: int) -> None:
        """A transfer of a prompt's KV to this instance was queued."""
        self.inflight += 1
        self.inflight_blocks += self.engine.scheduler.layout.held(prompt_tokens, prompt_tokens)

    def received(self, prompt_tokens: int) -> None:
        """That transfer's request arrived (it is the engine's now, or was refused)."""
        self.inflight -= 1
        self.inflight_blocks -= self.engine.scheduler.layout.held(prompt_tokens, prompt_tokens)


# Pools at least this large pick least-outstanding from a heap (same choice as the scan).
ROUTER_HEAP_MIN = 16


class Router:
    """Picks a replica from a pool."""

    def __init__(self, kind: str, pool: list[Replica]) -> None:
        self.kind = kind
        self.pool = pool
        self._next = 0
        # least-outstanding over a large pool: a heap of (outstanding, position) holding,
        # for every replica, an entry at most its true count (a stale-low entry is
        # corrected when it reaches the top, a stale-high one dropped; a decrease is pushed
        # by `note_finished`), so the valid top is min by (count, index), as the scan.
        self._heap: list[tuple[int, int]] | None = None
        self._pos = {r.index: k for k, r in enumerate(pool)}

    def note_finished(self, r: Replica) -> None:
        """A request left replica r (its outstanding count fell)."""
        if self._heap is not None:
            k = self._pos.get(r.index)
            if k is not None:
                heapq.heappush(self._heap, (r.outstanding(), k))
                if len(self._heap) > 4 * len(self.pool) + 64:
                    self._rebuild()

    def _rebuild(self) -> None:
        self._heap = [(r.outstanding(), k) for k, r in enumerate(self.pool)]
        heapq.heapify(self._heap)

    def _least_outstanding(self) -> Replica:
        if self._heap is None:
            self._rebuild()
        heap = self._heap
        pool = self.pool
        while True:
            c, k = heap[0]  # type: ignore[index]
            true = pool[k].outstanding()
            if c == true:
                return pool[k]
            if c < true:
                heapq.heapreplace(heap, (true, k))  # type: ignore[arg-type]
            else:
                heapq.heappop(heap)  # type: ignore[arg-type]

    def pick(self, affinity_key: int = -1) -> Replica:
        """The replica for the next request; `affinity_key`: its prefix group, or its index
        when it has none (prefix-affinity)."""
        pool = self.pool
        if len(pool) == 1:
            return pool[0]
        if self.kind == "prefix-affinity" and affinity_key >= 0:
            return pool[affinity_key % len(pool)]
        if self.kind in STATELESS_ROUTERS:
            r = pool[self._next % len(pool)]
            self._next += 1
            return r
        if self.kind == "least-outstanding":
            if len(pool) >= ROUTER_HEAP_MIN:
                return self._least_outstanding()
            return min(pool, key=lambda r: (r.outstanding(), r.index))
        return min(pool, key=lambda r: (r.kv_load(), r.outstanding(), r.index))

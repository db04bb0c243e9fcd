"""Load patterns: closed loop, open loop, both combined; bounded by count and/or duration.

    closed loop   `--concurrency C`: C users, each sends its next request when the last ends
    open loop     `--rate R [--arrival poisson|gamma:cv=2|constant|ramp:...|replay:...]`:
                  every request has a scheduled time from the arrival process
    combined      `--rate R --concurrency C`: open-loop arrivals, at most C in flight (a
                  request that arrives while C are in flight waits at the client; the wait is
                  recorded as `admitted_s - scheduled_s`)

A plan turns the load and a pool of prompts into `RequestSource`: request i's prompt (the
pool is cycled when a duration-bound run needs more requests than it holds) and its
scheduled time.

>>> from ridgeline.workload.arrivals import parse_arrival
>>> LoadSpec(concurrency=None, arrival=parse_arrival("constant", 2.0), requests=3).mode
'open'
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ridgeline.bench.client import BenchRequest
from ridgeline.bench.prompts import PromptTagger
from ridgeline.errors import RidgelineError
from ridgeline.workload.arrivals import ArrivalProcess, arrival_times_s

# Largest prompt pool materialised for a duration-only run (cycled beyond it).
POOL_LIMIT = 4096


@dataclass(frozen=True)
class LoadSpec:
    """One load point. `arrival` None means closed loop at `concurrency`."""

    concurrency: int | None
    arrival: ArrivalProcess | None
    requests: int | None = None
    duration_s: float | None = None
    warmup: int = 0

    def __post_init__(self) -> None:
        if self.arrival is None and not self.concurrency:
            raise RidgelineError("--concurrency/--rate: give a concurrency, a rate, or both")
        if self.requests is None and self.duration_s is None:
            raise RidgelineError("--requests/--duration: give a request count, a duration, or "
                                 "both")
        if self.concurrency is not None and self.concurrency < 1:
            raise RidgelineError(f"--concurrency: got {self.concurrency}; allowed: >= 1")

    @property
    def mode(self) -> str:
        if self.arrival is None:
            return "closed"
        return "open" if self.concurrency is None else "open+cap"

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pattern": self.mode}
        if self.concurrency is not None:
            out["concurrency"] = self.concurrency
        if self.arrival is not None:
            out.update(self.arrival.describe())
        if self.requests is not None:
            out["requests"] = self.requests
        if self.duration_s is not None:
            out["duration_s"] = self.duration_s
        out["warmup_requests"] = self.warmup
        return out

    def request_budget(self) -> int:
        """How many requests the plan must be able to hand out (an upper bound)."""
        if self.requests is not None and (self.arrival is None or self.duration_s is None):
            return self.requests
        assert self.duration_s is not None or self.requests is not None
        if self.arrival is None:
            return self.requests if self.requests is not None else -1  # unbounded: cycle
        a = self.arrival
        if a.kind == "replay":
            n = len(a.replay_times_s or ())
        elif a.kind == "ramp":
            n = math.ceil(self.duration_s * (a.start_rate_req_s + a.end_rate_req_s) / 2)  # type: ignore[operator]
        else:
            # Enough arrivals to cover the duration with margin (truncated at the end).
            mean = float(a.rate_req_s) * float(self.duration_s)  # type: ignore[arg-type]
            n = math.ceil(mean + 6 * math.sqrt(mean) * max(a.cv, 1.0)) + 16
        return n if self.requests is None else min(n, self.requests)


@dataclass
class RequestSource:
    """Request i of a run: a prompt from the pool and, for open loop, its scheduled time."""

    pool: list[BenchRequest]
    times_s: np.ndarray | None
    limit: int | None
    # Makes reused pool prompts (and every file prompt) unique; see bench/prompts.py.
    tagger: PromptTagger | None = None

    def __len__(self) -> int:
        n = self.limit if self.limit is not None else 2**62
        return min(n, len(self.times_s)) if self.times_s is not None else n

    def get(self, i: int, id_prefix: str = "r") -> BenchRequest | None:
        if i >= len(self):
            return None
        n_pool = len(self.pool)
        base = self.pool[i % n_pool]
        sched = float(self.times_s[i]) if self.times_s is not None else None
        tagger = self.tagger
        if tagger is not None and (i >= n_pool or tagger.mode == "prefix"):
            prompt = tagger.apply(base.prompt, base.tag_at, f"{base.id}/{i}")
            tokens = base.prompt_tokens if tagger.mode == "replace" else None
            return replace(base, id=f"{id_prefix}{i}", scheduled_s=sched, prompt=prompt,
                           prompt_tokens=tokens)
        return replace(base, id=f"{id_prefix}{i}", scheduled_s=sched)

    def subset(self, k: int, n_workers: int) -> RequestSource:
        """Requests k, k+N, k+2N, ... (for worker k of N), keeping their ids and times."""
        total = len(self)
        if total >= 2**62:  # duration-only closed loop: each worker cycles the whole pool
            return RequestSource([replace(r, id=f"w{k}-{r.id}") for r in self.pool],
                                 None, None, self.tagger)
        reqs = [self.get(i) for i in range(k, total, n_workers)]
        return RequestSource([r for r in reqs if r is not None], None, None).frozen()

    def frozen(self) -> RequestSource:
        """A source whose items are exactly the pool (ids and times already assigned)."""
        return _FixedSource(self.pool, None, len(self.pool))


class _FixedSource(RequestSource):
    def get(self, i: int, id_prefix: str = "r") -> BenchRequest | None:
        return self.pool[i] if i < len(self.pool) else None

    def subset(self, k: int, n_workers: int) -> RequestSource:
        return _FixedSource(self.pool[k::n_workers], None, len(self.pool[k::n_workers]))


def plan_source(load: LoadSpec, pool: list[BenchRequest],
                rng: np.random.Generator, tagger: PromptTagger | None = None) -> RequestSource:
    """Attach scheduled times (open loop) to a prompt pool, truncated to the run's bounds."""
    times = None
    if load.arrival is not None:
        n = load.request_budget()
        times = arrival_times_s(load.arrival, n, rng)
        if load.duration_s is not None:
            times = times[times < load.duration_s]
    limit = load.requests
    return RequestSource(pool, times, limit, tagger)


def pool_size(load: LoadSpec) -> int:
    """How many distinct prompts to build for this load."""
    budget = load.request_budget()
    return POOL_LIMIT if budget < 0 else min(budget, max(POOL_LIMIT, load.requests or 0))


__all__ = ["POOL_LIMIT", "LoadSpec", "RequestSource", "plan_source", "pool_size"]

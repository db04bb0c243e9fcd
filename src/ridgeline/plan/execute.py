"""Simulate a list of scenarios in parallel: local processes (default) or a Ray cluster.

Each job calls `ridgeline.sim.scenario.run_scenario` — the function `ridgeline simulate`
calls — and returns a small `Outcome` (not the trace), so results travel cheaply. Runs are
deterministic given the scenario (its seed), so local and Ray execution give the same
outcomes.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ridgeline.errors import RidgelineError
from ridgeline.sim.scenario import Scenario


@dataclass(frozen=True)
class Outcome:
    """What a plan needs from one simulation."""

    attainment: float
    throughput_req_s: float
    output_tok_s: float
    ttft_p99_ms: float
    tpot_p50_ms: float
    tpot_p99_ms: float
    preemptions: int
    rejected: int
    requests: int
    error: str | None = None

    def meets(self, target: float) -> bool:
        return self.error is None and self.rejected == 0 and math.isfinite(self.attainment) \
            and self.attainment >= target

    def to_dict(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in asdict(self).items()}


def evaluate(sc: Scenario) -> Outcome:
    """Simulate one scenario at its own rate; never raises for a bad configuration."""
    from ridgeline.sim.scenario import run_scenario

    try:
        run = run_scenario(sc)
    except RidgelineError as exc:
        nan = math.nan
        return Outcome(nan, nan, nan, nan, nan, nan, 0, 0, sc.requests, str(exc))
    p = run.sweep_point()
    return Outcome(attainment=p.attainment, throughput_req_s=p.throughput_req_s,
                   output_tok_s=p.output_tok_s, ttft_p99_ms=p.ttft_p99_ms,
                   tpot_p50_ms=p.tpot_p50_ms, tpot_p99_ms=p.tpot_p99_ms,
                   preemptions=p.preemptions, rejected=p.rejected, requests=sc.requests)


def default_workers() -> int:
    return os.cpu_count() or 1


def run_all(scenarios: Sequence[Scenario], *, workers: int | None = None,
            ray_address: str | None = None,
            progress: Callable[[int], None] | None = None) -> list[Outcome]:
    """Outcomes in the order of `scenarios`. `progress(done)` after each completes."""
    if not scenarios:
        return []
    if ray_address is not None:
        return _run_ray(scenarios, ray_address, progress)
    n = workers or default_workers()
    if n < 1:
        raise RidgelineError(f"--workers: got {n}; allowed: >= 1")
    if n == 1 or len(scenarios) == 1:
        out = []
        for i, sc in enumerate(scenarios):
            out.append(evaluate(sc))
            if progress:
                progress(i + 1)
        return out
    from concurrent.futures import ProcessPoolExecutor, as_completed

    results: list[Outcome | None] = [None] * len(scenarios)
    with ProcessPoolExecutor(max_workers=min(n, len(scenarios))) as pool:
        futures = {pool.submit(evaluate, sc): i for i, sc in enumerate(scenarios)}
        for done, fut in enumerate(as_completed(futures), 1):
            results[futures[fut]] = fut.result()
            if progress:
                progress(done)
    return [r for r in results if r is not None]


def _run_ray(scenarios: Sequence[Scenario], address: str,
             progress: Callable[[int], None] | None) -> list[Outcome]:
    """`--ray local` starts a local Ray; anything else goes to `ray.init(address=...)`."""
    try:
        import ray
    except ImportError:
        raise RidgelineError("--ray: Ray is not installed (pip install ray, or pip install "
                             "'ridgeline[ray]')") from None
    started = False
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if address == "local":
            ray.init(**kwargs)
        else:
            ray.init(address=address, **kwargs)
        started = True
    try:
        remote = ray.remote(evaluate)
        refs = [remote.remote(sc) for sc in scenarios]
        index = {ref: i for i, ref in enumerate(refs)}
        results: list[Outcome | None] = [None] * len(refs)
        pending = list(refs)
        done = 0
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                results[index[ref]] = ray.get(ref)
                done += 1
                if progress:
                    progress(done)
        return [r for r in results if r is not None]
    finally:
        if started:
            ray.shutdown()


__all__ = ["Outcome", "default_workers", "evaluate", "run_all"]

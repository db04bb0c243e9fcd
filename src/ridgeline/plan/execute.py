"""Run plan's jobs in parallel: local worker processes (default) or a Ray cluster.

Each job calls a `ridgeline.sim.scenario` function — what `ridgeline simulate` calls — and
returns a small result (an `Outcome`, a `Verification` run, a capacity), not the trace, so
results travel cheaply. Runs are deterministic given the scenario (its seed), so local and
Ray execution give the same results. Ctrl-C stops the workers and raises `Interrupted`.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ridgeline.errors import RidgelineError
from ridgeline.plan.wilson import wilson_interval
from ridgeline.ray_stop import stop_ray_now

# (with the simulator and the analysis, loaded here so that forked workers inherit them)
from ridgeline.sim.scenario import Built, Scenario
from ridgeline.sim.scenario_run import probe_capacity, run_scenario

# Plan reads point values only (attainment, percentiles, throughput): the analysis keeps no
# pooled samples, draws no bootstrap intervals (~85% of a screening run's time) and leaves
# out the pooled ITL distributions (their event-sized sorts were half of what remained).
LEAN: dict[str, Any] = {"keep_samples": False, "bootstrap": False,
                        "latency_keys": ("ttft_ms", "tpot_ms", "e2e_ms", "queue_ms")}


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
    judged_requests: int = 0

    def meets(self, target: float) -> bool:
        return self.error is None and self.rejected == 0 and math.isfinite(self.attainment) \
            and self.attainment >= target

    def could_meet(self, target: float) -> bool:
        """The screen: not ruled out, i.e. the upper end of the 95% Wilson interval of this
        (short) run's attainment reaches the target."""
        if self.error is not None or self.rejected or not math.isfinite(self.attainment):
            return False
        n = self.judged_requests or self.requests
        return wilson_interval(self.attainment * n, n)[1] >= target

    def to_dict(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in asdict(self).items()}


# Step-time model and engine configuration per (model, GPU, precision, parallelism, batch
# limits, engine): shared by the candidates that differ only in replicas, P/D split,
# workload, rate or seed (building one took about as long as a screening run). Per process.
_BUILT: dict[Scenario, Any] = {}
BUILT_CACHE_SIZE = 256


def built_for(sc: Scenario) -> Any:
    """`Built.of(sc)`, its step model and engine configuration (each pool's, for P/D pools
    of their own layout) shared with every scenario that differs from `sc` only in what
    they do not read."""
    return Built.of(sc, build=_cached_engine)


def _cached_engine(sc: Scenario) -> tuple[Any, Any]:
    key = sc.replace(replicas=1, pd=None, router="round-robin", kv_transfer_latency_us=0.0,
                     requests=1, rate_req_s=None, arrival="poisson", concurrency=None,
                     think_time="0", prompt="", output="", prefix_groups=0, prefix_tokens=0,
                     slos=(), seed=0, prefill_pool=None, decode_pool=None, kv_link=None)
    base = _BUILT.get(key)
    if base is None:
        sm = sc.step_model()
        base = (sm, sc.engine_config(sm))
        if len(_BUILT) >= BUILT_CACHE_SIZE:
            _BUILT.pop(next(iter(_BUILT)))
        _BUILT[key] = base
    return base


def evaluate(sc: Scenario) -> Outcome:
    """Simulate one scenario at its own rate; never raises for a bad configuration."""
    try:
        run = run_scenario(sc, built=built_for(sc), **LEAN)
    except RidgelineError as exc:
        nan = math.nan
        return Outcome(nan, nan, nan, nan, nan, nan, 0, 0, sc.requests, str(exc))
    p = run.sweep_point()
    g = run.analysis.goodput
    return Outcome(attainment=p.attainment, throughput_req_s=p.throughput_req_s,
                   output_tok_s=p.output_tok_s, ttft_p99_ms=p.ttft_p99_ms,
                   tpot_p50_ms=p.tpot_p50_ms, tpot_p99_ms=p.tpot_p99_ms,
                   preemptions=p.preemptions, rejected=p.rejected, requests=sc.requests,
                   judged_requests=g.judged_requests if g is not None else 0)


def capacity(sc: Scenario) -> float:
    """`probe_capacity` of a scenario (NaN when it cannot run)."""
    try:
        return probe_capacity(sc, built_for(sc))
    except RidgelineError:
        return math.nan


def sweep_point(sc: Scenario) -> Any:
    """One run of a rate sweep: `run_scenario(sc).sweep_point()`."""
    return run_scenario(sc, built=built_for(sc), **LEAN).sweep_point()


def default_workers() -> int:
    return os.cpu_count() or 1


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during `Jobs.map`: the workers are stopped; `done` holds the results that had
    finished (None where a job had not)."""

    def __init__(self, done: list[Any]) -> None:
        super().__init__("interrupted")
        self.done = done


def _ignore_sigint() -> None:
    # A terminal's Ctrl-C goes to the whole process group: the parent stops the workers
    # (terminate), so they must not die half-way through pickling a result or print a
    # KeyboardInterrupt traceback each.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class Jobs:
    """Worker processes (or a Ray connection) shared by the stages of one plan.

    `map(fn, items)` runs `fn(item)` for every item (fn: a picklable, module-level function)
    and returns the results in order. Ctrl-C raises `Interrupted` within a fraction of a
    second: the parent only waits on futures, and stopping terminates the worker processes
    (a simulation in the C core does not look at signals until it returns). Jobs always run
    in worker processes, even with one worker, so that the parent stays responsive.

    >>> with Jobs(workers=1) as jobs:   # doctest: +SKIP
    ...     jobs.map(evaluate, [scenario])
    """

    def __init__(self, workers: int | None = None, ray_address: str | None = None) -> None:
        self.workers = workers or default_workers()
        if self.workers < 1:
            raise RidgelineError(f"--workers: got {self.workers}; allowed: >= 1")
        self.ray_address = ray_address
        self._pool: Any = None
        self._ray_started = False

    def __enter__(self) -> Jobs:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.stop()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._ray_shutdown()

    def stop(self) -> None:
        """Stop every worker now (their jobs are lost)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            # ProcessPoolExecutor cannot stop a running job (cancel() only drops queued
            # ones), so its worker processes are terminated directly.
            procs = list((getattr(pool, "_processes", None) or {}).values())
            for proc in procs:
                if proc.is_alive():
                    proc.terminate()
            for proc in procs:
                proc.join(timeout=1.0)
                if proc.is_alive():
                    proc.kill()
            pool.shutdown(wait=False, cancel_futures=True)
        self._ray_shutdown(now=True)

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any],
            progress: Callable[[int], None] | None = None) -> list[Any]:
        if not items:
            return []
        if self.ray_address is not None:
            return self._map_ray(fn, items, progress)
        from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=self.workers,
                                             initializer=_ignore_sigint)
        results: list[Any] = [None] * len(items)
        try:
            futures = {self._pool.submit(fn, item): i for i, item in enumerate(items)}
            pending = set(futures)
            done = 0
            while pending:
                # A timeout, so that a signal is seen at once on every platform.
                finished, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                for fut in finished:
                    results[futures[fut]] = fut.result()
                    done += 1
                    if progress:
                        progress(done)
        except KeyboardInterrupt:
            self.stop()
            raise Interrupted(results) from None
        return results

    def _map_ray(self, fn: Callable[[Any], Any], items: Sequence[Any],
                 progress: Callable[[int], None] | None) -> list[Any]:
        """`--ray local` starts a local Ray; anything else goes to `ray.init(address=...)`."""
        try:
            import ray
        except ImportError:
            raise RidgelineError("--ray: Ray is not installed (pip install ray, or pip install "
                                 "'ridgeline[ray]')") from None
        results: list[Any] = [None] * len(items)
        pending: list[Any] = []
        # One try from ray.init on: a Ctrl-C while Ray starts (its agents are already up)
        # must stop it as surely as one during the search.
        try:
            if not ray.is_initialized():
                kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
                self._ray_started = True
                if self.ray_address == "local":
                    ray.init(**kwargs)
                else:
                    ray.init(address=self.ray_address, **kwargs)
            remote = ray.remote(fn)
            refs = [remote.remote(item) for item in items]
            index = {ref: i for i, ref in enumerate(refs)}
            pending = list(refs)
            done = 0
            while pending:
                # a timeout, so that a Ctrl-C is seen within 0.2 s, not when a task ends
                ready, pending = ray.wait(pending, num_returns=1, timeout=0.2)
                for ref in ready:
                    results[index[ref]] = ray.get(ref)
                    done += 1
                    if progress:
                        progress(done)
        except KeyboardInterrupt:
            for ref in pending:
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
            self._ray_shutdown(now=True)
            raise Interrupted(results) from None
        return results

    def _ray_shutdown(self, now: bool = False) -> None:
        """now: after a Ctrl-C, kill the local Ray's processes instead of waiting on each
        (ray.shutdown's graceful stop alone took ~2 s, past a Ctrl-C's budget)."""
        if self._ray_started:
            import ray

            (stop_ray_now if now else lambda r: r.shutdown())(ray)
            self._ray_started = False


def run_all(scenarios: Sequence[Scenario], *, workers: int | None = None,
            ray_address: str | None = None,
            progress: Callable[[int], None] | None = None) -> list[Outcome]:
    """`evaluate` of every scenario, in order. `progress(done)` after each completes."""
    with Jobs(workers, ray_address) as jobs:
        return jobs.map(evaluate, scenarios, progress)


__all__ = ["Interrupted", "Jobs", "Outcome", "built_for", "capacity", "default_workers", "evaluate",
           "run_all", "sweep_point"]

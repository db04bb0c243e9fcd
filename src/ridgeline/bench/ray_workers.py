"""`--ray ADDRESS`: client workers spread over a Ray cluster, merged onto one clock.

Ray is optional (`pip install ray`, or the `ridgeline[ray]` extra). `--ray local` starts a
local Ray instance; anything else is passed to `ray.init(address=...)`.

Clocks: each worker times its requests with its own `time.perf_counter` (monotonic, so
every duration inside a request is exact). To put all workers on the driver's clock, the
driver estimates each worker's offset with Cristian's algorithm: it asks the worker for
its perf_counter 5 times and keeps the round trip with the smallest RTT;
offset = worker_time - (send + receive) / 2, uncertain by at most RTT / 2. The worker is
then given the run origin on its own clock (driver t0 + offset), so its `sent_s` and
`event_times_s` are already driver-relative. The offsets and their uncertainty are written
to the trace footer. On one host the offset is ~0 (one CLOCK_MONOTONIC); across hosts the
uncertainty is the LAN round trip, typically well under a millisecond, which shifts whole
requests relative to each other but never the gaps inside one request.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ridgeline.bench.client import run_loop
from ridgeline.bench.load_loop import RunStats
from ridgeline.bench.multiprocess import StopSignals, WorkerJob, merge_stats, worker_loop
from ridgeline.errors import RidgelineError
from ridgeline.ray_stop import stop_ray_now

PINGS = 5
FLUSH_S = 0.1


class _Flag:
    """A tiny Ray actor: the driver sets stop / hard stop; workers poll it."""

    def __init__(self) -> None:
        self.stop = False
        self.hard = False

    def set(self, hard: bool) -> None:
        self.stop = True
        self.hard = self.hard or hard

    def get(self) -> tuple[bool, bool]:
        return self.stop, self.hard


class _Worker:
    """A Ray actor running one worker's load loop; records go out in batches."""

    def __init__(self, job: WorkerJob, out: Any, flag: Any) -> None:
        self.job, self.out, self.flag = job, out, flag

    def clock(self) -> float:
        return time.perf_counter()

    def run(self, t0_local: float) -> dict[str, Any]:
        import ray

        buf: list[dict] = []
        lock = threading.Lock()
        stop, hard, finished = threading.Event(), threading.Event(), threading.Event()

        def pump() -> None:
            while True:
                with lock:
                    batch, buf[:] = list(buf), []
                if batch:
                    self.out.put_nowait_batch([("rec", r) for r in batch])
                s, h = ray.get(self.flag.get.remote())
                if s:
                    stop.set()
                if h:
                    hard.set()
                if finished.is_set():
                    return
                time.sleep(FLUSH_S)

        def emit(rec: dict) -> None:
            with lock:
                buf.append(rec)

        thread = threading.Thread(target=pump, daemon=True)
        thread.start()
        try:
            stats = run_loop(worker_loop(self.job, t0_local, emit, stop.is_set, hard.is_set))
        finally:
            finished.set()
            thread.join()
            with lock:
                if buf:
                    self.out.put_nowait_batch([("rec", r) for r in buf])
        return stats.to_dict()


def estimate_offset(clock: Callable[[], float], pings: int = PINGS) -> tuple[float, float]:
    """(offset_s, uncertainty_s) of a remote clock: min-RTT Cristian estimate.

    >>> off, err = estimate_offset(lambda: time.perf_counter() + 5.0)
    >>> abs(off - 5.0) <= err + 1e-6
    True
    """
    best: tuple[float, float] | None = None
    for _ in range(pings):
        t_send = time.perf_counter()
        remote = clock()
        t_recv = time.perf_counter()
        rtt = t_recv - t_send
        if best is None or rtt < 2 * best[1]:
            best = (remote - (t_send + t_recv) / 2, rtt / 2)
    assert best is not None
    return best


def run_ray(jobs: list[WorkerJob], emit: Callable[[dict], None], *, address: str,
            warn: Callable[[str], None], on_start: Callable[[float], None] | None = None,
            on_inflight: Callable[[int], None] | None = None) -> tuple[RunStats, float, int]:
    """Run the jobs as Ray actors; returns (merged stats, t0_perf, signals received)."""
    try:
        import ray
        from ray.util.queue import Queue
    except ImportError:
        raise RidgelineError("--ray: Ray is not installed (pip install ray, or pip install "
                             "'ridgeline[ray]')") from None
    started_here = not ray.is_initialized()
    signals = None
    try:  # from ray.init on: a Ctrl-C while Ray starts stops it too
        if started_here:
            ray.init(address=None if address in ("local", "") else address,
                     include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
        out = Queue(actor_options={"num_cpus": 0})
        flag = ray.remote(num_cpus=0)(_Flag).remote()
        worker_cls = ray.remote(num_cpus=1)(_Worker)
        actors = [worker_cls.options(scheduling_strategy="SPREAD").remote(job, out, flag)
                  for job in jobs]
        offsets = [estimate_offset(lambda a=a: ray.get(a.clock.remote())) for a in actors]
        merged = RunStats()
        merged.notes.append("ray clock offsets (worker - driver, ± uncertainty): " + ", ".join(
            f"w{k} {off * 1e3:+.3f} ± {err * 1e3:.3f} ms" for k, (off, err) in
            enumerate(offsets)))
        t0_perf = time.perf_counter() + 0.05
        if on_start is not None:
            on_start(t0_perf)
        refs = [a.run.remote(t0_perf + off) for a, (off, _) in zip(actors, offsets,
                                                                      strict=True)]

        def drain() -> None:
            n = out.size()
            if n:
                for _, rec in out.get_nowait_batch(n):
                    emit(rec)

        with StopSignals(lambda hard: flag.set.remote(hard)) as signals:
            pending = list(refs)
            while pending:
                _, pending = ray.wait(pending, timeout=FLUSH_S)
                drain()
            drain()
        for part in ray.get(refs):
            merge_stats(merged, part)
        return merged, t0_perf, signals.count
    finally:
        if started_here:
            # After a Ctrl-C (or an error) the cluster is killed, not waited on: the
            # graceful stop alone took ~2 s, a Ctrl-C's whole budget.
            stopped = sys.exc_info()[0] is not None or (signals is not None and signals.count)
            (stop_ray_now if stopped else lambda r: r.shutdown())(ray)


__all__ = ["estimate_offset", "run_ray"]

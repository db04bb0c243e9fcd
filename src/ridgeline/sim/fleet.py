"""Simulate at fleet scale: streamed results, bounded memory, sharding over processes or Ray.

`run_fleet` runs one workload through the cluster with `simulate(..., sink=...)`: finished
requests go, a chunk at a time, to the trace file and to `StreamingMetrics` (exact
percentiles while a series fits `exact_max`, a `LogSketch` with a stated relative error
beyond), never all held at once. What stays in memory grows with the run only by a few
per-request scalars (send/end time, status, replica: about 60 bytes a request), not by its
token times (about 13 KB a request before).

Sharding: when the replicas are independent given the routing (round-robin or
prefix-affinity, open loop, no P/D split), request i goes to a replica fixed by i and its
prefix group (`cluster.assigned_replica`) whatever the others do, so a shard holding the
contiguous replicas [lo, hi) and the requests assigned to them is the same simulation as the
whole run restricted to them (a test checks it request for request).
Shards run in worker processes (`workers`) or as Ray tasks (`ray_address`; "local" starts a
local Ray). Their metrics merge exactly (counts, sums, kept samples) or by sketch merge.
Routers that read global state (least-outstanding, least-kv), closed loops and P/D splits
run in one process: `shard_blocker` says why.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ridgeline.errors import RidgelineError
from ridgeline.metrics.sketch import DEFAULT_RELATIVE_ERROR
from ridgeline.metrics.streaming import DEFAULT_EXACT_MAX, StreamingMetrics
from ridgeline.ray_stop import stop_ray_now
from ridgeline.sim.cluster import STATELESS_ROUTERS, ClusterConfig, assigned_replica
from ridgeline.sim.event_loop import SimResult, Workload, simulate
from ridgeline.trace.writer import TraceWriter


@dataclass
class FleetRun:
    """What a streamed run leaves: metrics, totals, and how it ran."""

    metrics: StreamingMetrics
    requests: int
    finished: int = 0
    rejected: int = 0
    preemptions: int = 0
    engine_steps: int = 0
    max_kv_blocks_used: int = 0
    wall_s: float = 0.0
    shards: int = 1
    backend: str = "single process"
    interrupted: bool = False
    notes: list[str] = field(default_factory=list)
    engine_cores: set[str] = field(default_factory=set)   # "c", "python" (sim/core.py)
    # After a Ctrl-C, request lines the trace could not take in time, and where they are
    trace_lines_elsewhere: int = 0
    trace_lines_left_in: list[str] = field(default_factory=list)

    def summary(self, seed: int = 0) -> dict[str, Any]:
        res = self.metrics.result(seed)
        lat = res.pop("latency")
        res["latency"] = {k: d.to_dict() for k, d in lat.items()}
        res["simulation"] = {
            "requests": self.requests, "finished": self.finished, "rejected": self.rejected,
            "preemptions": self.preemptions, "engine_steps": self.engine_steps,
            "max_kv_blocks_used": self.max_kv_blocks_used, "wall_s": self.wall_s,
            "simulated_requests_per_wall_s":
                self.metrics.requests / self.wall_s if self.wall_s > 0 else math.inf,
            "shards": self.shards, "backend": self.backend,
            "engine_core": ", ".join(sorted(self.engine_cores)) or "none",
            "interrupted": self.interrupted, "notes": self.notes,
        }
        return res


def shard_blocker(wl: Workload, cluster: ClusterConfig) -> str | None:
    """Why this run cannot be sharded (None: it can)."""
    if cluster.pd:
        return "a P/D split hands requests between pools"
    if wl.arrival_s is None:
        return "a closed loop's next arrival depends on every replica"
    if cluster.router not in STATELESS_ROUTERS:
        return f"router {cluster.router} reads every replica's state (stays exact in one process)"
    return None


def replica_requests(wl: Workload, cluster: ClusterConfig, lo: int, hi: int
                     ) -> Iterator[tuple[int, np.ndarray]]:
    """(replica, the global ids of its requests in arrival order) for replicas [lo, hi)
    under a stateless router: one stable sort of the assignment, whatever the router."""
    assign = assigned_replica(cluster.router, cluster.replicas, np.arange(len(wl)),
                              wl.prefix_group)
    order = np.argsort(assign, kind="stable")
    bounds = np.searchsorted(assign[order], np.arange(lo, hi + 1)).tolist()
    for j in range(lo, hi):
        yield j, order[bounds[j - lo]:bounds[j - lo + 1]]


def subset_workload(wl: Workload, ids: np.ndarray) -> Workload:
    """The requests `ids` (in arrival order) as a workload of their own."""
    return Workload(wl.prompt_tokens[ids], wl.output_tokens[ids],
                    arrival_s=wl.arrival_s[ids],  # type: ignore[index]
                    prefix_group=wl.prefix_group[ids] if wl.prefix_group is not None else None,
                    prefix_tokens=wl.prefix_tokens[ids] if wl.prefix_tokens is not None
                    else None)


def _records(chunk: SimResult) -> list[dict[str, Any]]:
    return list(chunk.records())


class _Sink:
    """Feeds chunks to the metrics and, when asked, to a file of trace request lines."""

    def __init__(self, metrics: StreamingMetrics, header: Any, lines_path: str | None,
                 id_map: np.ndarray | None, replica_base: int,
                 on_chunk: Callable[[int], None] | None) -> None:
        import json

        self.metrics = metrics
        self.header = header
        self.fh = open(lines_path, "a", encoding="utf-8") if lines_path else None  # noqa: SIM115
        self.id_map = id_map
        self.replica_base = replica_base
        self.on_chunk = on_chunk
        self.last_end_s: float | None = None
        self._dumps = json.dumps

    def __call__(self, chunk: SimResult) -> None:
        """Book a chunk whole: a Ctrl-C during it is held until the chunk is in both the
        metrics and the trace lines (so the two always hold the same requests)."""
        import signal
        import threading

        self._remap(chunk)
        # The trace lines are built before the hold: on a loaded box a chunk's JSON took
        # ~2 s, past a Ctrl-C's budget; a Ctrl-C then drops the chunk from both.
        text = self._lines(chunk) if self.fh is not None else None
        if threading.current_thread() is not threading.main_thread():
            self._book(chunk, text)
            return
        hit: list[int] = []
        old = signal.signal(signal.SIGINT, lambda *_: hit.append(1))
        try:
            self._book(chunk, text)
        finally:
            signal.signal(signal.SIGINT, old)
        if hit and old is not signal.SIG_IGN:
            raise KeyboardInterrupt

    def _remap(self, chunk: SimResult) -> None:
        if self.id_map is not None and chunk.request_ids is not None:
            chunk.request_ids = self.id_map[chunk.request_ids]
            chunk.replica = np.where(chunk.replica >= 0, chunk.replica + self.replica_base, -1)

    def _lines(self, chunk: SimResult) -> str:
        dumps = self._dumps
        return "\n".join(dumps({"type": "request", **r}, separators=(",", ":"),
                               allow_nan=False) for r in chunk.records()) + "\n"

    def _book(self, chunk: SimResult, text: str | None) -> None:
        self.metrics.add_trace(chunk.to_trace(self.header))
        if self.fh is not None and text is not None:
            self.fh.write(text)
            self.fh.flush()
        end = chunk.end_s[np.isfinite(chunk.end_s)]
        if end.size:
            e = float(end.max())
            self.last_end_s = e if self.last_end_s is None else max(self.last_end_s, e)
        if self.on_chunk is not None:
            self.on_chunk(len(chunk))

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()


class _Counter:
    """Turns per-chunk request counts into a running total for a progress callback."""

    def __init__(self, progress: Callable[[int], None] | None) -> None:
        self.progress = progress
        self.done = 0

    def __call__(self, k: int) -> None:
        self.done += k
        if self.progress is not None:
            self.progress(self.done)


def _totals(run: FleetRun, res: SimResult) -> None:
    st = res.stream_stats or {}
    run.finished += int(st.get("finished", 0))
    run.rejected += int(st.get("rejected", 0))
    run.preemptions += int(st.get("preemptions", 0))
    run.engine_steps += int(st.get("engine_steps", 0))
    run.max_kv_blocks_used = max(run.max_kv_blocks_used, int(st.get("max_kv_blocks_used", 0)))
    run.engine_cores.add(res.core)


def run_shard(wl: Workload, config: Any, step_model: Any, cluster: ClusterConfig,
              header: Any, slos: tuple[Any, ...], lo: int, hi: int, lines_path: str | None,
              exact_max: int, relative_error: float, chunk_requests: int,
              progress_queue: Any = None,
              progress: Callable[[int], None] | None = None,
              metrics: StreamingMetrics | None = None) -> FleetRun:
    """Simulate replicas [lo, hi) of a stateless-router cluster (a worker's task), one replica
    at a time: given the assignment they are independent, so each is a one-replica run
    whose decode runs stop only at its own arrivals (a shared loop would cut every busy
    replica's run at every arrival in the fleet), and one engine is in memory at a time."""
    one = ClusterConfig(replicas=1, router="round-robin",
                        kv_bytes_per_token=cluster.kv_bytes_per_token,
                        link_bandwidth_bytes_s=cluster.link_bandwidth_bytes_s,
                        kv_transfer_latency_s=cluster.kv_transfer_latency_s)
    own = metrics is None
    metrics = metrics or StreamingMetrics(slos=slos, exact_max=exact_max,
                                          relative_error=relative_error)
    on_chunk = progress_queue.put if progress_queue is not None else progress
    run = FleetRun(metrics=metrics if own else StreamingMetrics(
        slos=slos, exact_max=exact_max, relative_error=relative_error), requests=0)
    sink = _Sink(metrics, header, lines_path, None, 0, on_chunk)
    try:
        for j, ids in replica_requests(wl, cluster, lo, hi):
            sub = subset_workload(wl, ids)
            run.requests += len(sub)
            if not len(sub):
                continue
            sink.id_map, sink.replica_base = ids, j
            res = simulate(sub, config, step_model, one, sink=sink,
                           chunk_requests=chunk_requests)
            _totals(run, res)
    except KeyboardInterrupt:
        # Keep what finished; a second Ctrl-C must not cut the way back to the parent.
        import signal

        signal.signal(signal.SIGINT, signal.SIG_IGN)
        run.interrupted = True
    finally:
        sink.close()
    return run


def _split(replicas: int, shards: int) -> list[tuple[int, int]]:
    edges = np.linspace(0, replicas, shards + 1).round().astype(int).tolist()
    return [(a, b) for a, b in itertools.pairwise(edges) if b > a]


def run_fleet(wl: Workload, config: Any, step_model: Any, cluster: ClusterConfig,
              header: Any, *, slos: tuple[Any, ...] = (), trace_path: str | None = None,
              workers: int = 1, ray_address: str | None = None,
              exact_max: int = DEFAULT_EXACT_MAX,
              relative_error: float = DEFAULT_RELATIVE_ERROR, chunk_requests: int = 5_000,
              progress: Callable[[int], None] | None = None) -> FleetRun:
    """Run `wl` streamed (and sharded when asked and possible). On Ctrl-C the result holds
    what finished (interrupted=True) and the trace is closed with an interrupted footer."""
    t0 = time.perf_counter()
    notes: list[str] = []
    blocker = shard_blocker(wl, cluster)
    shards = 1
    want = workers if ray_address is None else max(workers, 2)
    if want > 1 and blocker is not None:
        notes.append(f"--workers/--ray ignored: {blocker}")
    elif want > 1:
        shards = min(want, cluster.replicas)
        if shards < want:
            notes.append(f"{shards} shards: one replica per shard at most")
    writer = TraceWriter(trace_path, header) if trace_path else None
    metrics = StreamingMetrics(slos=slos, exact_max=exact_max, relative_error=relative_error)
    run = FleetRun(metrics=metrics, requests=len(wl), notes=notes, shards=shards)
    interrupted = False
    try:
        lines = None
        if writer is not None:
            writer._file.flush()
            lines = str(writer.path)
        if shards == 1 and blocker is None:
            counter = _Counter(progress)
            if cluster.replicas > 1:
                run.backend = ("single process, one replica at a time (independent under "
                               f"{cluster.router})")
            _merge(run, run_shard(wl, config, step_model, cluster, header, slos, 0,
                                  cluster.replicas, lines, exact_max, relative_error,
                                  chunk_requests, progress=counter, metrics=metrics))
            if run.interrupted:
                raise KeyboardInterrupt
        elif shards == 1:
            sink = _Sink(metrics, header, lines, None, 0, progress)
            try:
                res = simulate(wl, config, step_model, cluster, sink=sink,
                               chunk_requests=chunk_requests)
                _totals(run, res)
            finally:
                sink.close()
        elif ray_address is not None:
            run.backend = f"ray ({ray_address})"
            _run_ray(run, wl, config, step_model, cluster, header, slos, shards, trace_path,
                     exact_max, relative_error, chunk_requests, ray_address, progress)
        else:
            run.backend = f"{shards} worker processes"
            _run_processes(run, wl, config, step_model, cluster, header, slos, shards,
                           trace_path, exact_max, relative_error, chunk_requests, progress)
    except KeyboardInterrupt:
        interrupted = True
        run.finished = metrics.by_status.get("ok", 0)
        run.rejected = metrics.by_status.get("rejected", 0)
    run.interrupted = interrupted
    run.wall_s = time.perf_counter() - t0
    if writer is not None:
        end = metrics.last_end_s if math.isfinite(metrics.last_end_s) else 0.0
        # Request lines were appended by the sink (or the shards) to the same file.
        writer.requests_written = metrics.requests
        notes = ["interrupted: the requests finished before Ctrl-C"] if interrupted else []
        if run.trace_lines_left_in:
            writer.requests_written = metrics.requests - run.trace_lines_elsewhere
            notes.append(f"interrupted: {run.trace_lines_elsewhere} finished requests are in "
                         "the metrics but not in this trace: the 2 s a Ctrl-C may take ran out "
                         "while their lines were copied from the workers; they are in "
                         + "; ".join(run.trace_lines_left_in))
        writer._file.seek(0, os.SEEK_END)
        writer.close(end, interrupted=interrupted, notes=notes)
    return run


def _part_path(trace_path: str | None, k: int) -> str | None:
    return f"{trace_path}.part{k}" if trace_path else None


# Bytes per read when the shards' lines are appended to the trace (a Ctrl-C's deadline is
# checked between reads).
COPY_CHUNK_BYTES = 8 << 20


def _append_parts(trace_path: str | None, n: int, keep: set[int] | None = None,
                  deadline_s: float | None = None) -> tuple[int, list[str]]:
    """Append the shards' request lines to the trace; a shard not in `keep` (its metrics
    were lost) is dropped, so the trace and the metrics hold the same requests.

    With `deadline_s` (a `time.monotonic()` value: after a Ctrl-C, which must exit within
    2 s), copying stops at the deadline on a line boundary: parts of several GB take seconds
    at ~1 GB/s. What was not copied stays where it is, nothing lost. Returns the request
    lines appended and, for a copy the deadline cut, where the rest of the lines are."""
    if not trace_path:
        return 0, []
    appended = 0
    left: list[str] = []
    with open(trace_path, "ab") as out:
        for k in range(n):
            part = Path(f"{trace_path}.part{k}")
            if not part.exists():
                continue
            if keep is not None and k not in keep:
                part.unlink()
                continue
            if left:  # the deadline has passed: this part stays whole
                left.append(str(part))
                continue
            with open(part, "rb") as fh:
                while True:
                    if deadline_s is not None and time.monotonic() >= deadline_s:
                        left.append(f"{part} from byte {fh.tell()} on")
                        break
                    buf = fh.read(COPY_CHUNK_BYTES)
                    if not buf:
                        break
                    if deadline_s is not None and not buf.endswith(b"\n"):
                        buf += fh.readline()  # whole lines only
                    out.write(buf)
                    appended += buf.count(b"\n")
            if not left:
                part.unlink()
    return appended, left


_QUEUE: Any = None
# Shard arguments, inherited by forked workers: the step model may hold closures that do
# not pickle, so only a shard's index crosses the process boundary.
_TASKS: list[tuple] = []


def _init_worker(q: Any) -> None:
    global _QUEUE
    _QUEUE = q


def _worker(k: int) -> FleetRun:
    return run_shard(*_TASKS[k], progress_queue=_QUEUE)


def _run_processes(run: FleetRun, wl: Workload, config: Any, step_model: Any,
                   cluster: ClusterConfig, header: Any, slos: tuple[Any, ...], shards: int,
                   trace_path: str | None, exact_max: int, relative_error: float,
                   chunk_requests: int, progress: Callable[[int], None] | None) -> None:
    import multiprocessing as mp
    import queue as queue_mod
    from concurrent.futures import ProcessPoolExecutor

    if "fork" not in mp.get_all_start_methods():
        raise RidgelineError("--workers: needs the fork start method (Linux, macOS); "
                             "use --ray on this platform")
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    parts = _split(cluster.replicas, shards)
    _TASKS[:] = [(wl, config, step_model, cluster, header, slos, lo, hi, _part_path(trace_path, k),
              exact_max, relative_error, chunk_requests) for k, (lo, hi) in enumerate(parts)]
    with ProcessPoolExecutor(len(parts), mp_context=ctx, initializer=_init_worker,
                             initargs=(q,)) as ex:
        futs = [ex.submit(_worker, k) for k in range(len(parts))]
        done = 0
        try:
            while True:
                try:
                    done += q.get(timeout=0.2)
                    if progress is not None:
                        progress(done)
                except queue_mod.Empty:
                    if all(f.done() for f in futs):
                        break
            for f in futs:
                _merge(run, f.result())
        except KeyboardInterrupt:
            # A terminal's Ctrl-C reaches the workers too; a signal to this process only
            # is passed on. Each worker returns what it finished (run_shard); one that does
            # not within the timeout is terminated and its part is lost.
            import signal
            from concurrent.futures import wait

            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signalled_s = time.monotonic()
            procs = list(getattr(ex, "_processes", {}).values())
            for proc in procs:
                if proc.is_alive():
                    os.kill(proc.pid, signal.SIGINT)
            wait(futs, timeout=60)
            keep = set()
            for k, f in enumerate(futs):
                if f.done() and not f.cancelled() and f.exception() is None:
                    _merge(run, f.result())
                    keep.add(k)
            for proc in procs:
                if proc.is_alive():
                    proc.terminate()
            ex.shutdown(wait=False, cancel_futures=True)
            # 1 s after the signal at most: exit 130 within 2 s (docs/cli.md)
            appended, left = _append_parts(trace_path, len(parts), keep,
                                           deadline_s=signalled_s + 1.0)
            if left:  # the trace's own lines are the parts' (the file held the header only)
                run.trace_lines_elsewhere = run.metrics.requests - appended
                run.trace_lines_left_in = left
            raise
    _append_parts(trace_path, len(parts))
    if run.interrupted:
        raise KeyboardInterrupt


def _merge(run: FleetRun, part: FleetRun) -> None:
    run.interrupted = run.interrupted or part.interrupted
    run.metrics.merge(part.metrics)
    run.finished += part.finished
    run.rejected += part.rejected
    run.preemptions += part.preemptions
    run.engine_steps += part.engine_steps
    run.max_kv_blocks_used = max(run.max_kv_blocks_used, part.max_kv_blocks_used)
    run.engine_cores |= part.engine_cores


def _run_ray(run: FleetRun, wl: Workload, config: Any, step_model: Any,
             cluster: ClusterConfig, header: Any, slos: tuple[Any, ...], shards: int,
             trace_path: str | None, exact_max: int, relative_error: float,
             chunk_requests: int, address: str, progress: Callable[[int], None] | None
             ) -> None:
    try:
        import ray
    except ImportError:
        raise RidgelineError("--ray: ray is not installed; pip install 'ridgeline[ray]'") \
            from None
    started = not ray.is_initialized()
    pending: list[Any] = []
    # One try from ray.init on: a Ctrl-C while Ray starts or takes the workload (its agents
    # and idle workers are already up) must stop them as surely as one during the run.
    try:
        if started:
            if address == "local":
                ray.init(num_cpus=shards, include_dashboard=False, log_to_driver=False,
                         configure_logging=False)
            else:
                ray.init(address=address, log_to_driver=False)
        # ray.init replaces the SIGINT handler with one that exits 0 (a Ctrl-C then read as
        # success): Python's own, so a Ctrl-C is KeyboardInterrupt here, exit 130.
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.default_int_handler)
        remote = ray.remote(run_shard)
        parts = _split(cluster.replicas, shards)
        wl_ref = ray.put(wl)
        # Trace lines: a shared file system is not assumed, so Ray shards return no trace.
        if trace_path:
            run.notes.append("--trace with --ray: the trace holds no request lines (workers "
                             "may not share this file system); metrics are complete")
        pending = [remote.remote(wl_ref, config, step_model, cluster, header, slos, lo, hi,
                                 None, exact_max, relative_error, chunk_requests)
                   for lo, hi in parts]
        done = 0
        while pending:
            # A timeout, so that a Ctrl-C is seen within 0.2 s, not when a shard ends.
            ready, pending = ray.wait(pending, num_returns=1, timeout=0.2)
            if not ready:
                continue
            part = ray.get(ready[0])
            _merge(run, part)
            done += part.requests
            if progress is not None:
                progress(done)
    except KeyboardInterrupt:
        for f in pending:   # shards still running are lost; the finished ones are merged
            with contextlib.suppress(Exception):
                ray.cancel(f, force=True)
        if started:  # within the 2 s a Ctrl-C may take (ray's own exit hook: 1.6-2.9 s)
            stop_ray_now(ray)
        raise

"""A whole `ridgeline bench` invocation as one library call: a typed plan of load points in,
one outcome per point out (like `sim.scenario_run.run_scenario`).

The command parses its options into a `BenchPlan` and calls `run_plan`; `plan`, the UI, Ray
workers and tests can call the same function. What the command prints while it runs (the
per-point summary, the sweep table) comes through the `SessionHooks` callbacks, so the
library never writes to the terminal itself.

>>> pts = sweep_points([1.0, 2.0], [8], rate_sweep=False)
>>> [(p.label, p.rate_req_s, p.concurrency) for p in pts]
[('rate=1', 1.0, 8), ('rate=2', 2.0, 8)]
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ridgeline.bench import rate_sweep as rs
from ridgeline.bench.peer_flags import ResultFileSpec, wait_ready
from ridgeline.bench.results_peer import write_peer_results
from ridgeline.bench.single_run import BenchConfig, run_bench
from ridgeline.bench.summary import analyze_trace, bookkeeping, sweep_row
from ridgeline.metrics.knee import max_power_index as knee_index
from ridgeline.metrics.telemetry import trace_file_telemetry
from ridgeline.serve.launcher import EmulatorProcess
from ridgeline.workload.arrivals import ArrivalProcess, parse_arrival


@dataclass(frozen=True)
class BenchPoint:
    """One load point: open loop at `rate_req_s`, closed loop at `concurrency`, or both."""

    label: str  # "" for a single point; "rate=2", "concurrency=8", "saturation" in sweeps
    rate_req_s: float | None
    concurrency: int | None


@dataclass(frozen=True)
class EmulatorSpec:
    """`--target emulator`: the `ridgeline serve` to start, benchmark and stop."""

    model: str
    hardware: str
    speed: float = 1.0
    extra_args: tuple[str, ...] = ()


@dataclass
class BenchPlan:
    """Everything `run_plan` needs: `run` is every point's `BenchConfig` less what a point
    sets itself (its concurrency and arrival process, trace path and index), so the options
    a run takes are declared once, there. `run.load` carries the requests, duration and
    warm-up of every point; `arrival` is the arrival spec each rate is put into."""

    run: BenchConfig
    points: list[BenchPoint]
    arrival: str = "poisson"
    rate_sweep: bool = False  # points[0] is the saturation probe; the rates follow from it
    replay_concurrency: int | None = None
    emulator: EmulatorSpec | None = None
    result_formats: list[str] = field(default_factory=list)
    percentiles: tuple[float, ...] = (99.0,)
    result_spec: ResultFileSpec | None = None
    # Folder of the ridgeline-named peer files (`<trace stem>.vllm.json`); None: the trace's.
    result_folder: str | None = None
    ready_check_timeout_s: float = 0.0

    @property
    def trace_base(self) -> str:
        return str(self.run.trace_path)

    @property
    def slos(self) -> list[str]:
        return self.run.slos

    @property
    def sweeping(self) -> bool:
        return len(self.points) > 1 or self.rate_sweep

    def trace_path_for(self, label: str) -> str:
        if not self.sweeping:
            return self.trace_base
        stem, dot, ext = self.trace_base.rpartition(".")
        tag = label.replace("=", "-")
        return f"{stem}.{tag}.{ext}" if dot else f"{self.trace_base}.{tag}"


@dataclass
class PointOutcome:
    """One point's run, analysis and the files written."""

    point: BenchPoint
    run: Any  # ridgeline.bench.single_run.BenchOutcome
    analysis: Any  # AnalysisResult or None (nothing completed)
    book: dict[str, Any]
    telemetry: Any
    peer_files: list[Path]
    row: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"point": self.point.label or "run", "trace": str(self.run.trace_path),
                "interrupted": self.run.interrupted, "aborted": self.run.aborted,
                "bench": self.book, "notes": self.run.notes, "telemetry": self.telemetry,
                "analysis": self.analysis.to_dict() if self.analysis is not None else None}


@dataclass
class PlanOutcome:
    base_url: str
    points: list[PointOutcome] = field(default_factory=list)
    knee: int | None = None
    capacity_req_s: float = float("nan")  # --rate sweep: the saturation probe's
    sweep_runs: list[dict[str, Any]] = field(default_factory=list)  # --rate sweep points
    exit_code: int = 0
    errors: list[str] = field(default_factory=list)  # printed as `error:` lines


@dataclass
class SessionHooks:
    """What the caller sees while the plan runs (all optional)."""

    warn: Callable[[str], None] | None = None
    on_start: Callable[[Any], None] | None = None  # the BenchConfig, before its first request
    on_point: Callable[[BenchPoint, str], None] | None = None  # a sweep point and its trace
    on_done: Callable[[PointOutcome], None] | None = None
    on_file: Callable[[Path], None] | None = None  # a peer result file written
    on_error: Callable[[str], None] | None = None  # an abort, a failed saturation probe


def sweep_points(rates: list[float], concs: list[int], *, rate_sweep: bool) -> list[BenchPoint]:
    """The load points of the command's --rate / --concurrency lists."""
    if rate_sweep:  # the rates are added once the saturation probe has run
        return [BenchPoint("saturation", None, concs[0] if concs else rs.SATURATION_CONCURRENCY)]
    if len(rates) > 1:
        return [BenchPoint(f"rate={r:g}", r, concs[0] if concs else None) for r in rates]
    if len(concs) > 1:
        return [BenchPoint(f"concurrency={c}", rates[0] if rates else None, c) for c in concs]
    return [BenchPoint("", rates[0] if rates else None, concs[0] if concs else None)]


def _error(out: PlanOutcome, hooks: SessionHooks, message: str) -> None:
    out.errors.append(message)
    if hooks.on_error is not None:
        hooks.on_error(message)


def _nan() -> float:
    return float("nan")


def run_plan(plan: BenchPlan, hooks: SessionHooks | None = None, *,
             emulator: Any = None) -> PlanOutcome:
    """Run every point of `plan` (starting and stopping the emulator if asked), analyze each
    trace, write the peer result files; stop early on Ctrl-C or an abort.

    `emulator`: an `EmulatorProcess` for `plan.emulator` already spawned by the caller (so
    its start-up overlapped the caller's); it is waited for, used and stopped here."""
    hooks = hooks or SessionHooks()
    emulator_cm: contextlib.AbstractContextManager = contextlib.nullcontext()
    header_extra = dict(plan.run.header_extra)
    if plan.emulator is not None:
        emu = plan.emulator
        emulator_cm = emulator or EmulatorProcess(model=emu.model, hardware=emu.hardware,
                                                  speed=emu.speed,
                                                  extra_args=list(emu.extra_args))
        header_extra.update({"hardware": emu.hardware, "engine": "ridgeline-emulator",
                             "emulator_speed": emu.speed})
    points = list(plan.points)
    with emulator_cm as running:
        url = running.base_url if running is not None else plan.run.endpoint.base_url
        out = PlanOutcome(base_url=url)
        if plan.ready_check_timeout_s:
            wait_ready(url, plan.ready_check_timeout_s, dict(plan.run.endpoint.headers))
        endpoint = replace(plan.run.endpoint, base_url=url)
        rows: list[dict[str, Any]] = []
        for point_index, point in enumerate(points):  # a rate sweep appends while it runs
            arrival_proc = (parse_arrival(plan.arrival, point.rate_req_s)
                            if point.rate_req_s is not None else None)
            conc = point.concurrency
            if point.rate_req_s is None and plan.arrival not in ("poisson",) and \
                    not plan.rate_sweep:
                # an arrival spec that carries its own rate (ramp, replay) makes it open loop
                arrival_proc = parse_arrival(plan.arrival, None)
            if plan.run.replay is not None and plan.run.replay.users:
                arrival_proc, conc = None, plan.run.replay.users  # a workload's closed loop
            elif plan.run.replay is not None:
                arrival_proc = ArrivalProcess("replay", replay_times_s=plan.run.replay.times_s)
                conc = plan.replay_concurrency
            cfg = replace(plan.run, endpoint=endpoint,
                          load=replace(plan.run.load, concurrency=conc, arrival=arrival_proc),
                          trace_path=plan.trace_path_for(point.label),
                          header_extra=dict(header_extra), point_index=point_index)
            if plan.sweeping and hooks.on_point is not None:
                hooks.on_point(point, str(cfg.trace_path))
            kwargs: dict[str, Any] = {"on_start": hooks.on_start}
            if hooks.warn is not None:
                kwargs["warn"] = hooks.warn
            run = run_bench(cfg, **kwargs)
            result = analyze_trace(run.trace_path, plan.slos, plan.run.seed)
            book = bookkeeping(run.trace_path)
            files: list[Path] = []
            if plan.result_formats:
                files = write_peer_results(run.trace_path, plan.result_formats, plan.slos,
                                           plan.percentiles, plan.result_spec,
                                           point.label.replace("=", "-"), plan.result_folder)
                for path in files:
                    if hooks.on_file is not None:
                        hooks.on_file(path)
            telemetry = trace_file_telemetry(run.trace_path)
            row = sweep_row(point.label or "run", result, book)
            rows.append(row)
            done = PointOutcome(point, run, result, book, telemetry, files, row)
            out.points.append(done)
            if hooks.on_done is not None:
                hooks.on_done(done)
            if plan.rate_sweep and result is not None:
                if point.label == "saturation":
                    out.capacity_req_s = rs.capacity_req_s(result)
                    if out.capacity_req_s == out.capacity_req_s:  # not NaN: it completed some
                        points.extend(BenchPoint(f"rate={r:g}", r, None)
                                      for r in rs.rates_below(out.capacity_req_s))
                    else:
                        _error(out, hooks, "--rate sweep: the saturation probe completed no "
                               "request")
                        out.exit_code = 1
                else:
                    out.sweep_runs.append({"rate": point.rate_req_s, "analysis": result,
                                           "book": book, "telemetry": telemetry})
            if run.aborted:
                _error(out, hooks, f"aborted: {run.aborted}")
            if run.failed:
                out.exit_code = 1
            if run.interrupted:
                out.exit_code = 130  # as a shell reports Ctrl-C, after the trace is written
            if run.interrupted or run.aborted:
                break
        if plan.sweeping:
            out.knee = knee_index([r.get("output_tok_s") or _nan() for r in rows],
                                  [(r.get("e2e_mean_ms") or _nan()) / 1e3 for r in rows])
    return out


__all__ = ["BenchPlan", "BenchPoint", "EmulatorSpec", "PlanOutcome", "PointOutcome",
           "SessionHooks", "run_plan", "sweep_points"]

"""`ridgeline bench` from raw options to printed results: translate the peers' flags, build
the plan (`validate.build_plan`), run it (`load_points.run_plan`), print and write what was
asked. The typer command in `ridgeline.commands.bench` is one call to `run_command`.
"""

from __future__ import annotations

import json
from typing import Any

import typer

from ridgeline.bench.args import BenchArgs
from ridgeline.errors import RidgelineError

# The two request rates a run shows, and why they differ.
WINDOWED_NOTE = ("throughput in the table: windowed (steady state: requests finished inside "
                 "the measurement window / its length)")
WHOLE_RUN_NOTE = ("vLLM's block: whole run, as vLLM computes it (completed requests / time "
                  "from the first send to the last answer, ramp-up and drain included)")


def run_command(a: BenchArgs) -> None:
    from ridgeline.bench.peer_flags import translate
    from ridgeline.commands.bench_validate import build_plan
    from ridgeline.commands.bench_workload import apply_bench_workload

    apply_bench_workload(a)
    peer = translate(a)
    for note in peer.notes:
        typer.echo(f"note: {note}", err=True)
    early = _spawn_emulator(a)
    try:
        cp = build_plan(a, peer)
        outcome = _run(cp, early)
    finally:
        if early is not None:
            early.stop()  # already stopped after a run; a refused plan stops it here
    _finish(cp, outcome)


def _emulator_kwargs(model: str, hardware: str, speed: float, emulator_arg: list[str],
                     calibration: str | None) -> dict[str, Any]:
    extra = list(emulator_arg) + (["--calibration", calibration] if calibration else [])
    return {"model": model or "llama-3.1-8b", "hardware": hardware, "speed": float(speed),
            "extra_args": extra}


def _spawn(kwargs: dict[str, Any]) -> Any:
    from ridgeline.serve.launcher import EmulatorProcess

    return EmulatorProcess(**kwargs).spawn()


# An emulator spawned from the raw command line (`prespawn`), with what it was started with.
_EARLY: list[tuple[dict[str, Any], Any]] = []


def prespawn(argv: list[str]) -> None:
    """`bench --target emulator`: spawn `ridgeline serve` straight from the command line,
    before the option parser is even built, so its start-up (about a second) overlaps
    everything this process does before the first request. Only plain spellings are read
    here; the parsed options must then ask for the very same server (`_spawn_emulator`
    compares the command lines) or it is stopped and a new one started. Stopped at exit
    whatever happens (a refused command line included)."""
    import atexit

    single = {"--target": "target", "--model": "model", "-m": "model", "--hardware": "hardware",
              "-g": "hardware", "--speed": "speed", "--calibration": "calibration"}
    got: dict[str, Any] = {"target": "url", "model": "", "hardware": "h100-sxm",
                           "speed": "1.0", "calibration": None, "emulator_arg": []}
    i = 0
    while i < len(argv):
        name, eq, value = argv[i].partition("=")
        if name in single or name == "--emulator-arg":
            if not eq:
                if i + 1 >= len(argv):
                    return
                value = argv[i + 1]
                i += 1
            if name == "--emulator-arg":
                got["emulator_arg"].append(value)
            else:
                got[single[name]] = value
        elif name in ("--served-model-name", "--help", "--"):
            return  # the model name may change, or nothing runs
        i += 1
    if got["target"] != "emulator":
        return
    try:
        speed = float(got["speed"])
    except ValueError:
        return
    kwargs = _emulator_kwargs(got["model"], got["hardware"], speed, got["emulator_arg"],
                              got["calibration"])
    emu = _spawn(kwargs)
    _EARLY.append((kwargs, emu))
    atexit.register(emu.stop)


def _spawn_emulator(a: BenchArgs) -> Any:
    """`--target emulator`: start `ridgeline serve` now (or take the one `prespawn`
    started for this same command line), so its start-up runs while this process imports
    the load generator and checks the options; the plan uses it once both are done. A plan
    refused meanwhile stops it."""
    if a.target != "emulator":
        return None
    wanted = _emulator_kwargs(a.model, a.hardware, a.speed, list(a.emulator_arg or []),
                              a.calibration)
    while _EARLY:
        kwargs, early = _EARLY.pop()
        if kwargs == wanted:
            return early
        early.stop()
    return _spawn(wanted)


# The formats that print ridgeline's own tables on stdout (json prints the results as one
# document, vllm only vLLM's block).
PAGE_FORMATS = ("table", "plain", "markdown", "csv")


def _run(cp: Any, emulator: Any = None) -> Any:
    from rich.markup import escape

    from ridgeline.bench.load_points import SessionHooks, run_plan
    from ridgeline.report.tables import Out, out_for

    plan = cp.plan
    fmt = cp.out_format
    # ridgeline's tables, in the format asked (rich tables on a terminal, whole plain ones
    # in a log); the lines around them go there too unless stdout must parse (csv, json)
    # or hold vLLM's block alone (vllm): then they go to stderr.
    page = Out(fmt) if fmt in PAGE_FORMATS else None
    console = out_for(stderr=True) if page is None or fmt == "csv" else page
    # Say what runs and for how long before the first request: a run that shows no
    # progress (stderr not a terminal) must still say it is working, and on what.
    bound = " or ".join(b for b in (f"{cp.requests} requests" if cp.requests else "",
                                    f"{cp.duration_s:g} s" if cp.duration_s else "") if b)

    def announce(cfg: Any) -> None:
        where = "" if cp.trace_asked else " (not asked for: kept in the cache folder)"
        typer.echo(f"bench: {cfg.endpoint.base_url} model {cfg.endpoint.model}: {bound}"
                   f"{' (whichever first)' if ' or ' in bound else ''}; trace "
                   f"{cfg.trace_path}{where}", err=True)

    def done(p: Any) -> None:
        if page is not None and not plan.sweeping:
            from ridgeline.bench.summary import print_summary
            from ridgeline.metrics.telemetry import telemetry_lines

            print_summary(p.analysis, p.book, [*p.run.notes, f"trace: {p.run.trace_path}"],
                          console, table_out=page)
            for line in telemetry_lines(p.telemetry):
                console.print(line, highlight=False)
            console.print(WINDOWED_NOTE, highlight=False)
            console.print(WHOLE_RUN_NOTE, highlight=False)
        if fmt == "vllm" or (fmt in ("table", "plain", "markdown") and not plan.sweeping):
            _print_vllm_block(cp, p)

    hooks = SessionHooks(
        warn=lambda m: console.print(f"[yellow]warning:[/] {escape(m)}", highlight=False),
        on_start=announce,
        on_point=lambda pt, path: console.print(f"[bold]{pt.label}[/bold] → {path}"),
        on_done=done, on_file=lambda path: console.print(f"result: {path}", highlight=False),
        on_error=lambda m: console.print(f"[red]error:[/] {m}"))
    outcome = run_plan(plan, hooks, emulator=emulator)
    if plan.sweeping and page is not None:
        from ridgeline.bench.summary import print_sweep

        print_sweep([p.row for p in outcome.points], outcome.knee, page)
        if outcome.sweep_runs:
            from ridgeline.bench.rate_sweep import print_rate_sweep

            print_rate_sweep(outcome.capacity_req_s, outcome.sweep_runs, plan.slos,
                             [f"measured against {outcome.base_url}"], out=page)
    if page is not None:
        page.close()
    return outcome


def _print_vllm_block(cp: Any, p: Any) -> None:
    """vLLM's fixed result block for one point, on stdout, from the same numbers as its
    --save-result file (in a text block under `--format markdown`)."""
    from ridgeline.bench.results_peer import vllm_result, vllm_result_block

    if p.run.ok == 0 and cp.out_format != "vllm":
        return
    plan = cp.plan
    result = vllm_result(p.run.trace_path, plan.slos, plan.percentiles, plan.result_spec)
    metrics = (plan.result_spec.percentile_metrics if plan.result_spec is not None else None)
    block = vllm_result_block(result, plan.percentiles, metrics, goodput=bool(plan.slos))
    if cp.out_format == "markdown":
        block = ["", "```text", *block, "```"]
    typer.echo("\n".join(block))


def _finish(cp: Any, outcome: Any) -> None:
    """The JSON payload, the peers' output folders, the report; then the exit code."""
    plan = cp.plan
    results = [p.to_dict() for p in outcome.points]
    if cp.out_format == "json":
        payload: dict = {"points": results}
        rows = [p.row for p in outcome.points]
        if plan.sweeping:
            payload["sweep"] = rows
            payload["knee"] = rows[outcome.knee]["point"] if outcome.knee is not None \
                else None
        if outcome.sweep_runs:
            from ridgeline.bench import rate_sweep as rs

            payload["rate_sweep"] = rs.sweep_summary(
                outcome.capacity_req_s,
                [rs.sweep_point(r["rate"], r["analysis"], r["book"], r["telemetry"])
                 for r in outcome.sweep_runs], plan.slos)
        typer.echo(json.dumps(payload if plan.sweeping else results[0], indent=2,
                              default=str))
    traces = [p.run.trace_path for p in outcome.points]
    if cp.artifact_dir is not None and traces:
        from ridgeline.bench.results_peer import write_aiperf_artifacts

        for path in write_aiperf_artifacts(traces[-1], cp.artifact_dir):
            typer.echo(f"result: {path}", err=True)
    if cp.output_path is not None and traces:
        from ridgeline.bench.results_guidellm import write_guidellm_report

        path = write_guidellm_report([p.point for p in outcome.points], traces,
                                     cp.output_path, cp.rate_type)
        typer.echo(f"result: {path}", err=True)
    if cp.report and results:
        from ridgeline.commands.report import write_report_for_traces

        try:
            report_path = write_report_for_traces([r["trace"] for r in results], cp.report,
                                                  sweep=cp.sweep_rates, slos=plan.slos,
                                                  seed=plan.run.seed)
            typer.echo(f"report: {report_path}",
                       err=cp.out_format not in ("table", "plain", "markdown"))
        except RidgelineError as exc:  # e.g. nothing succeeded: the run's own code stands
            typer.echo(f"report: not written ({exc})", err=True)
    if outcome.exit_code:
        raise typer.Exit(outcome.exit_code)


__all__ = ["run_command"]

"""`ridgeline verify`: predicted vs measured, per load point, with the measurement's CIs."""

from __future__ import annotations

from typing import Annotated

import typer

from ridgeline.commands.options import JsonOpt, SeedOpt


def verify_cmd(
    traces: Annotated[list[str], typer.Argument(help="Measured traces (any format `analyze` "
                                                "reads), one load point each.")],
    calibration: Annotated[str, typer.Option("--calibration", help="The calibration profile "
                                             "to predict with.")],
    bound: Annotated[list[str] | None, typer.Option(
        "--bound", help="Fail (exit 1) when |error| exceeds it: tpot_p50=10%, e2e_p50=10%, "
        "ttft_p50=20% (repeatable).")] = None,
    fmt: Annotated[str | None, typer.Option(
        "--format", metavar="FORMAT", help="Output format: table, plain, markdown, csv, json "
        "(an input format's name here is read as --input-format).")] = None,
    input_fmt: Annotated[str | None, typer.Option(
        "--input-format", help="Trace format (auto, ridgeline, vllm, aiperf, guidellm, "
        "llmperf; default auto).")] = None,
    closed_loop: Annotated[bool, typer.Option(
        "--closed-loop", help="Replay as a closed loop even without a header saying so "
        "(refused when the sends do not follow replies' ends). A closed-loop trace is "
        "replayed as its users by default: each sends when its previous reply ended in the "
        "simulation, from its measured first send.")] = False,
    open_loop: Annotated[bool, typer.Option(
        "--open-loop", help="Replay the measured send times as an open-loop schedule, even "
        "for a closed-loop trace.")] = False,
    slot_order: Annotated[str | None, typer.Option(
        "--slot-order", help="llama.cpp per-slot profiles: the server's LRU slot order when "
        "the first trace starts, e.g. 3,4,0,5,6,1,2,7 (`ridgeline.sim.slots.check_log` reads "
        "it from llama-server's log), or `fresh` (a restarted server: N-1..0); default: the "
        "order the profile recorded after calibration (fresh if none). Later traces start "
        "from the order the earlier ones left, replayed from their send/end times.")] = None,
    json_out: JsonOpt = False,
    seed: SeedOpt = 0,
) -> None:
    """Replay measured traces through the simulator with a profile; compare the metrics."""
    import json

    from ridgeline.calibrate.verify import parse_bounds, verify
    from ridgeline.commands.analyze import split_formats
    from ridgeline.errors import RidgelineError
    from ridgeline.report.calibrate_text import print_verify
    from ridgeline.sim.calibrated_profile import CalibrationProfile

    if closed_loop and open_loop:
        raise RidgelineError("--closed-loop/--open-loop: got both; allowed: one of them")
    out_fmt, in_fmt = split_formats(fmt, input_fmt)
    bounds = parse_bounds(bound)
    profile = CalibrationProfile.load(calibration)
    start: list[int] | str | None = None
    if slot_order is not None and slot_order.strip().lower() == "fresh":
        start = "fresh"
    elif slot_order is not None:
        try:
            start = [int(x) for x in slot_order.split(",")]
        except ValueError:
            raise RidgelineError(f"--slot-order: got {slot_order!r}; allowed: comma-separated "
                                 "slot ids, or fresh") from None
        profile.with_slot_order(start)     # checks it lists each slot once
    loop = "closed" if closed_loop else ("open" if open_loop else "auto")
    report = verify(list(traces), profile, bounds, in_fmt, seed, start_slot_order=start,
                    loop=loop)
    if json_out or out_fmt == "json":
        typer.echo(json.dumps(report.to_dict(), indent=2))
    else:
        print_verify(report, out_fmt)
    if report.failed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("verify")(verify_cmd)

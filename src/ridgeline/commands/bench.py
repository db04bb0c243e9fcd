"""`ridgeline bench`: load-test any OpenAI-compatible endpoint (or the built-in emulator).

Only typer and the standard library are imported here; the load generator is imported
inside the command.
"""

from __future__ import annotations

import os
import time
from typing import Annotated

import typer

from ridgeline.commands.options import (
    CalibrationOpt,
    JsonOpt,
    SeedOpt,
    SloOpt,
    TraceOutOpt,
    check_writable,
    number,
    parse_number,
)
from ridgeline.commands.report import ReportOpt, check_report_path
from ridgeline.errors import RidgelineError, field_error

DEFAULT_REQUESTS = 100
_EXAMPLES = """
Examples:

  ridgeline bench --base-url http://127.0.0.1:8000 --model NAME --rate 8 --requests 2000
      --prompt lognormal:mean=1000,sigma=0.5 --output fixed:256 --slo ttft_ms:500

  ridgeline bench --target emulator --model llama-3.1-8b --hardware h100-sxm
      --concurrency 1,8,32 --requests 200          (a sweep: one trace per point)
"""


def _split_list(text: str | None, field: str, kind: type) -> list:
    if text is None or not str(text).strip():
        return []
    out = []
    for part in str(text).split(","):
        try:
            # at most a million: bench holds one task per user (and rates past 1e7 req/s
            # no client sends)
            value = parse_number(part, field, gt=0, le=1e6 if kind is int else 1e7)
            if kind is int and value != int(value):
                raise ValueError(part)
        except (ValueError, RidgelineError):
            allowed = "whole numbers from 1 to 1,000,000" if kind is int else \
                "finite numbers > 0 and at most 1e7"
            raise field_error(field, text, f"{allowed}, one or a comma list, e.g. 1,2,4,8"
                              ) from None
        out.append(kind(value))
    return out


def _check_base_url(url: str) -> None:
    from urllib.parse import urlsplit

    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise field_error("--base-url", url, "an http:// or https:// URL with a host, e.g. "
                          "http://127.0.0.1:8000")
    try:
        parts.port  # noqa: B018 (raises on a port out of range)
    except ValueError:
        raise field_error("--base-url", url, "a port in 1..65535") from None


def _headers(items: list[str] | None) -> tuple[tuple[str, str], ...]:
    out = []
    for item in items or []:
        name, sep, value = item.partition(":")
        if not sep or not name.strip():
            raise field_error("--header", item, "'Name: value'")
        out.append((name.strip(), value.strip()))
    return tuple(out)


def bench(
    base_url: Annotated[str, typer.Option("--base-url", help="Server root, e.g. "
                                          "http://127.0.0.1:8000 (a trailing /v1 is fine).")
                        ] = "http://127.0.0.1:8000",
    target: Annotated[str, typer.Option("--target", help="'url' (--base-url) or 'emulator' "
                                        "(start `ridgeline serve` on a free loopback port, "
                                        "benchmark it, stop it).")] = "url",
    model: Annotated[str, typer.Option("--model", "-m", help="Model name sent in requests "
                                       "(default: the server's first /v1/models entry; for "
                                       "--target emulator a catalog model).")] = "",
    hardware: Annotated[str, typer.Option("--hardware", "-g", help="Emulator only: catalog "
                                          "GPU.")] = "h100-sxm",
    speed: Annotated[float, typer.Option(
        "--speed", callback=number(gt=0), help="Emulator only: time scale (2 = twice as fast "
        "as the model predicts).")] = 1.0,
    emulator_arg: Annotated[list[str] | None, typer.Option(
        "--emulator-arg", help="Emulator only: one more `ridgeline serve` argument "
        "(repeatable), e.g. --emulator-arg=--max-num-seqs --emulator-arg=64.")] = None,
    calibration: CalibrationOpt = None,
    api: Annotated[str, typer.Option("--api", help="completions (/v1/completions) or chat "
                                     "(/v1/chat/completions).")] = "completions",
    api_key: Annotated[str | None, typer.Option("--api-key", help="Bearer token (default: "
                                                "$OPENAI_API_KEY).")] = None,
    header: Annotated[list[str] | None, typer.Option("--header", help="Extra HTTP header "
                                                     "'Name: value' (repeatable).")] = None,
    timeout_s: Annotated[float, typer.Option("--timeout", callback=number(gt=0),
                                             help="Per-request limit, seconds.")] = 600.0,
    stall_timeout_s: Annotated[float | None, typer.Option(
        "--stall-timeout", callback=number(gt=0),
        help="Fail a request after this many seconds without data.")] = None,
    ignore_eos: Annotated[bool, typer.Option("--ignore-eos", help="Send ignore_eos=true "
                                             "(vLLM/SGLang) so outputs reach max_tokens.")
                          ] = False,
    min_tokens: Annotated[bool, typer.Option("--min-tokens", help="Send min_tokens=max_tokens "
                                             "(vLLM) to force exact output lengths.")] = False,
    temperature: Annotated[float | None, typer.Option("--temperature", callback=number(ge=0),
                                                      help="Sampling temperature.")] = None,
    insecure: Annotated[bool, typer.Option("--insecure", help="Do not verify TLS "
                                           "certificates.")] = False,
    no_usage: Annotated[bool, typer.Option("--no-usage", help="Do not ask for "
                                           "stream_options.include_usage.")] = False,
    concurrency: Annotated[str | None, typer.Option(
        "--concurrency", "-c", help="Closed loop at this many in flight, or with --rate the "
        "cap on in-flight requests. A list (1,8,32) sweeps.")] = None,
    rate: Annotated[str | None, typer.Option(
        "--rate", "-r", help="Open loop at this many requests/s. A list (1,2,4,8) sweeps; "
        "'sweep' measures saturation (closed loop at --concurrency, default 64) then sweeps "
        "20%-110% of it, as simulate does.")
    ] = None,
    arrival: Annotated[str, typer.Option(
        "--arrival", help="poisson, gamma:cv=2, constant, ramp:start=1,end=16, "
        "replay:path=FILE.")] = "poisson",
    requests: Annotated[int | None, typer.Option(
        "--requests", "-n", min=1, help=f"Requests per point (default {DEFAULT_REQUESTS} when "
        "--duration is not given either).")] = None,
    duration_s: Annotated[float | None, typer.Option(
        "--duration", callback=number(gt=0), help="Seconds per point; with --requests, "
        "whichever comes first.")] = None,
    warmup: Annotated[int, typer.Option("--warmup", min=0, help="Warm-up requests before "
                                        "each point, not recorded.")] = 0,
    prompt: Annotated[str, typer.Option("--prompt", help="Prompt length distribution "
                                        "(simulate's syntax), e.g. "
                                        "lognormal:mean=1000,sigma=0.5.")] = "fixed:256",
    output: Annotated[str | None, typer.Option("--output", help="Output length (max_tokens) "
                                               "distribution; default fixed:256, or the "
                                               "dataset's own lengths.")] = None,
    dataset: Annotated[str, typer.Option("--dataset", help="synthetic, sharegpt:path=FILE, "
                                         "jsonl:path=FILE.")] = "synthetic",
    prefix_groups: Annotated[int, typer.Option("--prefix-groups", min=0, help="Shared-prefix "
                                               "groups (prefix caching).")] = 0,
    prefix_tokens: Annotated[int, typer.Option("--prefix-tokens", min=0, help="Tokens in each "
                                               "shared prefix.")] = 0,
    tokenizer: Annotated[str | None, typer.Option(
        "--tokenizer", help="The served model's tokenizer: a tokenizer.json, a folder "
        "holding one, a Hugging Face model id (org/name) or tiktoken:<encoding>; synthetic "
        "prompts then hold exactly N of its tokens, and it counts output when the server "
        "sends no usage (pip install 'ridgeline[tokenizer]').")] = None,
    trace: TraceOutOpt = None,
    slo: SloOpt = None,
    max_error_rate: Annotated[float | None, typer.Option(
        "--max-error-rate", callback=number(ge=0, le=1), help="Abort when more than this "
        "fraction of finished requests failed (checked after 20).")] = None,
    grace_s: Annotated[float, typer.Option(
        "--grace", callback=number(ge=0), help="Seconds requests in flight may finish after "
        "Ctrl-C or the duration limit.")] = 10.0,
    workers: Annotated[int, typer.Option("--workers", min=1, max=1024,
                                         help="Client processes on this "
                                         "machine.")] = 1,
    ray: Annotated[str | None, typer.Option("--ray", help="Spread client workers over a Ray "
                                            "cluster: an address, or 'local' to start one.")
                   ] = None,
    progress: Annotated[bool | None, typer.Option("--progress/--no-progress", help="Live "
                                                  "progress (default: when stderr is a "
                                                  "terminal).")] = None,
    extra_body: Annotated[str | None, typer.Option(
        "--extra-body", help="JSON object merged into every request body (sampling "
        "parameters, chat_template_kwargs, engine fields), e.g. '{\"top_k\": 20}'.")] = None,
    prompt_nonce: Annotated[int | None, typer.Option(
        "--prompt-nonce", help="Repeat a run's prompt texts exactly (the trace "
        "header's dataset.prompt_nonce); default: fresh texts every run, so no prompt is "
        "answered from a cache it warmed.")] = None,
    server_metrics: Annotated[str | None, typer.Option(
        "--server-metrics", help="Prometheus URL to scrape during the run (default: the "
        "target's /metrics, auto-detected).")] = None,
    no_server_metrics: Annotated[bool, typer.Option(
        "--no-server-metrics", help="Do not scrape server metrics or sample the GPU.")
    ] = False,
    telemetry_interval_ms: Annotated[float, typer.Option(
        "--telemetry-interval-ms", help="Server-metrics and GPU sampling period, ms.")] = 500.0,
    save_result: Annotated[list[str] | None, typer.Option(
        "--save-result", help="Also write a peer's result file next to each trace: vllm "
        "(`vllm bench serve --save-result` JSON) or aiperf-csv (repeatable).")] = None,
    replay: Annotated[str | None, typer.Option(
        "--replay", help="Replay a production trace: BurstGPT CSV or Mooncake JSONL "
        "(arrival times, input/output lengths, Mooncake's shared blocks).")] = None,
    replay_speed: Annotated[float, typer.Option(
        "--replay-speed", help="Replay time scale: 2 sends twice as fast.")] = 1.0,
    multi_turn: Annotated[int | None, typer.Option(
        "--multi-turn", help="Conversations of this many turns; each turn carries the "
        "history (prefix caching on purpose). --concurrency = conversations at once.")
    ] = None,
    think_time: Annotated[str, typer.Option(
        "--think-time", help="Multi-turn: seconds between a reply and the next turn, e.g. "
        "exponential:mean=2.")] = "0",
    metric_percentiles: Annotated[str, typer.Option(
        "--metric-percentiles", help="Percentiles in the --save-result vllm file, e.g. "
        "50,90,99 (as vLLM's option).")] = "99",
    json_out: JsonOpt = False,
    seed: SeedOpt = 0,
    report: ReportOpt = None,
) -> None:
    """Load-test an OpenAI-compatible endpoint; write one trace per load point."""
    import contextlib
    import json
    import sys

    from rich.console import Console
    from rich.markup import escape

    from ridgeline.bench.client import EndpointConfig
    from ridgeline.bench.dataset import parse_dataset
    from ridgeline.bench.load import LoadSpec
    from ridgeline.bench.run import BenchConfig, run_bench
    from ridgeline.bench.summary import (
        analyze_trace,
        bookkeeping,
        knee_index,
        print_summary,
        print_sweep,
        sweep_row,
    )
    from ridgeline.bench.telemetry import TelemetryConfig
    from ridgeline.metrics.telemetry import telemetry_lines, trace_file_telemetry
    from ridgeline.workload.arrivals import parse_arrival
    from ridgeline.workload.lengths import parse_lengths

    if api not in ("completions", "chat"):
        raise field_error("--api", api, "completions, chat")
    if target not in ("url", "emulator"):
        raise field_error("--target", target, "url, emulator")
    if calibration and target != "emulator":
        raise field_error("--calibration", calibration, "only with --target emulator")
    if max_error_rate is not None and not 0 <= max_error_rate <= 1:
        raise field_error("--max-error-rate", max_error_rate, "a fraction in [0, 1]")
    if target == "url":
        _check_base_url(base_url)
    check_report_path(report)
    requests_given = requests is not None
    if requests is None and duration_s is None:
        requests = DEFAULT_REQUESTS  # vLLM and AIPerf also default to a request count
    from ridgeline.bench.options import (
        check_save_result,
        check_telemetry_interval,
        parse_extra_body,
        parse_metrics_url,
        parse_percentiles,
    )

    body_extra = parse_extra_body(extra_body)
    result_formats = check_save_result(save_result)
    pcts = tuple(parse_percentiles(metric_percentiles))
    check_telemetry_interval(telemetry_interval_ms)
    metrics_url = parse_metrics_url(server_metrics)
    if prompt_nonce is not None and not 0 <= prompt_nonce < 2**32:
        raise field_error("--prompt-nonce", prompt_nonce, "an integer in [0, 2**32)")
    if prompt_nonce is None:
        from ridgeline.bench.prompts import new_prompt_nonce

        prompt_nonce = new_prompt_nonce()  # one per invocation: sweep points differ by index
    replay_trace = None
    if replay is not None:
        from ridgeline.bench.replay import load_replay

        if rate is not None or dataset != "synthetic" or prefix_groups:
            raise RidgelineError("--replay: the trace sets arrival times and lengths; drop "
                                 "--rate, --dataset and --prefix-groups")
        replay_trace = load_replay(replay, replay_speed)
        if not requests_given and duration_s is None:
            requests = len(replay_trace.times_s)  # the whole trace unless --requests says
        from ridgeline.bench.replay import check_replay_gaps

        for line in check_replay_gaps(replay_trace, requests, duration_s):
            typer.echo(line, err=True)
    elif replay_speed != 1.0:
        raise RidgelineError("--replay-speed: only with --replay")
    turns = None
    if multi_turn is not None:
        from ridgeline.bench.multiturn import parse_multi_turn

        turns = parse_multi_turn(multi_turn, think_time)
        if rate is not None or replay is not None or dataset != "synthetic" or \
                prefix_groups or workers > 1 or ray is not None:
            raise RidgelineError("--multi-turn: a closed loop of conversations in one "
                                 "process; drop --rate, --replay, --dataset, --prefix-groups, "
                                 "--workers and --ray")
        if requests is None:
            raise RidgelineError("--multi-turn: give --requests (the total number of turns)")
    elif think_time != "0":
        raise RidgelineError("--think-time: only with --multi-turn")
    rate_sweep = rate is not None and rate.strip().lower() == "sweep"
    rates = [] if rate_sweep else _split_list(rate, "--rate", float)
    concs = _split_list(concurrency, "--concurrency", int)
    if rate_sweep and len(concs) > 1:
        raise RidgelineError("--rate sweep: --concurrency takes one value there (the "
                             "saturation probe's), not a list")
    if len(rates) > 1 and len(concs) > 1:
        raise RidgelineError("--rate/--concurrency: sweep one of them at a time (give the "
                             "other a single value)")
    if not rates and not concs:
        concs = [1]
    prompt_dist = parse_lengths(prompt, "--prompt")
    output_dist = parse_lengths(output, "--output") if output is not None else None
    ds = parse_dataset(dataset)
    if output_dist is None and ds.kind == "synthetic":
        output_dist = parse_lengths("fixed:256", "--output")
    from ridgeline.bench.sizes import check_bench_sizes

    check_bench_sizes(prompt_dist, output_dist, replay_trace, requests, prefix_tokens,
                      (model or "llama-3.1-8b") if target == "emulator" else None,
                      calibration is not None)
    slos = list(slo or [])
    if slos:
        with contextlib.suppress(ImportError):
            from ridgeline.metrics.slo import parse_slos

            parse_slos(slos)  # bad SLO text fails now, not after the run
    if ray is not None:
        try:
            import ray as _ray  # noqa: F401
        except ImportError:
            raise RidgelineError("--ray: Ray is not installed (pip install ray, or "
                                 "pip install 'ridgeline[ray]')") from None
    trace_base = trace or time.strftime("bench-%Y%m%d-%H%M%S.jsonl")
    check_writable(trace_base, "--trace")
    points: list[tuple[str, float | None, int | None]] = []
    if len(rates) > 1:
        points = [(f"rate={r:g}", r, concs[0] if concs else None) for r in rates]
    elif len(concs) > 1:
        points = [(f"concurrency={c}", rates[0] if rates else None, c) for c in concs]
    else:
        points = [("", rates[0] if rates else None, concs[0] if concs else None)]
    if rate_sweep:  # the rates are added once the saturation probe has run
        from ridgeline.bench.rate_sweep import SATURATION_CONCURRENCY

        points = [("saturation", None, concs[0] if concs else SATURATION_CONCURRENCY)]
    sweeping = len(points) > 1 or rate_sweep
    sweep_runs: list[dict] = []
    capacity = float("nan")
    console = Console(stderr=json_out)
    show_progress = progress if progress is not None else sys.stderr.isatty()

    def trace_path_for(label: str) -> str:
        if not sweeping:
            return trace_base
        stem, dot, ext = trace_base.rpartition(".")
        tag = label.replace("=", "-")
        return f"{stem}.{tag}.{ext}" if dot else f"{trace_base}.{tag}"

    header_extra: dict = {}
    emulator_cm: contextlib.AbstractContextManager = contextlib.nullcontext()
    if target == "emulator":
        try:
            from ridgeline.serve.launcher import EmulatorProcess
        except ImportError:
            raise RidgelineError("--target emulator: the emulator (ridgeline.serve) is not "
                                 "available in this installation") from None
        emulator_cm = EmulatorProcess(model=model or "llama-3.1-8b", hardware=hardware,
                                      speed=speed, extra_args=list(emulator_arg or []) + (
                                          ["--calibration", calibration] if calibration
                                          else []))
        header_extra = {"hardware": hardware, "engine": "ridgeline-emulator",
                        "emulator_speed": speed}
    results = []
    exit_code = 0
    with emulator_cm as emu:
        url = emu.base_url if emu is not None else base_url
        # Say what runs and for how long before the first request: a run that shows no
        # progress (stderr not a terminal) must still say it is working, and on what.
        bound = " or ".join(b for b in (f"{requests} requests" if requests else "",
                                        f"{duration_s:g} s" if duration_s else "") if b)

        def announce(cfg: BenchConfig) -> None:
            typer.echo(f"bench: {cfg.endpoint.base_url} model {cfg.endpoint.model}: {bound}"
                       f"{' (whichever first)' if ' or ' in bound else ''}; trace "
                       f"{cfg.trace_path}", err=True)
        endpoint = EndpointConfig(
            base_url=url, model=model, api=api,
            api_key=api_key if api_key is not None else os.environ.get("OPENAI_API_KEY"),
            headers=_headers(header), timeout_s=timeout_s, stall_timeout_s=stall_timeout_s,
            temperature=temperature, ignore_eos=ignore_eos, min_tokens=min_tokens,
            verify_tls=not insecure, include_usage=not no_usage, extra_body=body_extra)
        rows = []
        for point_index, (label, point_rate, point_conc) in enumerate(points):
            arrival_proc = (parse_arrival(arrival, point_rate) if point_rate is not None
                            else None)
            if point_rate is None and arrival not in ("poisson",) and not rate_sweep:
                # an arrival spec that carries its own rate (ramp, replay) makes it open loop
                arrival_proc = parse_arrival(arrival, None)
            if replay_trace is not None:
                from ridgeline.workload.arrivals import ArrivalProcess

                arrival_proc = ArrivalProcess("replay", replay_times_s=replay_trace.times_s)
                point_conc = concs[0] if concurrency else None
            load = LoadSpec(concurrency=point_conc, arrival=arrival_proc, requests=requests,
                            duration_s=duration_s, warmup=warmup)
            cfg = BenchConfig(
                endpoint=endpoint, load=load, trace_path=trace_path_for(label), dataset=ds,
                prompt=prompt_dist, output=output_dist, prefix_groups=prefix_groups,
                prefix_tokens=prefix_tokens, tokenizer=tokenizer, seed=seed, grace_s=grace_s,
                max_error_rate=max_error_rate, workers=workers,
                ray_address=ray, progress=show_progress, header_extra=dict(header_extra),
                prompt_nonce=prompt_nonce, point_index=point_index, replay=replay_trace,
                multi_turn=turns,
                telemetry=TelemetryConfig(enabled=not no_server_metrics, url=metrics_url,
                                          interval_s=telemetry_interval_ms / 1e3))
            if sweeping:
                console.print(f"[bold]{label}[/bold] → {cfg.trace_path}")
            outcome = run_bench(cfg, warn=lambda m: console.print(
                f"[yellow]warning:[/] {escape(m)}", highlight=False), on_start=announce)
            result = analyze_trace(outcome.trace_path, slos, seed)
            book = bookkeeping(outcome.trace_path)
            if result_formats:
                from ridgeline.bench.results_peer import write_peer_results

                for path in write_peer_results(outcome.trace_path, result_formats, slos, pcts):
                    console.print(f"result: {path}", highlight=False)
            telemetry = trace_file_telemetry(outcome.trace_path)
            if not sweeping and not json_out:
                print_summary(result, book, [*outcome.notes, f"trace: {outcome.trace_path}"],
                              console)
                for line in telemetry_lines(telemetry):
                    console.print(line, highlight=False)
            row = sweep_row(label or "run", result, book)
            rows.append(row)
            results.append({"point": label or "run", "trace": str(outcome.trace_path),
                            "interrupted": outcome.interrupted, "aborted": outcome.aborted,
                            "bench": book, "notes": outcome.notes, "telemetry": telemetry,
                            "analysis": result.to_dict() if result is not None else None})
            if rate_sweep and result is not None:
                from ridgeline.bench import rate_sweep as rs

                if label == "saturation":
                    capacity = rs.capacity_req_s(result)
                    if capacity == capacity:  # not NaN: the probe completed requests
                        points.extend((f"rate={r:g}", r, None) for r in rs.rates_below(capacity))
                    else:
                        console.print("[red]error:[/] --rate sweep: the saturation probe "
                                      "completed no request")
                        exit_code = 1
                else:
                    sweep_runs.append({"rate": point_rate, "analysis": result, "book": book,
                                       "telemetry": telemetry})
            if outcome.aborted:
                console.print(f"[red]error:[/] aborted: {outcome.aborted}")
            if outcome.failed:
                exit_code = 1
            if outcome.interrupted:
                exit_code = 130  # as a shell reports Ctrl-C, after the trace is written
            if outcome.interrupted or outcome.aborted:
                break
        knee = None
        if sweeping:
            knee = knee_index([r.get("output_tok_s") or math_nan() for r in rows],
                              [(r.get("e2e_mean_ms") or math_nan()) / 1e3 for r in rows])
            if not json_out:
                print_sweep(rows, knee, console)
                if sweep_runs:
                    from ridgeline.bench.rate_sweep import print_rate_sweep

                    print_rate_sweep(capacity, sweep_runs, slos,
                                     [f"measured against {url}"])
    if json_out:
        payload: dict = {"points": results}
        if sweeping:
            payload["sweep"] = rows
            payload["knee"] = rows[knee]["point"] if knee is not None else None
        if sweep_runs:
            from ridgeline.bench import rate_sweep as rs

            payload["rate_sweep"] = rs.sweep_summary(
                capacity, [rs.sweep_point(r["rate"], r["analysis"], r["book"], r["telemetry"])
                           for r in sweep_runs], slos)
        typer.echo(json.dumps(payload if sweeping else results[0], indent=2, default=str))
    if report and results:
        from ridgeline.commands.report import write_report_for_traces

        try:
            path = write_report_for_traces([r["trace"] for r in results], report,
                                           sweep=len(rates) > 1, slos=slos, seed=seed)
            typer.echo(f"report: {path}", err=json_out)
        except RidgelineError as exc:  # e.g. nothing succeeded: the run's own code stands
            typer.echo(f"report: not written ({exc})", err=True)
    if exit_code:
        raise typer.Exit(exit_code)


def math_nan() -> float:
    return float("nan")


def register(app: typer.Typer) -> None:
    app.command("bench", help="Load-test an OpenAI-compatible endpoint (or the built-in "
                "emulator) and write one trace per load point." + _EXAMPLES)(bench)

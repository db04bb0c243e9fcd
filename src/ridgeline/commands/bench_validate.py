"""`ridgeline bench`'s options, checked, as one `BenchPlan` (the config constructor).

`build_plan(args)` takes the raw options (`BenchArgs`, after `peer_flags.translate`) and
either raises a one-line `RidgelineError` or returns the plan `load_points.run_plan` runs,
plus what the command prints and writes around it (`CommandPlan`). Nothing is sent and no
file is written here.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ridgeline.commands.options import check_writable, parse_number
from ridgeline.errors import RidgelineError, field_error
from ridgeline.report.tables import FORMATS, default_format

DEFAULT_REQUESTS = 100
OUT_FORMATS = (*FORMATS, "vllm")
AIPERF_TRACE_NAME = "profile_export_ridgeline.jsonl"


@dataclass
class CommandPlan:
    """The plan and what the command does around it."""

    plan: Any  # load_points.BenchPlan
    out_format: str  # table | plain | markdown | csv | json | vllm (resolved)
    requests: int | None
    duration_s: float | None
    trace_asked: bool  # False: the trace lives in the cache folder (its path is printed)
    sweep_rates: bool  # a --rate list (the report's sweep axis)
    report: str | None
    artifact_dir: str | None
    output_path: str | None
    rate_type: str | None


def split_list(text: str | None, field: str, kind: type) -> list:
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


def check_base_url(url: str) -> None:
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url.strip())
    except ValueError:  # an unclosed IPv6 bracket
        raise field_error("--base-url", url, "an http:// or https:// URL with a host, e.g. "
                          "http://127.0.0.1:8000") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise field_error("--base-url", url, "an http:// or https:// URL with a host, e.g. "
                          "http://127.0.0.1:8000")
    try:
        parts.port  # noqa: B018 (raises on a port out of range)
    except ValueError:
        raise field_error("--base-url", url, "a port in 1..65535") from None


def parse_headers(items: list[str] | None) -> tuple[tuple[str, str], ...]:
    """'Name: value' (ours, curl's) or KEY=VALUE (vLLM's `--header`)."""
    out = []
    for item in items or []:
        colon, eq = item.find(":"), item.find("=")
        sep_at = colon if colon >= 0 and (eq < 0 or colon < eq) else eq
        name, value = (item[:sep_at], item[sep_at + 1:]) if sep_at >= 0 else ("", "")
        if sep_at < 0 or not name.strip() or any(ch in item for ch in "\r\n\x00"):
            raise field_error("--header", item, "'Name: value' or KEY=VALUE on one line")
        out.append((name.strip(), value.strip()))
    return tuple(out)


def trace_cache_dir() -> Path:
    """Where a trace nobody asked for goes: the run stays crash-safe (every request is
    flushed as it finishes) without writing into the working directory."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "ridgeline" / "traces"


def _trace_base(a: Any) -> tuple[str, bool]:
    """The trace path and whether the user asked for it (--trace, or AIPerf's folder)."""
    if a.trace:
        return a.trace, True
    if a.artifact_dir:
        return str(Path(a.artifact_dir) / AIPERF_TRACE_NAME), True
    name = time.strftime("bench-%Y%m%d-%H%M%S") + f"-{os.getpid()}.jsonl"
    return str(trace_cache_dir() / name), False


def _check_outputs(a: Any) -> None:
    from ridgeline.commands.report import check_report_path

    check_report_path(a.report)
    if a.result_dir is not None:
        check_writable(str(Path(a.result_dir) / "probe.json"), "--result-dir")
    if a.artifact_dir is not None:
        check_writable(a.artifact_dir, "--artifact-dir", directory=True)
    if a.output_path is not None:
        p = Path(a.output_path)
        if p.suffix.lower() not in ("", ".json", ".yaml", ".yml", ".csv") and not p.is_dir():
            raise field_error("--output-path", a.output_path, "a .json, .yaml or .csv file, "
                              "or a folder")
        check_writable(p, "--output-path", directory=p.is_dir() or not p.suffix)


def _load_inputs(a: Any, requests: int | None) -> tuple[Any, Any, int | None]:
    """--replay and --multi-turn: (replay trace, multi-turn spec, requests)."""
    replay_trace = turns = None
    if a.workload_trace is not None:  # `--workload`: its requests, as simulate plans them
        replay_trace = a.workload_trace
        if a.duration_s is None:
            requests = len(replay_trace.times_s)
        for line in check_workload_gaps(replay_trace, requests, a.duration_s):
            print(line, file=sys.stderr)
    elif a.replay is not None:
        from ridgeline.bench.replay import check_replay_gaps, load_replay

        if a.rate is not None or a.dataset != "synthetic" or a.prefix_groups:
            raise RidgelineError("--replay: the trace sets arrival times and lengths; drop "
                                 "--rate, --dataset and --prefix-groups")
        replay_trace = load_replay(a.replay, a.replay_speed)
        if a.requests is None and a.duration_s is None:
            requests = len(replay_trace.times_s)  # the whole trace unless --requests says
        for line in check_replay_gaps(replay_trace, requests, a.duration_s):
            print(line, file=sys.stderr)
    elif a.replay_speed != 1.0:
        raise RidgelineError("--replay-speed: only with --replay")
    if a.multi_turn is not None:
        from ridgeline.bench.multiturn import parse_multi_turn

        turns = parse_multi_turn(a.multi_turn, a.think_time)
        if a.rate is not None or a.replay is not None or a.dataset != "synthetic" or \
                a.prefix_groups or a.workers > 1 or a.ray is not None:
            raise RidgelineError("--multi-turn: a closed loop of conversations in one "
                                 "process; drop --rate, --replay, --dataset, --prefix-groups, "
                                 "--workers and --ray")
        if requests is None:
            raise RidgelineError("--multi-turn: give --requests (the total number of turns)")
    elif a.think_time != "0":
        raise RidgelineError("--think-time: only with --multi-turn")
    return replay_trace, turns, requests


def check_workload_gaps(trace: Any, requests: int | None, duration_s: float | None
                        ) -> list[str]:
    """The replay's gap check, for an open-loop workload (a closed loop has no gaps)."""
    from ridgeline.bench.replay import check_replay_gaps

    return [] if trace.users else check_replay_gaps(trace, requests, duration_s, "--workload")


def _points(a: Any, rate_inf: bool, requests: int | None) -> tuple[list, bool, list, list]:
    """(points, rate sweep?, rates, concurrencies) of --rate/--concurrency."""
    from ridgeline.bench.load_points import sweep_points

    rate_sweep = a.rate is not None and a.rate.strip().lower() == "sweep"
    rates = [] if rate_sweep else split_list(a.rate, "--rate", float)
    concs = split_list(a.concurrency, "--concurrency", int)
    if rate_inf and not concs:
        # vLLM's --request-rate inf: every request at t = 0, at most --max-concurrency in
        # flight; a closed loop at that cap is the same schedule.
        if requests is None:
            raise RidgelineError("--request-rate inf: give --num-prompts (the burst's "
                                 "size) or --max-concurrency")
        concs = [requests]
    if rate_sweep and len(concs) > 1:
        raise RidgelineError("--rate sweep: --concurrency takes one value there (the "
                             "saturation probe's), not a list")
    if len(rates) > 1 and len(concs) > 1:
        raise RidgelineError("--rate/--concurrency: sweep one of them at a time (give the "
                             "other a single value)")
    if not rates and not concs:
        concs = [1]
    return sweep_points(rates, concs, rate_sweep=rate_sweep), rate_sweep, rates, concs


def _check_simple(a: Any) -> None:
    if a.out_format is not None and a.out_format not in OUT_FORMATS:
        raise field_error("--format", a.out_format, ", ".join(OUT_FORMATS))
    if a.api not in ("completions", "chat"):
        raise field_error("--api", a.api, "completions, chat")
    if a.calibration and a.target != "emulator":
        raise field_error("--calibration", a.calibration, "only with --target emulator")
    if a.target == "url":
        check_base_url(a.base_url)
    if a.prompt_nonce is not None and not 0 <= a.prompt_nonce < 2**32:
        raise field_error("--prompt-nonce", a.prompt_nonce, "an integer in [0, 2**32)")
    if a.slo:
        with contextlib.suppress(ImportError):
            from ridgeline.metrics.slo import parse_slos

            parse_slos(list(a.slo))  # bad SLO text fails now, not after the run
    if a.ray is not None:
        try:
            import ray as _ray  # noqa: F401
        except ImportError:
            raise RidgelineError("--ray: Ray is not installed (pip install ray, or "
                                 "pip install 'ridgeline[ray]')") from None


def build_plan(a: Any, peer: Any) -> CommandPlan:
    """Check every option of `a` (a translated BenchArgs) and build the plan."""
    from ridgeline.bench.client import EndpointConfig
    from ridgeline.bench.dataset import parse_dataset
    from ridgeline.bench.load import LoadSpec
    from ridgeline.bench.load_points import BenchPlan, EmulatorSpec
    from ridgeline.bench.options import (
        check_save_result,
        check_telemetry_interval,
        parse_extra_body,
        parse_metrics_url,
        parse_percentiles,
    )
    from ridgeline.bench.single_run import BenchConfig
    from ridgeline.bench.sizes import check_bench_sizes
    from ridgeline.bench.telemetry import TelemetryConfig
    from ridgeline.workload.lengths import parse_lengths

    _check_simple(a)
    _check_outputs(a)
    body = {**peer.body, **parse_extra_body(a.extra_body)}  # vLLM: the extra body wins
    result_formats = check_save_result(a.save_result)
    pcts = tuple(parse_percentiles(a.metric_percentiles))
    check_telemetry_interval(a.telemetry_interval_ms)
    metrics_url = parse_metrics_url(a.server_metrics)
    if a.prompt_nonce is None:
        from ridgeline.bench.prompts import new_prompt_nonce

        a.prompt_nonce = new_prompt_nonce()  # one per invocation: sweep points differ by index
    requests = a.requests
    if requests is None and a.duration_s is None:
        requests = DEFAULT_REQUESTS  # vLLM and AIPerf also default to a request count
    replay_trace, turns, requests = _load_inputs(a, requests)
    points, rate_sweep, rates, concs = _points(a, peer.rate_inf, requests)
    prompt_dist = parse_lengths(a.prompt, "--prompt")
    output_dist = parse_lengths(a.output, "--output") if a.output is not None else None
    ds = parse_dataset(a.dataset)
    if output_dist is None and ds.kind == "synthetic":
        output_dist = parse_lengths("fixed:256", "--output")
    emulator_model = (a.model or "llama-3.1-8b") if a.target == "emulator" else None
    check_bench_sizes(prompt_dist, output_dist, replay_trace, requests, a.prefix_tokens,
                      emulator_model, a.calibration is not None)
    trace_base, asked = _trace_base(a)
    check_writable(trace_base, "--trace")
    emulator = None
    if a.target == "emulator":
        emulator = EmulatorSpec(model=emulator_model or "", hardware=a.hardware, speed=a.speed,
                                extra_args=tuple(list(a.emulator_arg or []) + (
                                    ["--calibration", a.calibration] if a.calibration
                                    else [])))
    endpoint = EndpointConfig(
        base_url=a.base_url, model=a.model, api=a.api,
        api_key=a.api_key if a.api_key is not None else os.environ.get("OPENAI_API_KEY"),
        headers=parse_headers(a.header), timeout_s=a.timeout_s,
        stall_timeout_s=a.stall_timeout_s, temperature=a.temperature, ignore_eos=a.ignore_eos,
        min_tokens=a.min_tokens, verify_tls=not a.insecure, include_usage=not a.no_usage,
        extra_body=body, stream=not a.non_streaming)
    run = BenchConfig(
        endpoint=endpoint,
        load=LoadSpec(concurrency=points[0].concurrency or 1, arrival=None, requests=requests,
                      duration_s=a.duration_s, warmup=a.warmup),
        trace_path=trace_base, dataset=ds, prompt=prompt_dist, output=output_dist,
        prefix_groups=a.prefix_groups, prefix_tokens=a.prefix_tokens, tokenizer=a.tokenizer,
        seed=a.seed, grace_s=a.grace_s, max_error_rate=a.max_error_rate, workers=a.workers,
        ray_address=a.ray,
        progress=a.progress if a.progress is not None else sys.stderr.isatty(),
        header_extra={"request_rate": "inf"} if peer.rate_inf else {},
        prompt_nonce=a.prompt_nonce,
        telemetry=TelemetryConfig(enabled=not a.no_server_metrics, url=metrics_url,
                                  interval_s=a.telemetry_interval_ms / 1e3,
                                  gpu=False if emulator is not None else None),
        replay=replay_trace, multi_turn=turns, cancel_rate_pct=a.cancel_rate_pct,
        cancel_delay_s=a.cancel_delay_s, slos=list(a.slo or []))
    plan = BenchPlan(
        run=run, points=points, arrival=a.arrival, rate_sweep=rate_sweep,
        replay_concurrency=concs[0] if a.concurrency else None, emulator=emulator,
        result_formats=result_formats, percentiles=pcts, result_spec=peer.result_spec,
        result_folder=None if asked else ".",
        ready_check_timeout_s=a.ready_check_timeout_s)
    out_format = "json" if a.json_out else a.out_format or default_format()
    return CommandPlan(plan=plan, out_format=out_format,
                       requests=requests, duration_s=a.duration_s, trace_asked=asked,
                       sweep_rates=len(rates) > 1 or len(concs) > 1, report=a.report,
                       artifact_dir=a.artifact_dir, output_path=a.output_path,
                       rate_type=a.guidellm_profile)


__all__ = ["DEFAULT_REQUESTS", "CommandPlan", "build_plan", "check_base_url",
           "parse_headers", "split_list", "trace_cache_dir"]

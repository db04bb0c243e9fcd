"""`ridgeline bench`: load-test any OpenAI-compatible endpoint (or the built-in emulator).

Only typer and the standard library are imported here; the load generator is imported
inside the command.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated, Any

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


def _headers(items: list[str] | None) -> tuple[tuple[str, str], ...]:
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
    api: Annotated[str | None, typer.Option("--api", help="completions (/v1/completions) or "
                                            "chat (/v1/chat/completions).")] = None,
    api_key: Annotated[str | None, typer.Option("--api-key", help="Bearer token (default: "
                                                "$OPENAI_API_KEY).")] = None,
    header: Annotated[list[str] | None, typer.Option("--header", help="Extra HTTP header "
                                                     "'Name: value' or KEY=VALUE (vLLM's; "
                                                     "repeatable, or several after one "
                                                     "--header).")] = None,
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
    non_streaming: Annotated[bool, typer.Option(
        "--non-streaming", help="Send stream=false: one JSON answer per request, so TTFT = "
        "E2E and TPOT/ITL are undefined (vLLM's --no-stream is about dataset loading and is "
        "not this).")] = False,
    no_usage: Annotated[bool, typer.Option("--no-usage", help="Do not ask for "
                                           "stream_options.include_usage.")] = False,
    concurrency: Annotated[str | None, typer.Option(
        "--concurrency", "-c", "--max-concurrency", help="Closed loop at this many in "
        "flight, or with --rate the cap on in-flight requests. A list (1,8,32) sweeps.")] = None,
    rate: Annotated[str | None, typer.Option(
        "--rate", "-r", "--request-rate", help="Open loop at this many requests/s. A list "
        "(1,2,4,8) sweeps; 'inf' sends every request at once (vLLM's burst; at most "
        "--concurrency in flight); 'sweep' measures saturation (closed loop at --concurrency, "
        "default 64) then sweeps 20%-110% of it, as simulate does.")
    ] = None,
    arrival: Annotated[str, typer.Option(
        "--arrival", help="poisson, gamma:cv=2, constant, ramp:start=1,end=16, "
        "replay:path=FILE.")] = "poisson",
    requests: Annotated[int | None, typer.Option(
        "--requests", "-n", "--num-prompts", "--request-count", min=1,
        help=f"Requests per point (default {DEFAULT_REQUESTS} when --duration is not "
        "given either).")] = None,
    duration_s: Annotated[float | None, typer.Option(
        "--duration", callback=number(gt=0), help="Seconds per point; with --requests, "
        "whichever comes first.")] = None,
    warmup: Annotated[int, typer.Option("--warmup", "--num-warmups", min=0,
                                        help="Warm-up requests before each point, not "
                                        "recorded.")] = 0,
    prompt: Annotated[str | None, typer.Option("--prompt", help="Prompt length distribution "
                                        "(simulate's syntax), e.g. "
                                        "lognormal:mean=1000,sigma=0.5 (default "
                                        "fixed:256).")] = None,
    output: Annotated[str | None, typer.Option("--output", help="Output length (max_tokens) "
                                               "distribution; default fixed:256, or the "
                                               "dataset's own lengths.")] = None,
    dataset: Annotated[str | None, typer.Option(
        "--dataset", help="synthetic, sharegpt:path=FILE, jsonl:path=FILE, "
        "sonnet:path=FILE,input=550,prefix=200 (default synthetic).")] = None,
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
        "(`vllm bench serve --save-result` JSON; a bare --save-result, as vLLM's, means vllm "
        "and names the file as vLLM does) or aiperf-csv (repeatable).")] = None,
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
    backend: Annotated[str | None, typer.Option(
        "--backend", help="vLLM's: openai, vllm, sglang, lmdeploy, llama.cpp (completions) "
        "or openai-chat (chat); sets --api.")] = None,
    endpoint_path: Annotated[str | None, typer.Option(
        "--endpoint", help="vLLM's: /v1/completions or /v1/chat/completions; sets --api."
    )] = None,
    host: Annotated[str | None, typer.Option("--host", help="vLLM's: server host (with "
                                             "--port, instead of --base-url).")] = None,
    port: Annotated[int | None, typer.Option("--port", min=1, max=65535,
                                             help="vLLM's: server port.")] = None,
    served_model_name: Annotated[str | None, typer.Option(
        "--served-model-name", help="vLLM's: the model name sent in requests (default "
        "--model).")] = None,
    dataset_name: Annotated[str | None, typer.Option(
        "--dataset-name", help="vLLM's: random, sharegpt, sonnet, hf or custom (hf and custom: "
        "a local .json/.jsonl --dataset-path).")] = None,
    dataset_path: Annotated[str | None, typer.Option(
        "--dataset-path", help="vLLM's: the sharegpt/sonnet/hf/custom file.")] = None,
    input_len: Annotated[int | None, typer.Option(
        "--input-len", min=1, help="vLLM's: sets --random-input-len.")] = None,
    output_len: Annotated[int | None, typer.Option(
        "--output-len", min=1, help="vLLM's: every dataset's output length.")] = None,
    random_input_len: Annotated[int, typer.Option(
        "--random-input-len", min=1, help="vLLM's random dataset: prompt tokens.")] = 1024,
    random_output_len: Annotated[int, typer.Option(
        "--random-output-len", min=1, help="vLLM's random dataset: output tokens.")] = 128,
    random_range_ratio: Annotated[float, typer.Option(
        "--random-range-ratio", callback=number(ge=0, lt=1), help="vLLM's random dataset: "
        "lengths uniform on [L(1-r), L(1+r)], r in [0, 1).")] = 0.0,
    random_prefix_len: Annotated[int, typer.Option(
        "--random-prefix-len", min=0, help="vLLM's random dataset: tokens of one prefix "
        "every prompt shares.")] = 0,
    sharegpt_output_len: Annotated[int | None, typer.Option(
        "--sharegpt-output-len", min=1, help="vLLM's sharegpt dataset: output tokens.")] = None,
    sonnet_input_len: Annotated[int, typer.Option(
        "--sonnet-input-len", min=1, help="vLLM's sonnet dataset: prompt tokens.")] = 550,
    sonnet_output_len: Annotated[int, typer.Option(
        "--sonnet-output-len", min=1, help="vLLM's sonnet dataset: output tokens.")] = 150,
    sonnet_prefix_len: Annotated[int, typer.Option(
        "--sonnet-prefix-len", min=0, help="vLLM's sonnet dataset: shared prefix tokens.")
    ] = 200,
    hf_output_len: Annotated[int | None, typer.Option(
        "--hf-output-len", min=1, help="vLLM's hf dataset: output tokens.")] = None,
    custom_output_len: Annotated[int, typer.Option(
        "--custom-output-len", min=1, help="vLLM's custom dataset: output tokens.")] = 256,
    burstiness: Annotated[float, typer.Option(
        "--burstiness", help="vLLM's: gamma arrivals of shape B (CV = 1/sqrt(B)); 1 is "
        "Poisson. Only with a finite --request-rate.")] = 1.0,
    percentile_metrics: Annotated[str | None, typer.Option(
        "--percentile-metrics", help="vLLM's: metrics with statistics in the --save-result "
        "vllm file, a comma list of ttft,tpot,itl,e2el (default all four).")] = None,
    goodput: Annotated[list[str] | None, typer.Option(
        "--goodput", help="vLLM's: an SLO as ttft:MS, tpot:MS or e2el:MS (repeatable); the "
        "same as --slo ttft_ms:MS.")] = None,
    result_dir: Annotated[str | None, typer.Option(
        "--result-dir", help="vLLM's: folder of the --save-result vllm file.")] = None,
    result_filename: Annotated[str | None, typer.Option(
        "--result-filename", help="vLLM's: name of the --save-result vllm file (default: "
        "vLLM's {label}-{rate}qps[-concurrency{N}]-{model}-{date}.json).")] = None,
    append_result: Annotated[bool, typer.Option(
        "--append-result", help="vLLM's: append the result to the file (one JSON object "
        "per line); implies --save-result vllm.")] = False,
    save_detailed: Annotated[bool, typer.Option(
        "--save-detailed", help="vLLM's: per-request lists in the result file (always "
        "written: ridgeline's importer reads them).")] = False,
    metadata: Annotated[list[str] | None, typer.Option(
        "--metadata", help="vLLM's: KEY=VALUE saved in the result file (several after one "
        "--metadata, or repeated).")] = None,
    label: Annotated[str | None, typer.Option(
        "--label", help="vLLM's: the result's label and file-name prefix (default "
        "--backend).")] = None,
    ready_check_timeout_s: Annotated[int, typer.Option(
        "--ready-check-timeout-sec", min=0, help="vLLM's: wait up to this many seconds for "
        "the server to answer /v1/models (0: no wait).")] = 0,
    top_p: Annotated[float | None, typer.Option("--top-p", help="vLLM's: top_p in every "
                                                "request.")] = None,
    top_k: Annotated[int | None, typer.Option("--top-k", help="vLLM's: top_k.")] = None,
    min_p: Annotated[float | None, typer.Option("--min-p", help="vLLM's: min_p.")] = None,
    frequency_penalty: Annotated[float | None, typer.Option(
        "--frequency-penalty", help="vLLM's: frequency_penalty.")] = None,
    presence_penalty: Annotated[float | None, typer.Option(
        "--presence-penalty", help="vLLM's: presence_penalty.")] = None,
    repetition_penalty: Annotated[float | None, typer.Option(
        "--repetition-penalty", help="vLLM's: repetition_penalty.")] = None,
    logprobs: Annotated[int | None, typer.Option("--logprobs", min=0, help="vLLM's: "
                                                 "logprobs per token.")] = None,
    cancel_rate_pct: Annotated[float, typer.Option(
        "--request-cancellation-rate", callback=number(ge=0, le=100),
        help="AIPerf's: percent of requests to cancel --request-cancellation-delay seconds "
        "after sending (status cutoff, error_kind cancelled).")] = 0.0,
    cancel_delay_s: Annotated[float, typer.Option(
        "--request-cancellation-delay", callback=number(ge=0),
        help="AIPerf's: seconds after sending at which a cancelled request is cut.")] = 0.0,
    guidellm_profile: Annotated[str | None, typer.Option(
        "--guidellm-profile", hidden=True, help="GuideLLM's --profile NAME (argv rewrites "
        "it to this).")] = None,
    vllm_profile: Annotated[bool, typer.Option("--vllm-profile", hidden=True)] = False,
    vllm_result_naming: Annotated[bool, typer.Option("--vllm-result-naming", hidden=True)
                                  ] = False,
    disable_tqdm: Annotated[bool, typer.Option("--disable-tqdm", help="vLLM's: the same as "
                                               "--no-progress.")] = False,
    json_out: JsonOpt = False,
    seed: SeedOpt = 0,
    report: ReportOpt = None,
) -> None:
    """Load-test an OpenAI-compatible endpoint; write one trace per load point."""
    import contextlib
    import json
    import sys

    from rich.markup import escape

    from ridgeline.bench import peer_flags as pf
    from ridgeline.bench.client import EndpointConfig
    from ridgeline.bench.dataset import parse_dataset
    from ridgeline.bench.summary import (
        print_summary,
        print_sweep,
    )
    from ridgeline.bench.telemetry import TelemetryConfig
    from ridgeline.metrics.telemetry import telemetry_lines
    from ridgeline.workload.lengths import parse_lengths

    if vllm_profile:
        raise RidgelineError("--profile: vLLM's torch profiler is not driven by ridgeline "
                             "bench; for GuideLLM's rate profiles give a name: "
                             f"{', '.join(pf.GUIDELLM_PROFILES)}")
    flag_api = pf.backend_api(backend, endpoint_path)
    if api is not None and flag_api is not None and api != flag_api:
        raise RidgelineError(f"--api {api} disagrees with --backend/--endpoint ({flag_api})")
    api = api or flag_api or "completions"
    if api not in ("completions", "chat"):
        raise field_error("--api", api, "completions, chat")
    if host is not None or port is not None:
        base_url = f"http://{host or '127.0.0.1'}:{port or 8000}"  # vLLM's defaults
    if served_model_name:
        model = served_model_name
    sampling = {k: v for k, v in (("top_p", top_p), ("top_k", top_k), ("min_p", min_p),
                                  ("frequency_penalty", frequency_penalty),
                                  ("presence_penalty", presence_penalty),
                                  ("repetition_penalty", repetition_penalty),
                                  ("logprobs", logprobs)) if v is not None}
    if guidellm_profile is not None:
        concurrency, rate = _guidellm_profile(guidellm_profile, rate, concurrency)
        if guidellm_profile == "constant" and arrival == "poisson":
            arrival = "constant"  # GuideLLM's constant: evenly spaced requests
    rate_inf = rate is not None and rate.strip().lower() in ("inf", "infinity")
    if rate_inf:
        rate = None
    if dataset_name is not None:
        if dataset is not None:
            raise RidgelineError("--dataset-name: give it or --dataset, not both")
        dataset, prompt_v, output_v, prefix = _vllm_dataset(
            dataset_name, dataset_path, input_len or random_input_len,
            output_len or random_output_len, random_range_ratio, random_prefix_len,
            output_len or sharegpt_output_len, sonnet_input_len,
            output_len or sonnet_output_len, sonnet_prefix_len, output_len or hf_output_len,
            output_len or custom_output_len)
        for flag, ours, theirs in (("--prompt", prompt, prompt_v), ("--output", output,
                                                                    output_v)):
            if ours is not None and theirs is not None:
                raise RidgelineError(f"{flag}: the --dataset-name {dataset_name} lengths "
                                     "already set it; drop one")
        prompt = prompt or prompt_v
        output = output or output_v
        if prefix:
            if prefix_groups:
                raise RidgelineError("--random-prefix-len: give it or --prefix-groups")
            prefix_groups, prefix_tokens = 1, prefix
        if dataset_name == "random":
            ignore_eos = True  # vLLM: random datasets ignore EOS on OpenAI backends
    elif dataset_path is not None:
        raise RidgelineError("--dataset-path: only with --dataset-name")
    dataset = dataset or "synthetic"
    prompt = prompt or "fixed:256"
    if burstiness != 1.0:
        if not burstiness > 0:
            raise field_error("--burstiness", burstiness, "a number > 0")
        if arrival != "poisson":
            raise RidgelineError("--burstiness: give it or --arrival, not both")
        arrival = f"gamma:cv={1 / burstiness ** 0.5:.12g}"  # vLLM: gamma of shape B
    for g in goodput or []:
        slo = [*(slo or []), _goodput_slo(g)]
    metrics_sel = pf.parse_percentile_metrics(percentile_metrics)
    meta = pf.parse_key_values(metadata, "--metadata")
    if append_result and not save_result:
        save_result = ["vllm"]
    vllm_naming = vllm_result_naming  # a bare --save-result (vLLM's flag): vLLM's file name
    if disable_tqdm:
        progress = False
    result_spec = pf.ResultFileSpec(
        directory=result_dir, filename=result_filename, vllm_naming=vllm_naming,
        append=append_result, label=label, backend=backend, metadata=tuple(meta.items()),
        percentile_metrics=metrics_sel)
    del save_detailed  # always detailed: the lists are what ridgeline's importer reads
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

    body_extra = {**sampling, **parse_extra_body(extra_body)}  # vLLM: extra body wins
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
    if rate_inf:
        # vLLM's --request-rate inf: every request at t = 0, at most --max-concurrency in
        # flight; a closed loop at that cap is the same schedule.
        if not concs:
            if requests is None:
                raise RidgelineError("--request-rate inf: give --num-prompts (the burst's "
                                     "size) or --max-concurrency")
            concs = [requests]
        header_rate_inf = True
    else:
        header_rate_inf = False
    if rate_sweep and len(concs) > 1:
        raise RidgelineError("--rate sweep: --concurrency takes one value there (the "
                             "saturation probe's), not a list")
    if len(rates) > 1 and len(concs) > 1:
        raise RidgelineError("--rate/--concurrency: sweep one of them at a time (give the "
                             "other a single value)")
    if not rates and not concs:
        concs = [1]
    prompt_dist = parse_lengths(prompt, "--prompt")
    if result_dir is not None:
        check_writable(str(Path(result_dir) / "probe.json"), "--result-dir")
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
    from ridgeline.bench.session import (
        BenchPlan,
        EmulatorSpec,
        SessionHooks,
        run_plan,
        sweep_points,
    )

    emulator = None
    if target == "emulator":
        try:
            import ridgeline.serve.launcher  # noqa: F401
        except ImportError:
            raise RidgelineError("--target emulator: the emulator (ridgeline.serve) is not "
                                 "available in this installation") from None
        emulator = EmulatorSpec(model=model or "llama-3.1-8b", hardware=hardware, speed=speed,
                                extra_args=tuple(list(emulator_arg or []) + (
                                    ["--calibration", calibration] if calibration else [])))
    plan = BenchPlan(
        endpoint=EndpointConfig(
            base_url=base_url, model=model, api=api,
            api_key=api_key if api_key is not None else os.environ.get("OPENAI_API_KEY"),
            headers=_headers(header), timeout_s=timeout_s, stall_timeout_s=stall_timeout_s,
            temperature=temperature, ignore_eos=ignore_eos, min_tokens=min_tokens,
            verify_tls=not insecure, include_usage=not no_usage, extra_body=body_extra,
            stream=not non_streaming),
        points=sweep_points(rates, concs, rate_sweep=rate_sweep), trace_base=trace_base,
        arrival=arrival, requests=requests, duration_s=duration_s, warmup=warmup, dataset=ds,
        prompt=prompt_dist, output=output_dist, prefix_groups=prefix_groups,
        prefix_tokens=prefix_tokens, tokenizer=tokenizer, seed=seed, grace_s=grace_s,
        max_error_rate=max_error_rate, workers=workers, ray_address=ray,
        progress=progress if progress is not None else sys.stderr.isatty(),
        prompt_nonce=prompt_nonce, replay=replay_trace, multi_turn=turns,
        telemetry=TelemetryConfig(enabled=not no_server_metrics, url=metrics_url,
                                  interval_s=telemetry_interval_ms / 1e3),
        rate_sweep=rate_sweep, replay_concurrency=concs[0] if concurrency else None,
        emulator=emulator, header_extra={"request_rate": "inf"} if header_rate_inf else {},
        slos=slos, result_formats=result_formats, percentiles=pcts, result_spec=result_spec,
        ready_check_timeout_s=ready_check_timeout_s, cancel_rate_pct=cancel_rate_pct,
        cancel_delay_s=cancel_delay_s)
    from ridgeline.report.tables import out_for

    console = out_for(stderr=json_out)  # plain full-width tables when piped
    # Say what runs and for how long before the first request: a run that shows no
    # progress (stderr not a terminal) must still say it is working, and on what.
    bound = " or ".join(b for b in (f"{requests} requests" if requests else "",
                                    f"{duration_s:g} s" if duration_s else "") if b)

    def announce(cfg: Any) -> None:
        typer.echo(f"bench: {cfg.endpoint.base_url} model {cfg.endpoint.model}: {bound}"
                   f"{' (whichever first)' if ' or ' in bound else ''}; trace "
                   f"{cfg.trace_path}", err=True)

    def done(p: Any) -> None:
        if not plan.sweeping and not json_out:
            print_summary(p.analysis, p.book, [*p.run.notes, f"trace: {p.run.trace_path}"],
                          console)
            for line in telemetry_lines(p.telemetry):
                console.print(line, highlight=False)

    hooks = SessionHooks(
        warn=lambda m: console.print(f"[yellow]warning:[/] {escape(m)}", highlight=False),
        on_start=announce,
        on_point=lambda pt, path: console.print(f"[bold]{pt.label}[/bold] → {path}"),
        on_done=done, on_file=lambda path: console.print(f"result: {path}", highlight=False),
        on_error=lambda m: console.print(f"[red]error:[/] {m}"))
    outcome = run_plan(plan, hooks)
    results = [p.to_dict() for p in outcome.points]
    rows = [p.row for p in outcome.points]
    knee, sweeping, sweep_runs = outcome.knee, plan.sweeping, outcome.sweep_runs
    capacity, exit_code, url = outcome.capacity_req_s, outcome.exit_code, outcome.base_url
    if sweeping and not json_out:
        print_sweep(rows, knee, console)
        if sweep_runs:
            from ridgeline.bench.rate_sweep import print_rate_sweep

            print_rate_sweep(capacity, sweep_runs, slos, [f"measured against {url}"])
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


def _goodput_slo(text: str) -> str:
    """vLLM's `--goodput ttft:500` (ms) as our `--slo ttft_ms:500`."""
    names = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2el": "e2e_ms"}
    name, sep, value = text.partition(":")
    if not sep or name not in names:
        raise field_error("--goodput", text, "ttft:MS, tpot:MS or e2el:MS")
    return f"{names[name]}:{value}"


def _guidellm_profile(name: str, rate: str | None, concurrency: str | None
                      ) -> tuple[str | None, str | None]:
    """GuideLLM's `--profile NAME --rate R` as our (--concurrency, --rate)."""
    from ridgeline.bench.peer_flags import GUIDELLM_PROFILES

    if name == "synchronous":
        return "1", None
    if name == "concurrent":
        if rate is None:
            raise RidgelineError("--profile concurrent: give --rate (GuideLLM: the "
                                 "concurrency, one or a list)")
        return rate, None
    if name == "throughput":
        return concurrency, "inf"
    if name in ("constant", "poisson"):
        if rate is None:
            raise RidgelineError(f"--profile {name}: give --rate (requests/s)")
        return concurrency, rate
    if name == "sweep":
        return concurrency, "sweep"
    raise field_error("--profile", name, ", ".join(GUIDELLM_PROFILES))


def _vllm_dataset(name: str, path: str | None, rin: int, rout: int, ratio: float,
                  rprefix: int, sharegpt_out: int | None, son_in: int, son_out: int,
                  son_prefix: int, hf_out: int | None, custom_out: int
                  ) -> tuple[str, str | None, str | None, int]:
    """vLLM's `--dataset-name` and its options as (--dataset, --prompt, --output, prefix)."""
    from ridgeline.bench.peer_flags import VLLM_DATASETS, random_lengths

    if name not in VLLM_DATASETS:
        raise field_error("--dataset-name", name, ", ".join(VLLM_DATASETS))
    if name == "random":
        if path is not None:
            raise RidgelineError("--dataset-path: not with --dataset-name random (vLLM "
                                 "refuses it too)")
        return "synthetic", random_lengths(rin, ratio), random_lengths(rout, ratio), rprefix
    if path is None:
        raise RidgelineError(f"--dataset-name {name}: give --dataset-path FILE")
    if name == "sharegpt":
        return (f"sharegpt:path={path}", None,
                f"fixed:{sharegpt_out}" if sharegpt_out else None, 0)
    if name == "sonnet":
        return (f"sonnet:path={path},input={son_in},prefix={son_prefix}", None,
                f"fixed:{son_out}", 0)
    if name == "custom":
        return f"jsonl:path={path}", None, f"fixed:{custom_out}", 0
    # hf: a local file only (no download): JSONL rows or a ShareGPT-style JSON list.
    kind = "jsonl" if path.endswith(".jsonl") else "sharegpt"
    return f"{kind}:path={path}", None, f"fixed:{hf_out}" if hf_out else None, 0


def register(app: typer.Typer) -> None:
    app.command("bench", help="Load-test an OpenAI-compatible endpoint (or the built-in "
                "emulator) and write one trace per load point." + _EXAMPLES)(bench)

"""The options of `ridgeline bench`, one `Annotated` alias each (the command's signature
is then one line per option). ridgeline's own options, then vLLM's (`vllm bench serve`),
AIPerf's (`aiperf profile`) and GuideLLM's (`guidellm benchmark`) under their names; the
translation of the peers' values is in `ridgeline.bench.peer_flags`.

Only typer and the standard library are imported here.
"""

from __future__ import annotations

from typing import Annotated

import typer

from ridgeline.commands.options import number

DEFAULT_REQUESTS = 100

BaseUrlOpt = Annotated[
    str,
    typer.Option(
        "--base-url", help="Server root, e.g. http://127.0.0.1:8000 (a trailing /v1 is fine)."
    ),
]
TargetOpt = Annotated[
    str,
    typer.Option(
        "--target",
        help="'url' (--base-url), 'emulator' "
        "(start `ridgeline serve` on a free loopback port, "
        "benchmark it, stop it), or a URL (GuideLLM's "
        "--target: the same as --base-url URL).",
    ),
]
ModelOpt = Annotated[
    str,
    typer.Option(
        "--model",
        "-m",
        help="Model name sent in requests "
        "(default: the server's first /v1/models entry; for "
        "--target emulator a catalog model).",
    ),
]
HardwareOpt = Annotated[str, typer.Option("--hardware", "-g", help="Emulator only: catalog GPU.")]
SpeedOpt = Annotated[
    float,
    typer.Option(
        "--speed",
        callback=number(gt=0),
        help="Emulator only: time scale (2 = twice as fast as the model predicts).",
    ),
]
EmulatorArgOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--emulator-arg",
        help="Emulator only: one more `ridgeline serve` argument "
        "(repeatable), e.g. --emulator-arg=--max-num-seqs --emulator-arg=64.",
    ),
]
ApiOpt = Annotated[
    str | None,
    typer.Option("--api", help="completions (/v1/completions) or chat (/v1/chat/completions)."),
]
ApiKeyOpt = Annotated[
    str | None, typer.Option("--api-key", help="Bearer token (default: $OPENAI_API_KEY).")
]
HeaderOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--header",
        help="Extra HTTP header "
        "'Name: value' or KEY=VALUE (vLLM's; "
        "repeatable, or several after one "
        "--header).",
    ),
]
TimeoutSOpt = Annotated[
    float, typer.Option("--timeout", callback=number(gt=0), help="Per-request limit, seconds.")
]
StallTimeoutSOpt = Annotated[
    float | None,
    typer.Option(
        "--stall-timeout",
        callback=number(gt=0),
        help="Fail a request after this many seconds without data.",
    ),
]
IgnoreEosOpt = Annotated[
    bool,
    typer.Option(
        "--ignore-eos", help="Send ignore_eos=true (vLLM/SGLang) so outputs reach max_tokens."
    ),
]
MinTokensOpt = Annotated[
    bool,
    typer.Option(
        "--min-tokens", help="Send min_tokens=max_tokens (vLLM) to force exact output lengths."
    ),
]
TemperatureOpt = Annotated[
    float | None, typer.Option("--temperature", callback=number(ge=0), help="Sampling temperature.")
]
InsecureOpt = Annotated[bool, typer.Option("--insecure", help="Do not verify TLS certificates.")]
NonStreamingOpt = Annotated[
    bool,
    typer.Option(
        "--non-streaming",
        help="Send stream=false: one JSON answer per request, so TTFT = "
        "E2E and TPOT/ITL are undefined (vLLM's --no-stream is about dataset loading and is "
        "not this).",
    ),
]
NoUsageOpt = Annotated[
    bool, typer.Option("--no-usage", help="Do not ask for stream_options.include_usage.")
]
ConcurrencyOpt = Annotated[
    str | None,
    typer.Option(
        "--concurrency",
        "-c",
        "--max-concurrency",
        help="Closed loop at this many in "
        "flight, or with --rate the cap on in-flight requests. A list (1,8,32) sweeps.",
    ),
]
RateOpt = Annotated[
    str | None,
    typer.Option(
        "--rate",
        "-r",
        "--request-rate",
        help="Open loop at this many requests/s. A list "
        "(1,2,4,8) sweeps; 'inf' sends every request at once (vLLM's burst; at most "
        "--concurrency in flight); 'sweep' measures saturation (closed loop at --concurrency, "
        "default 64) then sweeps 20%-110% of it, as simulate does.",
    ),
]
ArrivalOpt = Annotated[
    str,
    typer.Option(
        "--arrival", help="poisson, gamma:cv=2, constant, ramp:start=1,end=16, replay:path=FILE."
    ),
]
RequestsOpt = Annotated[
    int | None,
    typer.Option(
        "--requests",
        "-n",
        "--num-prompts",
        "--request-count",
        "--max-requests",
        min=1,
        help=f"Requests per point (default {DEFAULT_REQUESTS} when --duration is not "
        "given either).",
    ),
]
DurationSOpt = Annotated[
    float | None,
    typer.Option(
        "--duration",
        "--benchmark-duration",
        "--max-seconds",
        callback=number(gt=0),
        help="Seconds per point; with --requests, whichever comes first.",
    ),
]
WarmupOpt = Annotated[
    int,
    typer.Option(
        "--warmup",
        "--num-warmups",
        "--warmup-request-count",
        min=0,
        help="Warm-up requests before each point, not recorded.",
    ),
]
PromptOpt = Annotated[
    str | None,
    typer.Option(
        "--prompt",
        help="Prompt length distribution "
        "(simulate's syntax), e.g. "
        "lognormal:mean=1000,sigma=0.5 (default "
        "fixed:256).",
    ),
]
OutputOpt = Annotated[
    str | None,
    typer.Option(
        "--output",
        help="Output length (max_tokens) "
        "distribution; default fixed:256, or the "
        "dataset's own lengths.",
    ),
]
DatasetOpt = Annotated[
    str | None,
    typer.Option(
        "--dataset",
        help="synthetic, sharegpt:path=FILE, jsonl:path=FILE, "
        "sonnet:path=FILE,input=550,prefix=200 (default synthetic).",
    ),
]
PrefixGroupsOpt = Annotated[
    int, typer.Option("--prefix-groups", min=0, help="Shared-prefix groups (prefix caching).")
]
PrefixTokensOpt = Annotated[
    int, typer.Option("--prefix-tokens", min=0, help="Tokens in each shared prefix.")
]
TokenizerOpt = Annotated[
    str | None,
    typer.Option(
        "--tokenizer",
        help="The served model's tokenizer: a tokenizer.json, a folder "
        "holding one, a Hugging Face model id (org/name) or tiktoken:<encoding>; synthetic "
        "prompts then hold exactly N of its tokens, and it counts output when the server "
        "sends no usage (pip install 'ridgeline[tokenizer]').",
    ),
]
MaxErrorRateOpt = Annotated[
    float | None,
    typer.Option(
        "--max-error-rate",
        callback=number(ge=0, le=1),
        help="Abort when more than this fraction of finished requests failed (checked after 20).",
    ),
]
GraceSOpt = Annotated[
    float,
    typer.Option(
        "--grace",
        callback=number(ge=0),
        help="Seconds requests in flight may finish after Ctrl-C or the duration limit.",
    ),
]
WorkersOpt = Annotated[
    int, typer.Option("--workers", min=1, max=1024, help="Client processes on this machine.")
]
RayOpt = Annotated[
    str | None,
    typer.Option(
        "--ray",
        help="Spread client workers over a Ray cluster: an address, or 'local' to start one.",
    ),
]
ProgressOpt = Annotated[
    bool | None,
    typer.Option(
        "--progress/--no-progress", help="Live progress (default: when stderr is a terminal)."
    ),
]
ExtraBodyOpt = Annotated[
    str | None,
    typer.Option(
        "--extra-body",
        help="JSON object merged into every request body (sampling "
        "parameters, chat_template_kwargs, engine fields), e.g. '{\"top_k\": 20}'.",
    ),
]
PromptNonceOpt = Annotated[
    int | None,
    typer.Option(
        "--prompt-nonce",
        help="Repeat a run's prompt texts exactly (the trace "
        "header's dataset.prompt_nonce); default: fresh texts every run, so no prompt is "
        "answered from a cache it warmed.",
    ),
]
ServerMetricsOpt = Annotated[
    str | None,
    typer.Option(
        "--server-metrics",
        help="Prometheus URL to scrape during the run (default: the "
        "target's /metrics, auto-detected).",
    ),
]
NoServerMetricsOpt = Annotated[
    bool,
    typer.Option("--no-server-metrics", help="Do not scrape server metrics or sample the GPU."),
]
TelemetryIntervalMsOpt = Annotated[
    float,
    typer.Option("--telemetry-interval-ms", help="Server-metrics and GPU sampling period, ms."),
]
SaveResultOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--save-result",
        help="Also write a peer's result file next to each trace: vllm "
        "(`vllm bench serve --save-result` JSON; a bare --save-result, as vLLM's, means vllm "
        "and names the file as vLLM does) or aiperf-csv (repeatable).",
    ),
]
ReplayOpt = Annotated[
    str | None,
    typer.Option(
        "--replay",
        help="Replay a production trace: BurstGPT CSV or Mooncake JSONL "
        "(arrival times, input/output lengths, Mooncake's shared blocks).",
    ),
]
ReplaySpeedOpt = Annotated[
    float, typer.Option("--replay-speed", help="Replay time scale: 2 sends twice as fast.")
]
MultiTurnOpt = Annotated[
    int | None,
    typer.Option(
        "--multi-turn",
        help="Conversations of this many turns; each turn carries the "
        "history (prefix caching on purpose). --concurrency = conversations at once.",
    ),
]
ThinkTimeOpt = Annotated[
    str,
    typer.Option(
        "--think-time",
        help="Multi-turn: seconds between a reply and the next turn, e.g. exponential:mean=2.",
    ),
]
MetricPercentilesOpt = Annotated[
    str,
    typer.Option(
        "--metric-percentiles",
        help="Percentiles in the --save-result vllm file, e.g. 50,90,99 (as vLLM's option).",
    ),
]
BackendOpt = Annotated[
    str | None,
    typer.Option(
        "--backend",
        help="vLLM's: openai, vllm, sglang, lmdeploy, llama.cpp (completions) "
        "or openai-chat (chat); sets --api.",
    ),
]
EndpointPathOpt = Annotated[
    str | None,
    typer.Option("--endpoint", help="vLLM's: /v1/completions or /v1/chat/completions; sets --api."),
]
HostOpt = Annotated[
    str | None,
    typer.Option("--host", help="vLLM's: server host (with --port, instead of --base-url)."),
]
PortOpt = Annotated[
    int | None, typer.Option("--port", min=1, max=65535, help="vLLM's: server port.")
]
ServedModelNameOpt = Annotated[
    str | None,
    typer.Option(
        "--served-model-name", help="vLLM's: the model name sent in requests (default --model)."
    ),
]
DatasetNameOpt = Annotated[
    str | None,
    typer.Option(
        "--dataset-name",
        help="vLLM's: random, sharegpt, sonnet, hf or custom (hf and custom: "
        "a local .json/.jsonl --dataset-path).",
    ),
]
DatasetPathOpt = Annotated[
    str | None, typer.Option("--dataset-path", help="vLLM's: the sharegpt/sonnet/hf/custom file.")
]
InputLenOpt = Annotated[
    int | None, typer.Option("--input-len", min=1, help="vLLM's: sets --random-input-len.")
]
OutputLenOpt = Annotated[
    int | None, typer.Option("--output-len", min=1, help="vLLM's: every dataset's output length.")
]
RandomInputLenOpt = Annotated[
    int, typer.Option("--random-input-len", min=1, help="vLLM's random dataset: prompt tokens.")
]
RandomOutputLenOpt = Annotated[
    int, typer.Option("--random-output-len", min=1, help="vLLM's random dataset: output tokens.")
]
RandomRangeRatioOpt = Annotated[
    float,
    typer.Option(
        "--random-range-ratio",
        callback=number(ge=0, lt=1),
        help="vLLM's random dataset: lengths uniform on [L(1-r), L(1+r)], r in [0, 1).",
    ),
]
RandomPrefixLenOpt = Annotated[
    int,
    typer.Option(
        "--random-prefix-len",
        "--common-prefix-len",
        min=0,
        help="vLLM's random dataset: tokens of one prefix every prompt shares "
        "(--common-prefix-len: vLLM's newer name).",
    ),
]
SharegptOutputLenOpt = Annotated[
    int | None,
    typer.Option("--sharegpt-output-len", min=1, help="vLLM's sharegpt dataset: output tokens."),
]
SonnetInputLenOpt = Annotated[
    int, typer.Option("--sonnet-input-len", min=1, help="vLLM's sonnet dataset: prompt tokens.")
]
SonnetOutputLenOpt = Annotated[
    int, typer.Option("--sonnet-output-len", min=1, help="vLLM's sonnet dataset: output tokens.")
]
SonnetPrefixLenOpt = Annotated[
    int,
    typer.Option("--sonnet-prefix-len", min=0, help="vLLM's sonnet dataset: shared prefix tokens."),
]
HfOutputLenOpt = Annotated[
    int | None, typer.Option("--hf-output-len", min=1, help="vLLM's hf dataset: output tokens.")
]
CustomOutputLenOpt = Annotated[
    int, typer.Option("--custom-output-len", min=1, help="vLLM's custom dataset: output tokens.")
]
BurstinessOpt = Annotated[
    float,
    typer.Option(
        "--burstiness",
        help="vLLM's: gamma arrivals of shape B (CV = 1/sqrt(B)); 1 is "
        "Poisson. Only with a finite --request-rate.",
    ),
]
PercentileMetricsOpt = Annotated[
    str | None,
    typer.Option(
        "--percentile-metrics",
        help="vLLM's: metrics with statistics in the --save-result "
        "vllm file, a comma list of ttft,tpot,itl,e2el (default all four).",
    ),
]
GoodputOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--goodput",
        help="vLLM's: an SLO as ttft:MS, tpot:MS or e2el:MS (repeatable); the "
        "same as --slo ttft_ms:MS.",
    ),
]
ResultDirOpt = Annotated[
    str | None, typer.Option("--result-dir", help="vLLM's: folder of the --save-result vllm file.")
]
ResultFilenameOpt = Annotated[
    str | None,
    typer.Option(
        "--result-filename",
        help="vLLM's: name of the --save-result vllm file (default: "
        "vLLM's {label}-{rate}qps[-concurrency{N}]-{model}-{date}.json).",
    ),
]
AppendResultOpt = Annotated[
    bool,
    typer.Option(
        "--append-result",
        help="vLLM's: append the result to the file (one JSON object "
        "per line); implies --save-result vllm.",
    ),
]
SaveDetailedOpt = Annotated[
    bool,
    typer.Option(
        "--save-detailed",
        help="vLLM's: per-request lists in the result file (always "
        "written: ridgeline's importer reads them).",
    ),
]
MetadataOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--metadata",
        help="vLLM's: KEY=VALUE saved in the result file (several after one "
        "--metadata, or repeated).",
    ),
]
LabelOpt = Annotated[
    str | None,
    typer.Option(
        "--label", help="vLLM's: the result's label and file-name prefix (default --backend)."
    ),
]
ReadyCheckTimeoutSOpt = Annotated[
    int,
    typer.Option(
        "--ready-check-timeout-sec",
        min=0,
        help="vLLM's: wait up to this many seconds for "
        "the server to answer /v1/models (0: no wait).",
    ),
]
TopPOpt = Annotated[float | None, typer.Option("--top-p", help="vLLM's: top_p in every request.")]
TopKOpt = Annotated[int | None, typer.Option("--top-k", help="vLLM's: top_k.")]
MinPOpt = Annotated[float | None, typer.Option("--min-p", help="vLLM's: min_p.")]
FrequencyPenaltyOpt = Annotated[
    float | None, typer.Option("--frequency-penalty", help="vLLM's: frequency_penalty.")
]
PresencePenaltyOpt = Annotated[
    float | None, typer.Option("--presence-penalty", help="vLLM's: presence_penalty.")
]
RepetitionPenaltyOpt = Annotated[
    float | None, typer.Option("--repetition-penalty", help="vLLM's: repetition_penalty.")
]
LogprobsOpt = Annotated[
    int | None, typer.Option("--logprobs", min=0, help="vLLM's: logprobs per token.")
]
CancelRatePctOpt = Annotated[
    float,
    typer.Option(
        "--request-cancellation-rate",
        callback=number(ge=0, le=100),
        help="AIPerf's: percent of requests to cancel --request-cancellation-delay seconds "
        "after sending (status cutoff, error_kind cancelled).",
    ),
]
CancelDelaySOpt = Annotated[
    float,
    typer.Option(
        "--request-cancellation-delay",
        callback=number(ge=0),
        help="AIPerf's: seconds after sending at which a cancelled request is cut.",
    ),
]
GuidellmProfileOpt = Annotated[
    str | None,
    typer.Option(
        "--rate-type",
        "--guidellm-profile",
        help="GuideLLM's: synchronous, concurrent, "
        "throughput, constant, poisson or sweep (its --profile NAME is the same).",
    ),
]
VllmResultNamingOpt = Annotated[bool, typer.Option("--vllm-result-naming", hidden=True)]
DisableTqdmOpt = Annotated[
    bool, typer.Option("--disable-tqdm", help="vLLM's: the same as --no-progress.")
]
RampUpStrategyOpt = Annotated[
    str | None,
    typer.Option(
        "--ramp-up-strategy",
        help="vLLM's: linear (the rate rises from --ramp-up-start-rps "
        "to --ramp-up-end-rps over the run; --arrival ramp).",
    ),
]
RampUpStartRpsOpt = Annotated[
    float | None,
    typer.Option(
        "--ramp-up-start-rps", callback=number(gt=0), help="vLLM's: the ramp's first rate."
    ),
]
RampUpEndRpsOpt = Annotated[
    float | None,
    typer.Option("--ramp-up-end-rps", callback=number(gt=0), help="vLLM's: the ramp's last rate."),
]
PrefixRepetitionPrefixLenOpt = Annotated[
    int,
    typer.Option(
        "--prefix-repetition-prefix-len",
        min=1,
        help="vLLM's prefix_repetition dataset: tokens of each shared prefix.",
    ),
]
PrefixRepetitionSuffixLenOpt = Annotated[
    int,
    typer.Option(
        "--prefix-repetition-suffix-len",
        min=1,
        help="vLLM's prefix_repetition dataset: tokens after the prefix.",
    ),
]
PrefixRepetitionNumPrefixesOpt = Annotated[
    int,
    typer.Option(
        "--prefix-repetition-num-prefixes",
        min=1,
        help="vLLM's prefix_repetition dataset: distinct prefixes.",
    ),
]
PrefixRepetitionOutputLenOpt = Annotated[
    int,
    typer.Option(
        "--prefix-repetition-output-len",
        min=1,
        help="vLLM's prefix_repetition dataset: output tokens.",
    ),
]
UrlOpt = Annotated[
    str | None,
    typer.Option(
        "--url", "-u", help="AIPerf's: the server, host:port or a URL (the same as --base-url)."
    ),
]
EndpointTypeOpt = Annotated[
    str | None,
    typer.Option(
        "--endpoint-type",
        help="AIPerf's: chat or completions (sets --api). Without "
        "--streaming requests are not streamed, as in AIPerf.",
    ),
]
StreamingOpt = Annotated[
    bool,
    typer.Option(
        "--streaming",
        help="AIPerf's: stream the answers (ridgeline streams by default; "
        "this matters with --endpoint-type).",
    ),
]
IslMeanOpt = Annotated[
    int | None,
    typer.Option(
        "--synthetic-input-tokens-mean", "--isl", min=1, help="AIPerf's: mean prompt tokens."
    ),
]
IslStddevOpt = Annotated[
    float,
    typer.Option(
        "--synthetic-input-tokens-stddev",
        "--isl-stddev",
        callback=number(ge=0),
        help="AIPerf's: prompt tokens' standard deviation (normal).",
    ),
]
OslMeanOpt = Annotated[
    int | None,
    typer.Option(
        "--output-tokens-mean", "--osl", min=1, help="AIPerf's: mean output tokens (max_tokens)."
    ),
]
OslStddevOpt = Annotated[
    float,
    typer.Option(
        "--output-tokens-stddev",
        "--osl-stddev",
        callback=number(ge=0),
        help="AIPerf's: output tokens' standard deviation (normal).",
    ),
]
ExtraInputsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--extra-inputs",
        help="AIPerf's: KEY:VALUE added to every request body "
        "(repeatable; VALUE read as JSON when it parses, e.g. ignore_eos:true).",
    ),
]
ArtifactDirOpt = Annotated[
    str | None,
    typer.Option(
        "--artifact-dir",
        help="AIPerf's: write the trace and AIPerf's profile_export_aiperf.csv/.json here.",
    ),
]
DataOpt = Annotated[
    str | None,
    typer.Option(
        "--data",
        help="GuideLLM's synthetic data: prompt_tokens=N,output_tokens=M (also "
        "*_stdev, *_min, *_max, prefix_tokens, prefix_count, samples; or the same as a JSON "
        "object), or a local .jsonl file.",
    ),
]
OutputPathOpt = Annotated[
    str | None,
    typer.Option(
        "--output-path",
        help="GuideLLM's: write a GuideLLM-style report here (.json, "
        ".yaml or .csv; a folder gets benchmarks.json).",
    ),
]
OutFormatOpt = Annotated[
    str | None,
    typer.Option(
        "--format",
        help="table (rich tables; the default in a terminal), plain (full-width text; the "
        "default when piped), markdown: ridgeline's tables, then vLLM's result block; csv "
        "(the tables only), json (the results as one document), vllm (only vLLM's block, "
        "as `vllm bench serve` prints it).",
    ),
]


__all__ = [
    "DEFAULT_REQUESTS",
    "ApiKeyOpt",
    "ApiOpt",
    "AppendResultOpt",
    "ArrivalOpt",
    "ArtifactDirOpt",
    "BackendOpt",
    "BaseUrlOpt",
    "BurstinessOpt",
    "CancelDelaySOpt",
    "CancelRatePctOpt",
    "ConcurrencyOpt",
    "CustomOutputLenOpt",
    "DataOpt",
    "DatasetNameOpt",
    "DatasetOpt",
    "DatasetPathOpt",
    "DisableTqdmOpt",
    "DurationSOpt",
    "EmulatorArgOpt",
    "EndpointPathOpt",
    "EndpointTypeOpt",
    "ExtraBodyOpt",
    "ExtraInputsOpt",
    "FrequencyPenaltyOpt",
    "GoodputOpt",
    "GraceSOpt",
    "GuidellmProfileOpt",
    "HardwareOpt",
    "HeaderOpt",
    "HfOutputLenOpt",
    "HostOpt",
    "IgnoreEosOpt",
    "InputLenOpt",
    "InsecureOpt",
    "IslMeanOpt",
    "IslStddevOpt",
    "LabelOpt",
    "LogprobsOpt",
    "MaxErrorRateOpt",
    "MetadataOpt",
    "MetricPercentilesOpt",
    "MinPOpt",
    "MinTokensOpt",
    "ModelOpt",
    "MultiTurnOpt",
    "NoServerMetricsOpt",
    "NoUsageOpt",
    "NonStreamingOpt",
    "OslMeanOpt",
    "OslStddevOpt",
    "OutFormatOpt",
    "OutputLenOpt",
    "OutputOpt",
    "OutputPathOpt",
    "PercentileMetricsOpt",
    "PortOpt",
    "PrefixGroupsOpt",
    "PrefixRepetitionNumPrefixesOpt",
    "PrefixRepetitionOutputLenOpt",
    "PrefixRepetitionPrefixLenOpt",
    "PrefixRepetitionSuffixLenOpt",
    "PrefixTokensOpt",
    "PresencePenaltyOpt",
    "ProgressOpt",
    "PromptNonceOpt",
    "PromptOpt",
    "RampUpEndRpsOpt",
    "RampUpStartRpsOpt",
    "RampUpStrategyOpt",
    "RandomInputLenOpt",
    "RandomOutputLenOpt",
    "RandomPrefixLenOpt",
    "RandomRangeRatioOpt",
    "RateOpt",
    "RayOpt",
    "ReadyCheckTimeoutSOpt",
    "RepetitionPenaltyOpt",
    "ReplayOpt",
    "ReplaySpeedOpt",
    "RequestsOpt",
    "ResultDirOpt",
    "ResultFilenameOpt",
    "SaveDetailedOpt",
    "SaveResultOpt",
    "ServedModelNameOpt",
    "ServerMetricsOpt",
    "SharegptOutputLenOpt",
    "SonnetInputLenOpt",
    "SonnetOutputLenOpt",
    "SonnetPrefixLenOpt",
    "SpeedOpt",
    "StallTimeoutSOpt",
    "StreamingOpt",
    "TargetOpt",
    "TelemetryIntervalMsOpt",
    "TemperatureOpt",
    "ThinkTimeOpt",
    "TimeoutSOpt",
    "TokenizerOpt",
    "TopKOpt",
    "TopPOpt",
    "UrlOpt",
    "VllmResultNamingOpt",
    "WarmupOpt",
    "WorkersOpt",
]

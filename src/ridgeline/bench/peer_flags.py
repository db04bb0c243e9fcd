"""Peer tools' command lines for `ridgeline bench`: `vllm bench serve`, AIPerf, GuideLLM.

A peer's command line runs with only the program name changed: `ridgeline bench` followed
by the flags its users write after `vllm bench serve`, `aiperf profile` or `guidellm
benchmark`. Most peer flags are plain aliases of ours (typer options with several names);
the few whose *shape* typer cannot take are rewritten before parsing (`normalize_argv`):

* vLLM's several-words flags (`--goodput ttft:500 tpot:50`, `--metadata k=v tp=1`,
  `--header a=1 b=2`; argparse nargs "+"/"*"): one option per word;
* `--save-result` as a bare flag (vLLM) where ours takes a format: `--save-result=vllm`;
* `--profile NAME` (GuideLLM's rate type); vLLM's bare `--profile` is refused;
* vLLM flags ridgeline ignores or refuses (`vllm_flags.FLAGS`): a note, or an error line.

`translate` then turns the peers' values into ridgeline's own options (one-line errors for
what ridgeline lacks). vLLM's flags follow `vllm/benchmarks/serve.py` and
`vllm/benchmarks/datasets.py`; the table is in docs/bench.md.

>>> normalize_argv(["--metadata", "a=1", "b=2", "--save-result", "--ignore-eos"])[0][2:]
['--metadata', 'b=2', '--save-result=vllm', '--vllm-result-naming', '--ignore-eos']
>>> normalize_argv(["--goodput", "ttft:500", "tpot:50"])[0]
['--goodput', 'ttft:500', '--goodput', 'tpot:50']
>>> backend_api("openai-chat", None)
'chat'
>>> random_lengths(64, 0.5)
'uniform:min=32,max=96'
>>> guidellm_data("prompt_tokens=256,output_tokens=128")
('synthetic', 'fixed:256', 'fixed:128', 0, 0)
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ridgeline.bench.vllm_flags import FLAGS, MULTI_VALUE
from ridgeline.errors import RidgelineError
from ridgeline.workload.vllm_lengths import random_lengths

# vLLM's ASYNC_REQUEST_FUNCS keys that speak OpenAI's text APIs (the others — tgi,
# deepspeed-mii, tensorrt-llm, audio and pooling backends — have their own protocols).
VLLM_COMPLETIONS_BACKENDS = ("openai", "vllm", "lmdeploy", "sglang", "scalellm", "llama.cpp",
                             "cserve")
VLLM_CHAT_BACKENDS = ("openai-chat", "cserve-chat")
VLLM_DATASETS = ("random", "sharegpt", "sonnet", "hf", "custom", "prefix_repetition")
# vLLM's other `--dataset-name` choices, each refused with its reason.
VLLM_DATASETS_REFUSED = {
    "burstgpt": "vLLM samples BurstGPT's lengths without its times; replay the CSV with "
                "--replay FILE (its arrival times and lengths)",
    "random-mm": "multimodal prompts are not generated",
    "random-rerank": "reranker workloads are not a text-generation load",
    "spec_bench": "its prompt set is not shipped; give the prompts with --dataset-name "
                  "custom --dataset-path FILE",
    "txt-slices": "text-file slices are not generated; use --dataset-name custom "
                  "--dataset-path FILE",
}
# vLLM's `--percentile-metrics` names we have (client queue time needs vLLM's client).
PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el")
DEFAULT_BASE_URL = "http://127.0.0.1:8000"  # ridgeline's --base-url default (vLLM's too)
# AIPerf's spellings of options ridgeline has under another name.
AIPERF_RENAMES = {"--random-seed": "--seed"}
# AIPerf and GuideLLM options that change nothing ridgeline measures, each dropped with a
# note saying what the user does not get.
AIPERF_IGNORED = {
    "--profile-export-file": "ridgeline writes AIPerf's files under their default names in "
                             "--artifact-dir (profile_export.jsonl, "
                             "profile_export_aiperf.json, profile_export_aiperf.csv)",
    "--output-extras": "GuideLLM's extra tags are not written into ridgeline's GuideLLM "
                       "report (--output-path); the run is the same",
}
GUIDELLM_PROFILES = ("synchronous", "concurrent", "throughput", "constant", "poisson", "sweep")



def normalize_argv(args: list[str]) -> tuple[list[str], list[str]]:
    """Rewrite vLLM/GuideLLM option shapes typer cannot parse into equivalent ones; drop the
    vLLM flags ridgeline ignores. Returns (argv, notes); a refused flag raises."""
    out: list[str] = []
    notes: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        nxt = args[i + 1] if i + 1 < len(args) else None
        if a == "--":
            out.extend(args[i:])
            break
        name = a.split("=", 1)[0]
        flag = FLAGS.get(name)
        if a in MULTI_VALUE:
            j = i + 1
            values = []
            while j < len(args) and not args[j].startswith("-"):
                values.append(args[j])
                j += 1
            if not values:  # let typer report the missing value
                out.append(a)
            for v in values:
                out.extend([a, v])
            i = j
            continue
        if a == "--save-result" and (nxt is None or nxt.startswith("-")):
            out.extend(["--save-result=vllm", "--vllm-result-naming"])  # vLLM's flag
        elif a == "--profile" and nxt is not None and not nxt.startswith("-"):
            out.extend(["--rate-type", nxt])  # GuideLLM's --profile NAME
            i += 1
        elif name in AIPERF_RENAMES:
            out.append(AIPERF_RENAMES[name] + a[len(name):])
        elif name in AIPERF_IGNORED:
            notes.append(f"{name}: ignored ({AIPERF_IGNORED[name]})")
            if "=" not in a and nxt is not None and not nxt.startswith("-"):
                i += 1  # its value
        elif flag is not None and flag.status == "refused":
            raise RidgelineError(f"{name}: vLLM's flag is not supported by ridgeline bench: "
                                 f"{flag.reason}")
        elif flag is not None and flag.status == "ignored":
            notes.append(f"{name}: ignored ({flag.reason})")
            while flag.nargs != 0 and "=" not in a and i + 1 < len(args) and \
                    not args[i + 1].startswith("-"):
                i += 1  # its value(s)
                if flag.nargs == 1:
                    break
        else:
            out.append(a)
        i += 1
    return out, notes


def backend_api(backend: str | None, endpoint: str | None) -> str | None:
    """vLLM's `--backend` (and `--endpoint`) as our `--api`; None when neither is given."""
    api = None
    if backend is not None:
        if backend in VLLM_CHAT_BACKENDS:
            api = "chat"
        elif backend in VLLM_COMPLETIONS_BACKENDS:
            api = "completions"
        else:
            raise RidgelineError(f"--backend: got {backend!r}; allowed: "
                                 f"{', '.join(VLLM_COMPLETIONS_BACKENDS + VLLM_CHAT_BACKENDS)}"
                                 " (OpenAI-compatible text backends)")
    if endpoint is not None:
        path = endpoint.rstrip("/")
        by_path = {"/v1/completions": "completions", "/v1/chat/completions": "chat"}
        if path not in by_path:
            raise RidgelineError(f"--endpoint: got {endpoint!r}; allowed: /v1/completions, "
                                 "/v1/chat/completions")
        if backend is not None and backend in VLLM_COMPLETIONS_BACKENDS and \
                by_path[path] == "chat":
            api = "chat"  # vLLM: the endpoint decides where requests go
        else:
            api = by_path[path]
    return api


def parse_key_values(items: list[str] | None, flag: str) -> dict[str, str]:
    """vLLM's `--metadata`/`--header` KEY=VALUE pairs (split at the first '=')."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise RidgelineError(f"{flag}: got {item!r}; allowed: KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def parse_percentile_metrics(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    bad = [n for n in names if n not in PERCENTILE_METRICS]
    if bad or not names:
        raise RidgelineError(f"--percentile-metrics: got {text!r}; allowed: a comma list of "
                             f"{', '.join(PERCENTILE_METRICS)}")
    return names


@dataclass(frozen=True)
class ResultFileSpec:
    """Where and how the `--save-result vllm` file is written (vLLM's conventions).

    `directory`/`filename` None and `vllm_naming` False: beside the trace (ridgeline's own
    default, `<trace stem>.vllm.json`)."""

    directory: str | None = None
    filename: str | None = None
    vllm_naming: bool = False     # bare `--save-result`: vLLM's file name in the cwd
    append: bool = False
    label: str | None = None
    backend: str | None = None
    metadata: tuple[tuple[str, str], ...] = ()
    percentile_metrics: tuple[str, ...] | None = None

    @property
    def custom_path(self) -> bool:
        return self.vllm_naming or self.directory is not None or self.filename is not None

    def path_for(self, model: str, rate_req_s: float | None, concurrency: int | None,
                 point_tag: str = "", when: float | None = None) -> Path:
        """vLLM's `compute_result_filename`: `{label}-{rate}qps[-concurrency{N}]-{model}-
        {YYYYmmdd-HHMMSS}.json`, or `--result-filename`, inside `--result-dir`."""
        if self.filename is not None:
            name = self.filename
            if point_tag and not self.append:  # a sweep: one file per point
                stem, dot, ext = name.rpartition(".")
                name = f"{stem}.{point_tag}.{ext}" if dot else f"{name}.{point_tag}"
        else:
            rate = float("inf") if rate_req_s is None else float(rate_req_s)
            conc = f"-concurrency{concurrency}" if concurrency is not None else ""
            dt = time.strftime("%Y%m%d-%H%M%S", time.localtime(when or time.time()))
            tag = f"-{point_tag}" if point_tag else ""
            name = (f"{self.label or self.backend or 'openai'}-{rate}qps{conc}-"
                    f"{model.split('/')[-1]}{tag}-{dt}.json")
        if self.directory is not None:
            os.makedirs(self.directory, exist_ok=True)
            return Path(self.directory) / name
        return Path(name)


def write_result_json(path: Path, result: dict, append: bool) -> None:
    """vLLM's save: `json.dump` of one object; `--append-result` appends it after a newline
    (so the file is one JSON object per line)."""
    with open(path, "a+" if append else "w", encoding="utf-8") as fh:
        if append and fh.tell() != 0:
            fh.write("\n")
        json.dump(result, fh)


def wait_ready(root_url: str, timeout_s: float, headers: dict[str, str]) -> None:
    """vLLM's `--ready-check-timeout-sec`: poll until the server answers GET /v1/models
    with 200, for at most `timeout_s` seconds (0 skips the check, as in vLLM)."""
    import urllib.error
    import urllib.request

    if timeout_s <= 0:
        return
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while True:
        try:
            req = urllib.request.Request(root_url.rstrip("/") + "/v1/models", headers=headers)
            with urllib.request.urlopen(req, timeout=min(5.0, timeout_s)) as resp:
                if resp.status == 200:
                    return
                last = f"HTTP {resp.status}"
        except urllib.error.HTTPError as exc:
            last = f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError) as exc:
            last = str(getattr(exc, "reason", exc))
        if time.monotonic() >= deadline:
            raise RidgelineError(f"--ready-check-timeout-sec: {root_url} not ready after "
                                 f"{timeout_s:g} s ({last})")
        time.sleep(1.0)


# ---- the peers' values as ridgeline's options ----------------------------------------


@dataclass
class PeerOptions:
    """What the peers' flags add beyond ridgeline's own fields (`translate`'s result)."""

    notes: list[str]
    body: dict[str, Any]          # sampling parameters and --extra-inputs, per request
    rate_inf: bool                # vLLM's --request-rate inf / GuideLLM's throughput
    result_spec: ResultFileSpec


def translate(a: Any) -> PeerOptions:
    """Rewrite the vLLM, AIPerf and GuideLLM options of `a` (a BenchArgs) into ridgeline's
    own fields, in place. Conflicting spellings of one setting are refused."""
    notes: list[str] = []
    _endpoint(a, notes)
    body = {k: v for k, v in (("top_p", a.top_p), ("top_k", a.top_k), ("min_p", a.min_p),
                              ("frequency_penalty", a.frequency_penalty),
                              ("presence_penalty", a.presence_penalty),
                              ("repetition_penalty", a.repetition_penalty),
                              ("logprobs", a.logprobs)) if v is not None}
    body.update(parse_extra_inputs(a.extra_inputs))
    if a.guidellm_profile is not None:
        a.concurrency, a.rate = _guidellm_profile(a.guidellm_profile, a.rate, a.concurrency,
                                                  notes)
        if a.guidellm_profile == "constant" and a.arrival == "poisson":
            a.arrival = "constant"  # GuideLLM's constant: evenly spaced requests
    rate_inf = a.rate is not None and a.rate.strip().lower() in ("inf", "infinity")
    if rate_inf:
        a.rate = None
    _lengths(a)
    _arrival(a)
    for g in a.goodput or []:
        a.slo = [*(a.slo or []), goodput_slo(g)]
    if a.append_result and not a.save_result:
        a.save_result = ["vllm"]
    if a.disable_tqdm:
        a.progress = False
    spec = ResultFileSpec(
        directory=a.result_dir, filename=a.result_filename, vllm_naming=a.vllm_result_naming,
        append=a.append_result, label=a.label, backend=a.backend,
        metadata=tuple(parse_key_values(a.metadata, "--metadata").items()),
        percentile_metrics=parse_percentile_metrics(a.percentile_metrics))
    return PeerOptions(notes, body, rate_inf, spec)


def _endpoint(a: Any, notes: list[str]) -> None:
    """Where requests go and in which API: vLLM's --backend/--endpoint/--host/--port,
    AIPerf's --url/--endpoint-type/--streaming, GuideLLM's --target URL."""
    flag_api = backend_api(a.backend, a.endpoint_path)
    if a.endpoint_type in VLLM_COMPLETIONS_BACKENDS + VLLM_CHAT_BACKENDS and a.backend is None:
        # older vLLM spelled --backend as --endpoint-type (openai, openai-chat, ...)
        a.backend, a.endpoint_type = a.endpoint_type, None
        flag_api = backend_api(a.backend, a.endpoint_path)
    if a.endpoint_type is not None:
        if a.endpoint_type not in ("chat", "completions"):
            raise RidgelineError(f"--endpoint-type: got {a.endpoint_type!r}; allowed: chat, "
                                 "completions (AIPerf's), or vLLM's backend names")
        if flag_api is not None and flag_api != a.endpoint_type:
            raise RidgelineError(f"--endpoint-type {a.endpoint_type} disagrees with "
                                 f"--backend/--endpoint ({flag_api})")
        flag_api = a.endpoint_type
        if not a.streaming and not a.non_streaming:
            a.non_streaming = True
            notes.append("--endpoint-type without --streaming: requests are not streamed "
                         "(AIPerf's default), so TTFT = E2E")
    if a.streaming and a.non_streaming:
        raise RidgelineError("--streaming/--non-streaming: give one")
    if a.api is not None and flag_api is not None and a.api != flag_api:
        raise RidgelineError(f"--api {a.api} disagrees with --backend/--endpoint "
                             f"({flag_api})")
    a.api = a.api or flag_api or "completions"
    urls = []
    if a.host is not None or a.port is not None:
        urls.append(("--host/--port", f"http://{a.host or '127.0.0.1'}:{a.port or 8000}"))
    if a.url is not None:
        u = a.url.strip()
        urls.append(("--url", u if "://" in u else f"http://{u}"))  # AIPerf: host:port
    if a.target not in ("url", "emulator"):
        if not a.target.startswith(("http://", "https://")):
            raise RidgelineError(f"--target: got {a.target!r}; allowed: url, emulator, or an "
                                 "http(s):// URL (GuideLLM's --target)")
        urls.append(("--target", a.target))
        a.target = "url"
    if a.base_url != DEFAULT_BASE_URL:
        urls.insert(0, ("--base-url", a.base_url))
    if len(urls) > 1:
        raise RidgelineError(f"{urls[0][0]}/{urls[1][0]}: give the server once")
    if urls:
        if a.target == "emulator" and urls[-1][0] != "--base-url":
            raise RidgelineError(f"{urls[0][0]}: not with --target emulator (it starts its "
                                 "own server)")
        a.base_url = urls[0][1]
    if a.served_model_name:
        a.model = a.served_model_name


def _lengths(a: Any) -> None:
    """The dataset and the lengths: vLLM's --dataset-name family, AIPerf's synthetic
    token counts, GuideLLM's --data."""
    given = []
    if a.dataset_name is not None:
        given.append("--dataset-name")
        if a.dataset is not None:
            raise RidgelineError("--dataset-name: give it or --dataset, not both")
        dataset, prompt_v, output_v, groups, prefix = vllm_dataset(a)
        for flag, ours, theirs in (("--prompt", a.prompt, prompt_v),
                                   ("--output", a.output, output_v)):
            if ours is not None and theirs is not None:
                raise RidgelineError(f"{flag}: the --dataset-name {a.dataset_name} lengths "
                                     "already set it; drop one")
        a.dataset, a.prompt, a.output = dataset, a.prompt or prompt_v, a.output or output_v
        _set_prefix(a, groups, prefix, "--dataset-name")
        if a.dataset_name == "random":
            a.ignore_eos = True  # vLLM: random datasets ignore EOS on OpenAI backends
    elif a.dataset_path is not None:
        raise RidgelineError("--dataset-path: only with --dataset-name")
    if a.isl_mean is not None or a.osl_mean is not None:
        given.append("--synthetic-input-tokens-mean/--output-tokens-mean")
        if a.isl_mean is not None:
            _set_once(a, "prompt", normal_lengths(a.isl_mean, a.isl_stddev),
                      "--synthetic-input-tokens-mean")
        if a.osl_mean is not None:
            _set_once(a, "output", normal_lengths(a.osl_mean, a.osl_stddev),
                      "--output-tokens-mean")
    if a.data is not None:
        given.append("--data")
        dataset, prompt_v, output_v, groups, prefix = guidellm_data(a.data)
        if a.dataset is not None and dataset != "synthetic":
            raise RidgelineError("--data: give it or --dataset, not both")
        a.dataset = dataset if dataset != "synthetic" else a.dataset
        if prompt_v is not None:
            _set_once(a, "prompt", prompt_v, "--data")
        if output_v is not None:
            _set_once(a, "output", output_v, "--data")
        _set_prefix(a, groups, prefix, "--data")
    if len(given) > 1:
        raise RidgelineError(f"{given[0]}/{given[1]}: the lengths come from one of them")
    a.dataset = a.dataset or "synthetic"
    a.prompt = a.prompt or "fixed:256"


def _set_once(a: Any, field: str, value: str, flag: str) -> None:
    if getattr(a, field) is not None:
        raise RidgelineError(f"{flag}: --{field} already sets the {field} lengths; drop one")
    setattr(a, field, value)


def _set_prefix(a: Any, groups: int, tokens: int, flag: str) -> None:
    if not tokens:
        return
    if a.prefix_groups:
        raise RidgelineError(f"{flag}: its shared prefix and --prefix-groups: give one")
    a.prefix_groups, a.prefix_tokens = groups, tokens


def _arrival(a: Any) -> None:
    """vLLM's --burstiness and --ramp-up-* as ridgeline's --arrival."""
    if a.burstiness != 1.0:
        if not a.burstiness > 0:
            raise RidgelineError(f"--burstiness: got {a.burstiness:g}; allowed: a number > 0")
        if a.arrival != "poisson":
            raise RidgelineError("--burstiness: give it or --arrival, not both")
        a.arrival = f"gamma:cv={1 / a.burstiness ** 0.5:.12g}"  # vLLM: gamma of shape B
    ramp = (a.ramp_up_strategy, a.ramp_up_start_rps, a.ramp_up_end_rps)
    if any(v is not None for v in ramp):
        if a.ramp_up_strategy != "linear":
            raise RidgelineError(f"--ramp-up-strategy: got {a.ramp_up_strategy!r}; allowed: "
                                 "linear (exponential ramps are not generated)")
        if a.ramp_up_start_rps is None or a.ramp_up_end_rps is None:
            raise RidgelineError("--ramp-up-strategy: give --ramp-up-start-rps and "
                                 "--ramp-up-end-rps")
        if a.arrival != "poisson" or a.rate is not None:
            raise RidgelineError("--ramp-up-strategy: the ramp sets the rate; drop --rate/"
                                 "--request-rate and --arrival/--burstiness")
        a.arrival = f"ramp:start={a.ramp_up_start_rps:g},end={a.ramp_up_end_rps:g}"


def goodput_slo(text: str) -> str:
    """vLLM's `--goodput ttft:500` (ms) as our `--slo ttft_ms:500`."""
    names = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2el": "e2e_ms"}
    name, sep, value = text.partition(":")
    if not sep or name not in names:
        raise RidgelineError(f"--goodput: got {text!r}; allowed: ttft:MS, tpot:MS or e2el:MS "
                             "(several after one --goodput)")
    return f"{names[name]}:{value}"


def _guidellm_profile(name: str, rate: str | None, concurrency: str | None,
                      notes: list[str]) -> tuple[str | None, str | None]:
    """GuideLLM's `--rate-type NAME --rate R` as our (--concurrency, --rate)."""
    if name == "synchronous":
        return "1", None
    if name == "concurrent":
        if rate is None:
            raise RidgelineError("--rate-type concurrent: give --rate (GuideLLM: the "
                                 "concurrency, one or a list)")
        return rate, None
    if name == "throughput":
        return concurrency, "inf"
    if name in ("constant", "poisson"):
        if rate is None:
            raise RidgelineError(f"--rate-type {name}: give --rate (requests/s)")
        return concurrency, rate
    if name == "sweep":
        if rate is not None:
            notes.append(f"--rate {rate}: ignored with --rate-type sweep (ridgeline sweeps "
                         "20%-110% of the measured saturation rate)")
        return concurrency, "sweep"
    raise RidgelineError(f"--rate-type: got {name!r}; allowed: {', '.join(GUIDELLM_PROFILES)}")


def vllm_dataset(a: Any) -> tuple[str, str | None, str | None, int, int]:
    """vLLM's `--dataset-name` and its options as (--dataset, --prompt, --output,
    prefix groups, prefix tokens)."""
    name, path, out = a.dataset_name, a.dataset_path, a.output_len
    if name in VLLM_DATASETS_REFUSED:
        raise RidgelineError(f"--dataset-name {name}: refused: {VLLM_DATASETS_REFUSED[name]}")
    if name not in VLLM_DATASETS:
        raise RidgelineError(f"--dataset-name: got {name!r}; allowed: "
                             f"{', '.join(VLLM_DATASETS)}")
    if name in ("random", "prefix_repetition"):
        if path is not None:
            raise RidgelineError(f"--dataset-path: not with --dataset-name {name} (vLLM "
                                 "refuses it too)")
        if name == "prefix_repetition":   # N prefixes, each prompt = prefix + own suffix
            return ("synthetic", f"fixed:{a.prefix_repetition_suffix_len}",
                    f"fixed:{out or a.prefix_repetition_output_len}",
                    a.prefix_repetition_num_prefixes, a.prefix_repetition_prefix_len)
        ratio = a.random_range_ratio
        return ("synthetic", random_lengths(a.input_len or a.random_input_len, ratio),
                random_lengths(out or a.random_output_len, ratio),
                1 if a.random_prefix_len else 0, a.random_prefix_len)
    if path is None:
        raise RidgelineError(f"--dataset-name {name}: give --dataset-path FILE")
    if name == "sharegpt":
        n = out or a.sharegpt_output_len
        return f"sharegpt:path={path}", None, f"fixed:{n}" if n else None, 0, 0
    if name == "sonnet":
        return (f"sonnet:path={path},input={a.sonnet_input_len},"
                f"prefix={a.sonnet_prefix_len}", None,
                f"fixed:{out or a.sonnet_output_len}", 0, 0)
    if name == "custom":
        return f"jsonl:path={path}", None, f"fixed:{out or a.custom_output_len}", 0, 0
    # hf: a local file only (no download): JSONL rows or a ShareGPT-style JSON list.
    kind = "jsonl" if path.endswith(".jsonl") else "sharegpt"
    n = out or a.hf_output_len
    return f"{kind}:path={path}", None, f"fixed:{n}" if n else None, 0, 0


def normal_lengths(mean: float, stddev: float, lo: float | None = None,
                   hi: float | None = None) -> str:
    """A mean and standard deviation (AIPerf, GuideLLM) in the lengths syntax."""
    bounds = "".join(f",{k}={v:g}" for k, v in (("min", lo), ("max", hi)) if v is not None)
    if not stddev:
        return f"fixed:{mean:g}"
    return f"normal:mean={mean:g},std={stddev:g}{bounds}"


_GUIDELLM_KEYS = ("prompt_tokens", "prompt_tokens_stdev", "prompt_tokens_min",
                  "prompt_tokens_max", "output_tokens", "output_tokens_stdev",
                  "output_tokens_min", "output_tokens_max", "prefix_tokens", "prefix_count",
                  "samples", "source", "turns")


def guidellm_data(text: str) -> tuple[str, str | None, str | None, int, int]:
    """GuideLLM's `--data`: synthetic `prompt_tokens=N,output_tokens=M,...` (or the same as
    a JSON object), or a local .jsonl file, as (--dataset, --prompt, --output, prefix
    groups, prefix tokens)."""
    t = text.strip()
    if t.startswith("{"):
        try:
            obj = json.loads(t)
        except json.JSONDecodeError:
            raise RidgelineError(f"--data: got {text!r}; allowed: a JSON object of "
                                 "prompt_tokens, output_tokens, ...") from None
        if not isinstance(obj, dict):
            raise RidgelineError(f"--data: got {text!r}; allowed: a JSON object")
        items = {str(k): str(v) for k, v in obj.items()}
    elif "=" in t:
        items = {}
        for part in t.split(","):
            key, sep, value = part.partition("=")
            if not sep:
                raise RidgelineError(f"--data: got {part!r}; allowed: KEY=VALUE, comma-"
                                     "separated")
            items[key.strip()] = value.strip()
    elif t.endswith(".jsonl") and os.path.isfile(t):
        return f"jsonl:path={t}", None, None, 0, 0
    else:
        raise RidgelineError(f"--data: got {text!r}; allowed: prompt_tokens=N,output_tokens=M"
                             " (synthetic) or a local .jsonl file (ridgeline downloads no "
                             "dataset)")
    bad = [k for k in items if k not in _GUIDELLM_KEYS]
    if bad:
        raise RidgelineError(f"--data: unknown key {bad[0]!r}; allowed: "
                             f"{', '.join(_GUIDELLM_KEYS)}")
    if "turns" in items and items["turns"] != "1":
        raise RidgelineError("--data: turns > 1: use --multi-turn")
    nums: dict[str, float] = {}
    for k, v in items.items():
        if k in ("source",):
            continue
        try:
            nums[k] = float(v)
        except ValueError:
            raise RidgelineError(f"--data: {k}: got {v!r}; allowed: a number") from None
        if not (nums[k] >= 0 and math.isfinite(nums[k])):
            raise RidgelineError(f"--data: {k}: got {v!r}; allowed: a number >= 0")
    if "prompt_tokens" not in nums:
        raise RidgelineError("--data: give prompt_tokens=N (and output_tokens=M)")

    def dist(key: str) -> str | None:
        if key not in nums:
            return None
        return normal_lengths(nums[key], nums.get(f"{key}_stdev", 0.0),
                              nums.get(f"{key}_min"), nums.get(f"{key}_max"))

    prefix = int(nums.get("prefix_tokens", 0))
    groups = int(nums.get("prefix_count", 1)) if prefix else 0
    return "synthetic", dist("prompt_tokens"), dist("output_tokens"), groups, prefix


def parse_extra_inputs(items: list[str] | None) -> dict[str, Any]:
    """AIPerf's `--extra-inputs KEY:VALUE` (VALUE as JSON when it parses: numbers, true)."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition(":")
        if not sep or not key.strip():
            raise RidgelineError(f"--extra-inputs: got {item!r}; allowed: KEY:VALUE")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


__all__ = ["AIPERF_IGNORED", "AIPERF_RENAMES", "GUIDELLM_PROFILES", "PERCENTILE_METRICS",
           "VLLM_DATASETS", "VLLM_DATASETS_REFUSED", "PeerOptions",
           "ResultFileSpec", "backend_api", "goodput_slo", "guidellm_data", "normal_lengths",
           "normalize_argv", "parse_extra_inputs", "parse_key_values",
           "parse_percentile_metrics", "random_lengths", "translate", "vllm_dataset",
           "wait_ready", "write_result_json"]

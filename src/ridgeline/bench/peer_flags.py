"""Peer tools' command lines for `ridgeline bench`: `vllm bench serve`, AIPerf, GuideLLM.

A `vllm bench serve` command line runs with only the program name changed. Most of vLLM's
flags are plain aliases of ours (typer options with two names); the few whose *shape*
typer cannot take are rewritten here before parsing (`normalize_argv`):

* `--metadata k=v tp=1` and `--header a=1 b=2` (argparse `nargs="*"`): one option per value;
* `--save-result` as a bare flag (vLLM) where ours takes a format: `--save-result=vllm`;
* `--profile`: vLLM's torch-profiler flag, or GuideLLM's `--profile NAME` (a rate type).

The rest of this module turns vLLM's values into ours (one-line errors for what we lack).
Flag definitions follow vLLM's `vllm/benchmarks/serve.py` (`add_cli_args`) and
`vllm/benchmarks/datasets` (`add_dataset_parser`); the table is in docs/bench.md.

>>> normalize_argv(["--metadata", "a=1", "b=2", "--save-result", "--ignore-eos"])[2:]
['--metadata', 'b=2', '--save-result=vllm', '--vllm-result-naming', '--ignore-eos']
>>> backend_api("openai-chat", None)
'chat'
>>> random_lengths(64, 0.5)
'uniform:min=32,max=96'
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ridgeline.errors import RidgelineError

# vLLM's ASYNC_REQUEST_FUNCS keys that speak OpenAI's text APIs (the others — tgi,
# deepspeed-mii, tensorrt-llm, audio and pooling backends — have their own protocols).
VLLM_COMPLETIONS_BACKENDS = ("openai", "vllm", "lmdeploy", "sglang", "scalellm", "llama.cpp",
                             "cserve")
VLLM_CHAT_BACKENDS = ("openai-chat", "cserve-chat")
VLLM_DATASETS = ("random", "sharegpt", "sonnet", "hf", "custom")
# vLLM's `--percentile-metrics` names we have (client queue time needs vLLM's client).
PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el")
GUIDELLM_PROFILES = ("synchronous", "concurrent", "throughput", "constant", "poisson", "sweep")

_MULTI_VALUE = ("--metadata", "--header")   # argparse nargs="*" in vLLM


def normalize_argv(args: list[str]) -> list[str]:
    """Rewrite vLLM/GuideLLM option shapes typer cannot parse into equivalent ones."""
    out: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        nxt = args[i + 1] if i + 1 < len(args) else None
        if a == "--":
            out.extend(args[i:])
            break
        if a in _MULTI_VALUE:
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
        elif a == "--profile" and nxt in GUIDELLM_PROFILES:
            out.extend(["--guidellm-profile", nxt])
            i += 1
        elif a == "--profile":
            out.append("--vllm-profile")
        else:
            out.append(a)
        i += 1
    return out


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


def random_lengths(length: int, range_ratio: float) -> str:
    """vLLM's random dataset length: uniform on [floor(L(1-r)), ceil(L(1+r))], as vLLM's
    `--random-range-ratio` help says; fixed when r = 0."""
    if not 0 <= range_ratio < 1:
        raise RidgelineError(f"--random-range-ratio: got {range_ratio:g}; allowed: [0, 1)")
    if range_ratio == 0:
        return f"fixed:{length}"
    lo = max(1, math.floor(length * (1 - range_ratio)))
    hi = max(lo, math.ceil(length * (1 + range_ratio)))
    return f"uniform:min={lo},max={hi}"


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


__all__ = ["GUIDELLM_PROFILES", "PERCENTILE_METRICS", "VLLM_DATASETS", "ResultFileSpec",
           "backend_api", "normalize_argv", "parse_key_values", "parse_percentile_metrics",
           "random_lengths", "wait_ready", "write_result_json"]

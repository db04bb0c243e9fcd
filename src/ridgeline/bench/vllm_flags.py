"""Every flag of `vllm bench serve --help` and what `ridgeline bench` does with it.

The table is data: one row per flag as vLLM's argument parser defines it
(`vllm/benchmarks/serve.py::add_cli_args` and `vllm/benchmarks/datasets.py::
add_dataset_parser`, vLLM 0.11), with its arity and one of three outcomes:

    accepted   ridgeline has the option (same name, same meaning; docs/bench.md)
    ignored    dropped before parsing with a one-line note saying why: the flag changes
               nothing a load test against an OpenAI-compatible server measures
    refused    a one-line error saying why: the run would not be the run vLLM's flag asks
               for, so it is not silently approximated

`nargs` is argparse's: 0 for a switch, 1 for one value, "+"/"*" for several words after one
flag (ridgeline repeats the option once per word, see `peer_flags.normalize_argv`).

>>> FLAGS["--goodput"].nargs, FLAGS["--goodput"].status
('+', 'accepted')
>>> FLAGS["--use-beam-search"].status
'refused'
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VllmFlag:
    name: str
    nargs: int | str  # 0, 1, "+" or "*"
    status: str       # accepted | ignored | refused
    reason: str = ""


_A, _I, _R = "accepted", "ignored", "refused"

_TABLE: tuple[VllmFlag, ...] = (
    # --- endpoint and request shape -----------------------------------------------------
    VllmFlag("--backend", 1, _A, "OpenAI-compatible text backends; sets --api"),
    VllmFlag("--base-url", 1, _A),
    VllmFlag("--host", 1, _A),
    VllmFlag("--port", 1, _A),
    VllmFlag("--endpoint", 1, _A, "/v1/completions or /v1/chat/completions"),
    VllmFlag("--header", "+", _A),
    VllmFlag("--model", 1, _A),
    VllmFlag("--served-model-name", 1, _A),
    VllmFlag("--tokenizer", 1, _A),
    VllmFlag("--tokenizer-mode", 1, _I, "ridgeline's tokenizer has one mode (a fast "
             "tokenizer.json or tiktoken)"),
    VllmFlag("--trust-remote-code", 0, _I, "ridgeline runs no model code; tokenizers load "
             "from tokenizer.json"),
    VllmFlag("--skip-tokenizer-init", 0, _I, "output is counted from server usage, else one "
             "token per chunk; no tokenizer is needed"),
    VllmFlag("--insecure", 0, _A),
    VllmFlag("--extra-body", 1, _A),
    VllmFlag("--request-id-prefix", 1, _I, "requests carry ridgeline's own ids in the trace"),
    VllmFlag("--lora-modules", "+", _R, "a random LoRA adapter per request is not "
             "implemented; benchmark one adapter with --model ADAPTER"),
    VllmFlag("--use-beam-search", 0, _R, "beam search is not an OpenAI streaming workload "
             "ridgeline times"),
    VllmFlag("--logprobs", 1, _A),
    VllmFlag("--ignore-eos", 0, _A),
    VllmFlag("--temperature", 1, _A),
    VllmFlag("--top-p", 1, _A),
    VllmFlag("--top-k", 1, _A),
    VllmFlag("--min-p", 1, _A),
    VllmFlag("--frequency-penalty", 1, _A),
    VllmFlag("--presence-penalty", 1, _A),
    VllmFlag("--repetition-penalty", 1, _A),
    # --- load ---------------------------------------------------------------------------
    VllmFlag("--num-prompts", 1, _A),
    VllmFlag("--request-rate", 1, _A, "a number or inf"),
    VllmFlag("--burstiness", 1, _A, "gamma arrivals of shape B"),
    VllmFlag("--max-concurrency", 1, _A),
    VllmFlag("--num-warmups", 1, _A),
    VllmFlag("--seed", 1, _A),
    VllmFlag("--ramp-up-strategy", 1, _A, "linear only (--arrival ramp); exponential is "
             "refused"),
    VllmFlag("--ramp-up-start-rps", 1, _A),
    VllmFlag("--ramp-up-end-rps", 1, _A),
    VllmFlag("--ready-check-timeout-sec", 1, _A),
    VllmFlag("--disable-tqdm", 0, _A),
    VllmFlag("--profile", 0, _R, "vLLM's torch profiler needs vLLM's server; GuideLLM's "
             "--profile NAME is accepted"),
    # --- results ------------------------------------------------------------------------
    VllmFlag("--save-result", 0, _A),
    VllmFlag("--save-detailed", 0, _A, "the per-request lists are always written"),
    VllmFlag("--append-result", 0, _A),
    VllmFlag("--metadata", "*", _A),
    VllmFlag("--result-dir", 1, _A),
    VllmFlag("--result-filename", 1, _A),
    VllmFlag("--label", 1, _A),
    VllmFlag("--percentile-metrics", 1, _A, "ttft, tpot, itl, e2el"),
    VllmFlag("--metric-percentiles", 1, _A),
    VllmFlag("--goodput", "+", _A, "KEY:VALUE words, keys ttft, tpot, e2el (ms)"),
    VllmFlag("--plot-timeline", 0, _R, "use `ridgeline report` on the trace for the "
             "timeline"),
    VllmFlag("--timeline-itl-thresholds", "+", _R, "goes with --plot-timeline"),
    # --- datasets -----------------------------------------------------------------------
    VllmFlag("--dataset-name", 1, _A, "random, sharegpt, sonnet, hf (local file), custom, "
             "prefix_repetition; the others are refused by name"),
    VllmFlag("--dataset-path", 1, _A),
    VllmFlag("--no-stream", 0, _I, "about loading a Hugging Face dataset lazily; ridgeline "
             "reads local files only"),
    VllmFlag("--no-oversample", 0, _I, "ridgeline cycles a pool smaller than --num-prompts "
             "and says so"),
    VllmFlag("--disable-shuffle", 0, _I, "file datasets are read in order already"),
    VllmFlag("--skip-chat-template", 0, _I, "the server applies the chat template; "
             "ridgeline sends text"),
    VllmFlag("--custom-skip-chat-template", 0, _I, "the server applies the chat template"),
    VllmFlag("--input-len", 1, _A),
    VllmFlag("--output-len", 1, _A),
    VllmFlag("--random-input-len", 1, _A),
    VllmFlag("--random-output-len", 1, _A),
    VllmFlag("--random-range-ratio", 1, _A),
    VllmFlag("--random-prefix-len", 1, _A),
    VllmFlag("--common-prefix-len", 1, _A, "the same option as --random-prefix-len"),
    VllmFlag("--random-batch-size", 1, _R, "batched (embedding-style) prompts are not a "
             "text-generation workload"),
    VllmFlag("--no-reranker", 0, _R, "reranker workloads are not generated"),
    VllmFlag("--random-mm-base-items-per-request", 1, _R, "multimodal prompts are not "
             "generated"),
    VllmFlag("--random-mm-num-mm-items-range-ratio", 1, _R, "multimodal prompts are not "
             "generated"),
    VllmFlag("--random-mm-limit-mm-per-prompt", 1, _R, "multimodal prompts are not "
             "generated"),
    VllmFlag("--random-mm-bucket-config", 1, _R, "multimodal prompts are not generated"),
    VllmFlag("--sharegpt-output-len", 1, _A),
    VllmFlag("--sonnet-input-len", 1, _A),
    VllmFlag("--sonnet-output-len", 1, _A),
    VllmFlag("--sonnet-prefix-len", 1, _A),
    VllmFlag("--hf-subset", 1, _R, "ridgeline downloads no dataset; give a local "
             "--dataset-path"),
    VllmFlag("--hf-split", 1, _R, "ridgeline downloads no dataset; give a local "
             "--dataset-path"),
    VllmFlag("--hf-name", 1, _R, "ridgeline downloads no dataset; give a local "
             "--dataset-path"),
    VllmFlag("--hf-output-len", 1, _A),
    VllmFlag("--custom-output-len", 1, _A),
    VllmFlag("--prefix-repetition-prefix-len", 1, _A),
    VllmFlag("--prefix-repetition-suffix-len", 1, _A),
    VllmFlag("--prefix-repetition-num-prefixes", 1, _A),
    VllmFlag("--prefix-repetition-output-len", 1, _A),
    VllmFlag("--spec-bench-output-len", 1, _R, "the spec_bench dataset is not shipped"),
    VllmFlag("--spec-bench-category", 1, _R, "the spec_bench dataset is not shipped"),
    VllmFlag("--blazedit-min-distance", 1, _R, "the blazedit dataset is not shipped"),
    VllmFlag("--blazedit-max-distance", 1, _R, "the blazedit dataset is not shipped"),
)

FLAGS: dict[str, VllmFlag] = {f.name: f for f in _TABLE}
# Several words after one flag (argparse nargs "+"/"*"): repeated once per word for typer.
MULTI_VALUE = tuple(f.name for f in _TABLE if f.nargs in ("+", "*") and f.status == _A)


def table_rows() -> list[tuple[str, str, str, str]]:
    """(flag, nargs, status, reason) rows for docs/bench.md."""
    return [(f.name, str(f.nargs), f.status, f.reason) for f in _TABLE]


__all__ = ["FLAGS", "MULTI_VALUE", "VllmFlag", "table_rows"]

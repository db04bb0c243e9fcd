"""The raw options of `ridgeline bench`, as typed on the command line (one field per option).

The command hands them over in one object; `peer_flags.translate` rewrites the peers'
options (vLLM, AIPerf, GuideLLM) into ridgeline's own fields, then `command.build` checks
them and builds the `BenchPlan`. Field names are the command function's parameter names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(kw_only=True)
class BenchArgs:
    base_url: str
    target: str
    model: str
    hardware: str
    speed: float
    emulator_arg: list[str] | None
    calibration: str | None
    api: str | None
    api_key: str | None
    header: list[str] | None
    timeout_s: float
    stall_timeout_s: float | None
    ignore_eos: bool
    min_tokens: bool
    temperature: float | None
    insecure: bool
    non_streaming: bool
    no_usage: bool
    concurrency: str | None
    rate: str | None
    arrival: str
    requests: int | None
    duration_s: float | None
    warmup: int
    prompt: str | None
    output: str | None
    dataset: str | None
    prefix_groups: int
    prefix_tokens: int
    tokenizer: str | None
    trace: str | None
    slo: list[str] | None
    max_error_rate: float | None
    grace_s: float
    workers: int
    ray: str | None
    progress: bool | None
    extra_body: str | None
    prompt_nonce: int | None
    server_metrics: str | None
    no_server_metrics: bool
    telemetry_interval_ms: float
    save_result: list[str] | None
    replay: str | None
    replay_speed: float
    multi_turn: int | None
    think_time: str
    metric_percentiles: str
    backend: str | None
    endpoint_path: str | None
    host: str | None
    port: int | None
    served_model_name: str | None
    dataset_name: str | None
    dataset_path: str | None
    input_len: int | None
    output_len: int | None
    random_input_len: int
    random_output_len: int
    random_range_ratio: float
    random_prefix_len: int
    sharegpt_output_len: int | None
    sonnet_input_len: int
    sonnet_output_len: int
    sonnet_prefix_len: int
    hf_output_len: int | None
    custom_output_len: int
    burstiness: float
    percentile_metrics: str | None
    goodput: list[str] | None
    result_dir: str | None
    result_filename: str | None
    append_result: bool
    save_detailed: bool
    metadata: list[str] | None
    label: str | None
    ready_check_timeout_s: int
    top_p: float | None
    top_k: int | None
    min_p: float | None
    frequency_penalty: float | None
    presence_penalty: float | None
    repetition_penalty: float | None
    logprobs: int | None
    cancel_rate_pct: float
    cancel_delay_s: float
    guidellm_profile: str | None
    vllm_result_naming: bool
    disable_tqdm: bool
    ramp_up_strategy: str | None
    ramp_up_start_rps: float | None
    ramp_up_end_rps: float | None
    prefix_repetition_prefix_len: int
    prefix_repetition_suffix_len: int
    prefix_repetition_num_prefixes: int
    prefix_repetition_output_len: int
    url: str | None
    endpoint_type: str | None
    streaming: bool
    isl_mean: int | None
    isl_stddev: float
    osl_mean: int | None
    osl_stddev: float
    extra_inputs: list[str] | None
    artifact_dir: str | None
    data: str | None
    output_path: str | None
    out_format: str | None
    json_out: bool
    seed: int
    report: str | None
    # `--workload` (commands/bench_workload.py) and the request plan read from it
    workload: str | None = None
    workload_trace: Any = None


__all__ = ["BenchArgs"]

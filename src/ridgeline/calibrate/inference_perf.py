"""Read a kubernetes-sigs/inference-perf run: its workload, load stages, engine flags and results.

A run directory holds `results/config.yaml` (inference-perf's own dump of the config that ran),
`results/summary_lifecycle_metrics.json` and `results/stage_N_lifecycle_metrics.json`; an
experiment directory as in ../shared/data/vllm-inference-perf adds `exp-config.yaml` (the vLLM
flags) beside `results/`. `load_run(path)` accepts either and returns an `InferencePerfRun`:
what a replay needs (the shared-prefix workload, the stages, the vLLM flags) and what it is
scored against (the measured TTFT/E2E mean and percentiles, prompt and output lengths).

The workload's shape is read from `results/config.yaml`, not from a separate profile: that is
the config inference-perf loaded (in the shared data the `profile.yaml` beside it names other
group counts than the ones that ran).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ridgeline.errors import RidgelineError
from ridgeline.workload.mini_yaml import mini_yaml as _mini_yaml

PERCENTILE_KEYS = ("min", "p0.1", "p1", "p5", "p10", "p25", "median", "p75", "p90", "p95",
                   "p99", "p99.9", "max")
PERCENTILE_LEVELS = (0.0, 0.1, 1, 5, 10, 25, 50, 75, 90, 95, 99, 99.9, 100.0)
VLLM_DEFAULT_GPU_MEMORY_UTILIZATION = 0.9   # vLLM's default when the flag is absent


@dataclass(frozen=True)
class Stage:
    rate_req_s: float
    duration_s: float

    @property
    def requests(self) -> int:
        # inference-perf's constant load sends int(rate x duration) requests per stage
        return int(self.rate_req_s * self.duration_s)


@dataclass(frozen=True)
class Measured:
    """One scope (a stage or the whole run) of the lifecycle metrics, seconds and tokens."""

    count: int
    e2e_s: dict[str, float]
    ttft_s: dict[str, float]
    prompt_len: dict[str, float]
    output_len: dict[str, float]

    @property
    def itl_s(self) -> float:
        """(E2E_mean - TTFT_mean) / (out_mean - 1): the decode time per output token."""
        return (self.e2e_s["mean"] - self.ttft_s["mean"]) / (self.output_len["mean"] - 1.0)


@dataclass
class InferencePerfRun:
    name: str
    path: Path
    model: str                  # HF model id (vLLM's --model)
    tp: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int | None
    gpu_memory_utilization: float
    num_groups: int
    prompts_per_group: int
    system_prompt_len: int
    question_len: int
    output_len: int
    ignore_eos: bool
    stages: list[Stage]
    summary: Measured
    per_stage: list[Measured] = field(default_factory=list)

    @property
    def unique_prompts(self) -> int:
        return self.num_groups * self.prompts_per_group

    @property
    def family(self) -> str:
        """The model's family for leave-one-model-out splits (the HF id's last part)."""
        return self.model.rsplit("/", 1)[-1].lower().removesuffix("-hf")


def _read_yaml_or_json(path: Path) -> dict[str, Any]:
    text = path.read_text()
    try:
        out = json.loads(text)
    except json.JSONDecodeError:
        out = _mini_yaml(text)
    if not isinstance(out, dict):
        raise RidgelineError(f"{path}: not a mapping")
    return out


def _measured(d: dict[str, Any], where: str) -> Measured:
    try:
        s = d["successes"]
        lat = s["latency"]
        pick = {k: float(v) for k, v in lat["request_latency"].items()}
        ttft = {k: float(v) for k, v in lat["time_to_first_token"].items()}
        return Measured(int(s["count"]), pick, ttft,
                        {k: float(v) for k, v in s["prompt_len"].items()},
                        {k: float(v) for k, v in s["output_len"].items()})
    except (KeyError, TypeError, ValueError) as exc:
        raise RidgelineError(f"{where}: not an inference-perf lifecycle metrics file "
                             f"(missing {exc})") from None


def load_run(path: str | Path) -> InferencePerfRun:
    """An inference-perf experiment (with exp-config.yaml) or results directory."""
    p = Path(path)
    res = p / "results" if (p / "results").is_dir() else p
    cfg_path = res / "config.yaml"
    summ_path = res / "summary_lifecycle_metrics.json"
    for f in (cfg_path, summ_path):
        if not f.is_file():
            raise RidgelineError(f"inference-perf run {str(p)!r}: {f.name} not found "
                                 "(expected an inference-perf results directory)")
    cfg = _read_yaml_or_json(cfg_path)
    data = (cfg.get("data") or {})
    sp = data.get("shared_prefix")
    if data.get("type") != "shared_prefix" or not sp:
        raise RidgelineError(f"{cfg_path}: data.type {data.get('type')!r}; allowed: "
                             "shared_prefix (the workload the replay knows)")
    load = cfg.get("load") or {}
    if load.get("type") != "constant":
        raise RidgelineError(f"{cfg_path}: load.type {load.get('type')!r}; allowed: constant")
    stages = [Stage(float(s["rate"]), float(s["duration"])) for s in load.get("stages") or []]
    if not stages:
        raise RidgelineError(f"{cfg_path}: load.stages is empty")
    server = cfg.get("server") or {}
    exp = p / "exp-config.yaml"
    flags = _read_yaml_or_json(exp) if exp.is_file() else {}
    model = str(flags.get("model") or server.get("model_name") or "")
    per_stage = []
    for k in range(len(stages)):
        f = res / f"stage_{k}_lifecycle_metrics.json"
        if f.is_file():
            per_stage.append(_measured(json.loads(f.read_text()), str(f)))
    gmu = flags.get("gpu_memory_utilization")
    return InferencePerfRun(
        name=p.name, path=p, model=model,
        tp=int(flags.get("tensor_parallelism") or flags.get("tensor_parallel_size") or 1),
        max_num_seqs=int(flags.get("max_num_seqs") or 256),
        max_num_batched_tokens=int(flags.get("max_num_batched_tokens") or 8192),
        max_model_len=int(flags["max_model_len"]) if flags.get("max_model_len") else None,
        gpu_memory_utilization=float(gmu) if gmu else VLLM_DEFAULT_GPU_MEMORY_UTILIZATION,
        num_groups=int(sp["num_groups"]), prompts_per_group=int(sp["num_prompts_per_group"]),
        system_prompt_len=int(sp["system_prompt_len"]), question_len=int(sp["question_len"]),
        output_len=int(sp["output_len"]), ignore_eos=bool(server.get("ignore_eos", False)),
        stages=stages, summary=_measured(json.loads(summ_path.read_text()), str(summ_path)),
        per_stage=per_stage)


def quantile_lengths(dist: dict[str, float], n: int) -> list[int]:
    """n lengths following a measured distribution (its reported percentiles,
    piecewise-linear between them), at the mid-quantiles (k + 0.5) / n."""
    import numpy as np

    lv = [q for q, k in zip(PERCENTILE_LEVELS, PERCENTILE_KEYS, strict=True) if k in dist]
    vals = [dist[k] for k in PERCENTILE_KEYS if k in dist]
    qs = (np.arange(n) + 0.5) / n * 100.0
    out = np.interp(qs, lv, vals)
    # keep the measured mean exactly (rounding and the interpolation move it a little)
    if "mean" in dist and n:
        out = out + (dist["mean"] - out.mean())
    return [max(1, math.floor(x + 0.5)) for x in out]


__all__ = ["InferencePerfRun", "Measured", "Stage", "load_run", "quantile_lengths"]

"""Measured serving runs to fit engine costs on: inference-perf, vLLM bench JSON, AIPerf.

`ridgeline calibrate fit --engine vllm RUN...` refits the engine's CPU costs
(ridgeline.sim.engine_costs) on a user's own runs, the way benchmarks/accuracy/bench_vllm_replay.py
fits the shipped ones:

- an inference-perf run directory (`results/` with `config.yaml` and the lifecycle metrics):
  replayed as it ran (ridgeline.calibrate.inference_perf_replay: shared-prefix prompts,
  staged arrivals);
- a per-request result file ridgeline imports (`vllm bench serve --save-result
  --save-detailed`, AIPerf's `profile_export.jsonl`; see ridgeline.trace.importers): replayed
  request for request, each sent when it was sent, with its measured prompt and output
  lengths (no prefix sharing: these files do not say which prompts shared text).

Both kinds give the measured E2E/TTFT mean/p90/p99 and ITL the fit scores against. The
engine flags (TP, max_num_seqs, ...) come from the run's exp-config.yaml where there is one,
else from the command's options.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ridgeline.calibrate.inference_perf import InferencePerfRun, Measured, Stage, load_run
from ridgeline.calibrate.inference_perf_replay import ReplayPlan
from ridgeline.errors import RidgelineError
from ridgeline.metrics.per_request import request_metrics
from ridgeline.trace.importers import detect_format, load_trace


@dataclass
class EngineFlags:
    tp: int = 1
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    gpu_memory_utilization: float = 0.9


@dataclass
class TraceRun:
    """A per-request result file as a replayable run (same interface as InferencePerfRun)."""

    name: str
    path: Path
    model: str
    family: str
    tp: int
    max_num_seqs: int
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    summary: Measured
    stages: list[Stage] = field(default_factory=list)
    per_stage: list[Measured] = field(default_factory=list)

    def replay_plan(self, seed: int = 0) -> Any:
        n = self.arrival_s.size
        return ReplayPlan(self.prompt_tokens, self.output_tokens, np.full(n, -1, np.int64),
                          np.zeros(n, np.int64), [self.arrival_s])


def _dist(x: np.ndarray) -> dict[str, float]:
    return {"mean": float(x.mean()), "p90": float(np.percentile(x, 90)),
            "p99": float(np.percentile(x, 99)), "min": float(x.min()),
            "median": float(np.median(x)), "max": float(x.max())}


def trace_run(path: Path, flags: EngineFlags, model: str = "") -> TraceRun:
    fmt = detect_format(path)
    if fmt not in ("vllm", "aiperf", "ridgeline"):
        raise RidgelineError(f"calibrate fit: {str(path)!r} is not an inference-perf run, a "
                             "vLLM bench JSON (--save-detailed) or an AIPerf "
                             "profile_export.jsonl")
    tr = load_trace(path, fmt)
    m = request_metrics(tr)
    ok = m.ok & np.isfinite(m.ttft_s) & np.isfinite(m.e2e_s) & (m.output_tokens > 1)
    if ok.sum() < 10:
        raise RidgelineError(f"calibrate fit: {str(path)!r}: {int(ok.sum())} successful "
                             "requests with per-request TTFT and E2E; allowed: >= 10 (vLLM "
                             "bench: use --save-detailed)")
    sent = tr.sent_s[ok]
    order = np.argsort(sent, kind="stable")
    arrival = (sent - sent.min())[order]
    prompt = np.maximum(tr.prompt_tokens[ok][order], 1).astype(np.int64)
    out = m.output_tokens[ok][order].astype(np.int64)
    summary = Measured(int(ok.sum()), _dist(m.e2e_s[ok]), _dist(m.ttft_s[ok]),
                       _dist(prompt.astype(float)), _dist(out.astype(float)))
    duration = float(arrival[-1]) if arrival.size > 1 else 1.0
    name = path.stem
    return TraceRun(name=name, path=path, model=model or tr.header.model or "",
                    family=model or tr.header.model or name, tp=flags.tp,
                    max_num_seqs=flags.max_num_seqs,
                    max_num_batched_tokens=flags.max_num_batched_tokens,
                    gpu_memory_utilization=flags.gpu_memory_utilization,
                    arrival_s=arrival, prompt_tokens=prompt, output_tokens=out,
                    summary=summary, stages=[Stage(arrival.size / max(duration, 1e-9),
                                                   duration)], per_stage=[summary])


def is_inference_perf_run(path: Path) -> bool:
    res = path / "results" if (path / "results").is_dir() else path
    return path.is_dir() and (res / "summary_lifecycle_metrics.json").is_file()


def load_measured_runs(paths: list[str], flags: EngineFlags | None = None,
                       model: str = "") -> list[InferencePerfRun | TraceRun]:
    flags = flags or EngineFlags()
    runs: list[InferencePerfRun | TraceRun] = []
    for s in paths:
        p = Path(s)
        if not p.exists():
            raise RidgelineError(f"calibrate fit: {s!r} not found")
        if p.is_dir() and not is_inference_perf_run(p):
            # a folder of inference-perf experiments (as ../shared/data/.../experiments)
            subs = sorted(q for q in p.iterdir() if is_inference_perf_run(q))
            if not subs:
                raise RidgelineError(f"calibrate fit: {s!r} holds no inference-perf run "
                                     "(results/summary_lifecycle_metrics.json)")
            runs.extend(load_run(q) for q in subs)
        elif p.is_dir():
            runs.append(load_run(p))
        else:
            runs.append(trace_run(p, flags, model))
    return runs


def model_config_for(run: Any, model: str | None) -> str:
    """The model spec of a run: `--model` if given, else the HF config.json in a
    model_configs/<name>/ folder beside the experiments folder (the shared data's layout)."""
    if model:
        return model
    name = str(getattr(run, "model", "")).rsplit("/", 1)[-1]
    for up in Path(run.path).resolve().parents[:3]:
        cand = up / "model_configs" / name / "config.json"
        if name and cand.is_file():
            return str(cand)
    raise RidgelineError(f"--model: run {run.name!r} names model {run.model!r} and no "
                         "model_configs/<name>/config.json lies beside it; allowed: a catalog "
                         "model or a path to its HF config.json")


__all__ = ["EngineFlags", "TraceRun", "is_inference_perf_run", "load_measured_runs",
           "model_config_for", "trace_run"]

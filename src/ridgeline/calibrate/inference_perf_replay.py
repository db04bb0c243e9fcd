"""Replay an inference-perf run through the simulator, as it ran, and score the prediction.

The replay rebuilds what the client sent and what the engine was told:

- the shared-prefix workload: `num_groups x num_prompts_per_group` distinct prompts (a group's
  system prompt followed by its own question), sent in turn (request i carries prompt
  i mod N, as inference-perf's data generator cycles its list), with prompt lengths following
  the run's measured prompt-length distribution (the client's re-count: about 1.047 x
  (system + question) on the Llama-2 tokenizers) and `output_len` tokens out (ignore_eos);
  each distinct prompt is its own prefix group over all its tokens, so the engine's prefix
  cache hits a prompt's full blocks when it comes round again (vLLM's automatic prefix
  caching; at least one token is always computed);
- the stages one after another, each with inference-perf's constant-load arrivals
  (int(rate x duration) exponential gaps rescaled to sum to the stage's duration), a stage
  starting when the previous stage's last request finished;
- the vLLM flags (TP, max_num_seqs, max_num_batched_tokens, gpu_memory_utilization, chunked
  prefill and prefix caching on);
- the client's timeout: a request still running `client_timeout_s` after it was sent is a
  failure, left out of the success metrics (inference-perf's aiohttp session has the 300 s
  default total timeout; the shared data's overloaded runs end their latencies at 300 s).

Replications: a run's measured p99 is one draw of its arrival process, and so is a replay's.
Near a run's capacity (an M/G/c queue at ~0.9 of its slots) the replay's TTFT p99 moved by
up to 2x between arrival seeds, so `replay` averages each predicted metric over
`REPLICATIONS` independent arrival draws (seeds seed, seed + 1, ...): the prediction is the
expected metric, not one sample of it. Runs whose arrivals were measured (per-request result
files) replay once.

Scores: APE = |pred - actual| / actual over the whole run for E2E and TTFT mean/p90/p99 and
ITL = (E2E_mean - TTFT_mean) / (out_mean - 1). The predicted ITL divides by the same measured
out_mean as the actual one: the client re-counts output tokens from the text (Llama-2-7B's
247 generated tokens re-count as ~195), so a different divisor would score token counting,
not timing; ITL's APE is then exactly the APE of the mean decode duration E2E - TTFT.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ridgeline.calibrate.inference_perf import InferencePerfRun, quantile_lengths
from ridgeline.sim.engine_costs import run_mean_step_s
from ridgeline.sim.event_loop import Workload, simulate
from ridgeline.workload.load_test_configs import constant_load_arrivals_s

METRICS = ("e2e_mean", "e2e_p90", "e2e_p99", "ttft_mean", "ttft_p90", "ttft_p99", "itl")
INFERENCE_PERF_CLIENT_TIMEOUT_S = 300.0   # aiohttp.ClientTimeout's default total
# arrival draws averaged per prediction (benchmarks/accuracy/bench_vllm_replay.py)
REPLICATIONS = 8


@dataclass
class ReplayPlan:
    """The workload arrays of a replay, before stage offsets."""

    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    prefix_group: np.ndarray
    stage_of: np.ndarray
    stage_gaps_s: list[np.ndarray]


def plan_replay(run: InferencePerfRun, seed: int = 0) -> ReplayPlan:
    if hasattr(run, "replay_plan"):      # a per-request result file (calibrate.engine_runs)
        return run.replay_plan(seed)
    rng = np.random.default_rng(seed)
    u = run.unique_prompts
    lengths = np.array(quantile_lengths(run.summary.prompt_len, u), dtype=np.int64)
    lengths = lengths[rng.permutation(u)]    # inference-perf shuffles its prompt list once
    gaps = [constant_load_arrivals_s(s.rate_req_s, s.duration_s, rng) for s in run.stages]
    n = sum(g.size for g in gaps)
    idx = np.arange(n) % u
    stage_of = np.concatenate([np.full(g.size, k) for k, g in enumerate(gaps)])
    out = np.full(n, run.output_len, dtype=np.int64)
    return ReplayPlan(lengths[idx], out, idx.astype(np.int64), stage_of, gaps)


@dataclass
class Prediction:
    """Predicted metrics over the whole run (seconds), per-stage ITL and counters."""

    values: dict[str, float]
    stage_itl_s: list[float]
    stage_ttft_mean_s: list[float]
    failed: int
    finished: int
    preemptions: int
    wall_s: float
    extra: dict[str, Any] = field(default_factory=dict)
    raw: Any = None


def _simulate(plan: ReplayPlan, starts: list[float], built: Any, upto: int,
              timeout_s: float | None = None) -> Any:
    m = plan.stage_of <= upto
    arr = np.concatenate([starts[k] + plan.stage_gaps_s[k] for k in range(upto + 1)])
    wl = Workload(plan.prompt_tokens[m], plan.output_tokens[m], arrival_s=arr,
                  prefix_group=plan.prefix_group[m], prefix_tokens=plan.prompt_tokens[m],
                  timeout_s=timeout_s)
    return simulate(wl, built.config, built.step_model, built.cluster)


def replay(run: InferencePerfRun, built: Any, *, seed: int = 0,
           client_timeout_s: float = INFERENCE_PERF_CLIENT_TIMEOUT_S,
           replications: int = REPLICATIONS) -> Prediction:
    """Simulate the run with `built` (a `ridgeline.sim.scenario.Built`) and measure it as
    inference-perf would, averaged over `replications` arrival draws (one when the run's
    arrivals were measured). `score_raw` can add a per-request overhead to the kept
    per-request times (`Prediction.raw`), so a fit can vary it without re-simulating.

    Client timeouts: a request that has not finished `client_timeout_s` after it was sent is
    aborted by the client, and vLLM drops it (from the waiting queue, or mid-decode, freeing
    its slot and KV). When the run has such requests, the replay runs again with the
    workload's timeout (the Python engine, step by step, aborts each at its deadline); they
    are failures."""
    import time

    if replications < 1:
        raise ValueError(f"replications: must be >= 1, got {replications}")
    if hasattr(run, "replay_plan"):     # measured arrivals: every draw would be the same
        replications = 1
    t0 = time.perf_counter()
    draws = [_replay_once(run, built, seed + k, client_timeout_s) for k in range(replications)]
    raws = [raw for raw, _ in draws]
    pred = score_raw(run, raws, 0.0, 0.0, client_timeout_s)
    pred.wall_s = time.perf_counter() - t0
    pred.preemptions = int(np.mean([extra["preemptions"] for _, extra in draws]))
    pred.extra = {"engine_core": draws[0][1]["engine_core"], "requests": draws[0][1]["requests"],
                  "timed_out": int(np.mean([extra["timed_out"] for _, extra in draws])),
                  "replications": replications}
    pred.raw = raws
    return pred


def _replay_once(run: InferencePerfRun, built: Any, seed: int,
                 client_timeout_s: float) -> tuple[RawReplay, dict[str, Any]]:
    plan = plan_replay(run, seed)
    starts = [0.0]
    res = None
    last = len(run.stages) - 1
    for k in range(len(run.stages)):
        res = _simulate(plan, starts, built, k)
        if k < last:
            # the next stage starts when this stage's last request has finished
            starts.append(float(np.nanmax(res.end_s[plan.stage_of[:len(res)] == k])))
    assert res is not None
    if float(np.nanmax(res.end_s - res.sent_s)) > client_timeout_s:
        res = _simulate(plan, starts, built, last, client_timeout_s)
    off = res.event_offsets
    n_tok = np.diff(off)
    done = np.array([st == "ok" for st in res.status]) & (n_tok > 0)
    safe = np.minimum(off[:-1], max(res.event_times_s.size - 1, 0))
    first = np.where(done, res.event_times_s[safe], np.inf)
    lastt = np.where(done, res.event_times_s[np.maximum(off[1:] - 1, 0)], np.inf)

    # the per-request cost counts steps of the run's mean decode step (as `simulate` does)
    ev = res.event_times_s
    multi = n_tok > 1
    every = np.zeros(n_tok.size)
    every[multi] = (ev[off[1:][multi] - 1] - ev[off[:-1][multi]]) / (n_tok[multi] - 1)
    gap = np.full(n_tok.size, run_mean_step_s(n_tok, every))
    raw = RawReplay(first - res.sent_s, lastt - res.sent_s, gap, done, plan.stage_of,
                    np.where(multi, every, np.nan))
    extra = {"engine_core": res.core, "requests": len(res),
             "preemptions": int(res.preemptions.sum()),
             "timed_out": int(sum(st == "error" for st in res.status))}
    return raw, extra


@dataclass
class RawReplay:
    """Per-request simulated times before the per-request overhead (seconds)."""

    ttft_s: np.ndarray
    e2e_s: np.ndarray
    gap_s: np.ndarray        # the run's mean decode step (what the per-request cost counts)
    done: np.ndarray
    stage_of: np.ndarray
    decode_step_s: np.ndarray  # each request's own mean token gap (NaN below two tokens)


def score_raw(run: InferencePerfRun, raw: Sequence[RawReplay], overhead_s: float,
              overhead_steps: float,
              client_timeout_s: float = INFERENCE_PERF_CLIENT_TIMEOUT_S) -> Prediction:
    """The run's predicted metrics with a per-request overhead of `overhead_s` +
    `overhead_steps` x the request's mean decode step (a pure time shift: no re-simulation):
    each metric the mean of the replications' values (`Prediction.raw` of `replay`)."""
    preds = [_score_one(run, r, overhead_s, overhead_steps, client_timeout_s) for r in raw]
    with np.errstate(invalid="ignore"):
        vals = {m: float(np.mean([p.values[m] for p in preds])) for m in METRICS}
        s_itl = np.mean([p.stage_itl_s for p in preds], axis=0).tolist()
        s_ttft = np.mean([p.stage_ttft_mean_s for p in preds], axis=0).tolist()
    failed = round(float(np.mean([p.failed for p in preds])))
    finished = round(float(np.mean([p.finished for p in preds])))
    return Prediction(vals, s_itl, s_ttft, failed, finished, 0, 0.0)


def _score_one(run: InferencePerfRun, raw: RawReplay, overhead_s: float, overhead_steps: float,
               client_timeout_s: float) -> Prediction:
    shift = overhead_s + overhead_steps * raw.gap_s
    ttft = raw.ttft_s + shift
    e2e = raw.e2e_s + shift
    ok = raw.done & (e2e <= client_timeout_s)
    stage_of = raw.stage_of

    def stats(x: np.ndarray) -> tuple[float, float, float]:
        return float(x.mean()), float(np.percentile(x, 90)), float(np.percentile(x, 99))

    if not ok.any():
        nan = float("nan")
        vals = dict.fromkeys(METRICS, nan)
    else:
        em, e90, e99 = stats(e2e[ok])
        tm, t90, t99 = stats(ttft[ok])
        out_mean = run.summary.output_len["mean"]
        vals = {"e2e_mean": em, "e2e_p90": e90, "e2e_p99": e99, "ttft_mean": tm,
                "ttft_p90": t90, "ttft_p99": t99, "itl": (em - tm) / (out_mean - 1.0)}
    s_itl, s_ttft = [], []
    for k in range(len(run.stages)):
        mk = ok & (stage_of == k)
        if not mk.any():
            s_itl.append(float("nan"))
            s_ttft.append(float("nan"))
            continue
        out_k = (run.per_stage[k].output_len["mean"] if k < len(run.per_stage)
                 else run.summary.output_len["mean"])
        s_itl.append(float((e2e[mk].mean() - ttft[mk].mean()) / (out_k - 1.0)))
        s_ttft.append(float(ttft[mk].mean()))
    return Prediction(vals, s_itl, s_ttft, int((~ok).sum()), int(ok.sum()), 0, 0.0)


def actual_values(run: InferencePerfRun) -> dict[str, float]:
    s = run.summary
    return {"e2e_mean": s.e2e_s["mean"], "e2e_p90": s.e2e_s["p90"], "e2e_p99": s.e2e_s["p99"],
            "ttft_mean": s.ttft_s["mean"], "ttft_p90": s.ttft_s["p90"],
            "ttft_p99": s.ttft_s["p99"], "itl": s.itl_s}


def ape(pred: dict[str, float], actual: dict[str, float]) -> dict[str, float]:
    return {k: abs(pred[k] - actual[k]) / actual[k] for k in METRICS}


__all__ = ["INFERENCE_PERF_CLIENT_TIMEOUT_S", "METRICS", "REPLICATIONS", "Prediction",
           "ReplayPlan", "actual_values", "ape", "constant_load_arrivals_s", "plan_replay",
           "replay"]

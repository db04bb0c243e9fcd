"""Fit an engine's CPU costs (ridgeline.sim.engine_costs) on replayed real runs.

Input: inference-perf runs (`ridgeline.calibrate.inference_perf`) and, for each, a `Built`
simulator setup of the same model, GPU and flags. The fit:

1. per step (`step_overhead_s`): the runs are replayed with two trial values; each run's ITL
   is close to linear in it, so the value that minimises the mean ITL APE over the runs is
   found on the line through the two points, and checked by a third replay;
2. per request (`request_overhead_s`, `request_overhead_steps`): a time shift of every token
   of a request, so no re-simulation: a grid search over (fixed seconds, steps) for the
   lowest mean APE of TTFT and E2E mean/p90/p99 over the runs, each APE capped at 100% (a
   run that queues away in the simulation cannot be mended by a shift and must not pull it).
   Where the engine's scheduling lag is known by structure (`SCHEDULING_LAG_STEPS`: vLLM V1,
   one step) the steps are that and only the seconds are searched: fitted freely, the two
   trade against each other on runs whose steps are alike (three TP > 1 models at 15-21 ms
   picked 0.5 ms + 1.475 steps where all four pick 7 ms + 1.05).

`fit_engine_costs` returns the values, the training residual (the mean APE per metric) and
`cross_validate` the leave-one-group-out scores (fit on every family but one, score it).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ridgeline.calibrate.inference_perf import InferencePerfRun
from ridgeline.calibrate.inference_perf_replay import (
    METRICS,
    REPLICATIONS,
    Prediction,
    actual_values,
    ape,
    replay,
    score_raw,
)
from ridgeline.sim.engine_costs import SCHEDULING_LAG_STEPS, EngineCosts
from ridgeline.sim.scenario import Built, Scenario

LATENCY_METRICS = ("e2e_mean", "e2e_p90", "e2e_p99", "ttft_mean", "ttft_p90", "ttft_p99")
OVERHEAD_GRID_S = np.arange(0.0, 0.0401, 0.001)
OVERHEAD_STEPS_GRID = np.arange(0.0, 3.001, 0.05)
STEP_TRIALS_S = (0.0, 0.002)
APE_CAP = 1.0   # the per-request fit's loss: APE terms above 100% count as 100%


@dataclass
class FitResult:
    values: dict[str, float]
    train_ape: dict[str, float]              # mean APE over the training runs, per metric
    per_run: dict[str, dict[str, float]]     # run name -> metric -> APE
    runs: list[str]
    notes: list[str] = field(default_factory=list)


BuildFn = Callable[[InferencePerfRun, float], Any]   # (run, step_overhead_s) -> Built


def _replays(runs: Sequence[InferencePerfRun], build: BuildFn, step_s: float,
             cache: dict[tuple[str, float], Prediction],
             replications: int = REPLICATIONS) -> list[Prediction]:
    out = []
    for r in runs:
        key = (f"{r.name}#{replications}", round(step_s, 9))
        if key not in cache:
            cache[key] = replay(r, build(r, step_s), replications=replications)
        out.append(cache[key])
    return out


def _mean_ape(runs: Sequence[InferencePerfRun], preds: Sequence[Prediction],
              metrics: Sequence[str]) -> float:
    vals = [ape(p.values, actual_values(r)) for r, p in zip(runs, preds, strict=True)]
    return float(np.mean([[v[m] for m in metrics] for v in vals]))


def fit_step_overhead(runs: Sequence[InferencePerfRun], build: BuildFn,
                      cache: dict[tuple[str, float], Prediction],
                      replications: int = REPLICATIONS) -> float:
    """The per-step CPU seconds that best fits the runs' ITL (>= 0)."""
    a, b = STEP_TRIALS_S
    pa = _replays(runs, build, a, cache, replications)
    pb = _replays(runs, build, b, cache, replications)
    act = np.array([actual_values(r)["itl"] for r in runs])
    ia = np.array([p.values["itl"] for p in pa])
    ib = np.array([p.values["itl"] for p in pb])
    slope = (ib - ia) / (b - a)
    # minimise sum_i |ia_i + slope_i x - act_i| / act_i: a weighted median of the per-run roots
    ok = slope > 0
    if not ok.any():
        return 0.0
    roots = ((act - ia) / slope)[ok]
    w = (slope / act)[ok]
    order = np.argsort(roots)
    cw = np.cumsum(w[order])
    x = float(roots[order][np.searchsorted(cw, cw[-1] / 2.0)])
    return max(0.0, round(x, 4))   # 0.1 ms steps: CV folds share cached replays


def fit_request_overhead(runs: Sequence[InferencePerfRun], preds: Sequence[Prediction],
                         lag_steps: float | None = None) -> tuple[float, float]:
    """(fixed seconds, steps) minimising the mean APE of TTFT and E2E mean/p90/p99: a coarse
    grid, then a finer one around its best point; with `lag_steps` the steps are that and
    only the seconds are searched."""
    acts = [actual_values(r) for r in runs]

    def loss(c: float, k: float) -> float:
        tot = 0.0
        for r, p, a in zip(runs, preds, acts, strict=True):
            v = score_raw(r, p.raw, c, k).values
            # each APE capped at APE_CAP: a run the engine costs cannot mend (one that
            # queues away in the simulation, say) must not drag the fit for the others
            tot += sum(min(abs(v[m] - a[m]) / a[m], APE_CAP) for m in LATENCY_METRICS)
        return tot

    def search(cs: np.ndarray, ks: np.ndarray) -> tuple[float, float, float]:
        best = (np.inf, 0.0, 0.0)
        for k in ks:
            for c in cs:
                x = loss(float(c), float(k))
                if x < best[0]:
                    best = (x, float(c), float(k))
        return best

    if lag_steps is not None:
        _, c, k = search(np.arange(0.0, OVERHEAD_GRID_S[-1] + 1e-9, 0.0005),
                         np.array([lag_steps]))
        return round(c, 6), round(k, 4)
    _, c, k = search(OVERHEAD_GRID_S[::2], OVERHEAD_STEPS_GRID[::2])
    _, c, k = search(np.clip(c + np.arange(-0.002, 0.00201, 0.0005), 0, None),
                     np.clip(k + np.arange(-0.1, 0.1001, 0.025), 0, None))
    return round(c, 6), round(k, 4)


def score_runs(runs: Sequence[InferencePerfRun], build: BuildFn, values: dict[str, float],
               cache: dict[tuple[str, float], Prediction],
               replications: int = REPLICATIONS) -> dict[str, dict[str, float]]:
    preds = _replays(runs, build, values.get("step_overhead_s", 0.0), cache, replications)
    out = {}
    for r, p in zip(runs, preds, strict=True):
        scored = score_raw(r, p.raw, values.get("request_overhead_s", 0.0),
                           values.get("request_overhead_steps", 0.0))
        v = scored.values
        # each stage's decode (the per-request shift cancels out of it): the mean over the
        # run's stages of |pred - measured| / measured
        stage_ape = [abs(q - a.itl_s) / a.itl_s
                     for a, q in zip(r.per_stage, scored.stage_itl_s, strict=False)]
        # pred_successes: requests that finished within the client's timeout
        # (inference-perf's successes)
        out[r.name] = {**ape(v, actual_values(r)), **{f"pred_{m}": v[m] for m in METRICS},
                       "pred_successes": float(scored.finished),
                       "stage_itl": float(np.mean(stage_ape)) if stage_ape else float("nan")}
    return out


NO_CV = "none: the runs are of one model family, so no model can be held out"


def fit_engine_costs(runs: Sequence[InferencePerfRun], build: BuildFn,
                     cache: dict[tuple[str, float], Prediction] | None = None,
                     fit_step: bool = True, replications: int = REPLICATIONS,
                     lag_steps: float | None = None) -> FitResult:
    cache = {} if cache is None else cache
    step_s = fit_step_overhead(runs, build, cache, replications) if fit_step else 0.0
    preds = _replays(runs, build, step_s, cache, replications)
    c0, k = fit_request_overhead(runs, preds, lag_steps)
    values = {"request_overhead_s": c0, "request_overhead_steps": k, "step_overhead_s": step_s}
    per_run = score_runs(runs, build, values, cache, replications)
    train = {m: float(np.mean([per_run[r.name][m] for r in runs])) for m in METRICS}
    return FitResult(values, train, per_run, [r.name for r in runs])


def cross_validate(runs: Sequence[InferencePerfRun], build: BuildFn,
                   cache: dict[tuple[str, float], Prediction] | None = None,
                   fit_step: bool = True, replications: int = REPLICATIONS,
                   lag_steps: float | None = None
                   ) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """Leave one model family out: {run: APEs of the held-out prediction}, {family: values}."""
    cache = {} if cache is None else cache
    families = sorted({r.family for r in runs})
    scores: dict[str, dict[str, float]] = {}
    fold_values: dict[str, dict[str, float]] = {}
    for fam in families:
        train = [r for r in runs if r.family != fam]
        test = [r for r in runs if r.family == fam]
        fit = fit_engine_costs(train, build, cache, fit_step, replications, lag_steps)
        fold_values[fam] = fit.values
        scores.update(score_runs(test, build, fit.values, cache, replications))
    return scores, fold_values


def provenance(runs: Sequence[InferencePerfRun], fit: FitResult,
               cv: dict[str, dict[str, float]] | None, data_root: str,
               replications: int = REPLICATIONS) -> dict[str, Any]:
    """`cv` None: runs of one model family, so there is no held-out model and the file
    says so instead of repeating the training error as if it were cross-validated."""
    if cv is None:
        cv_mean: dict[str, float] = {}
        cv_error = NO_CV
    else:
        cv_mean = {m: float(np.mean([cv[n][m] for n in fit.runs])) for m in METRICS}
        cv_error = "leave-one-model-out mean APE " + ", ".join(
            f"{m} {cv_mean[m]:.1%}" for m in METRICS)
    return {
        "fitted_on": f"{data_root}: {len(runs)} inference-perf runs "
                     f"(results/summary_lifecycle_metrics.json of each)",
        "data": data_root.rstrip("/").rsplit("/", 1)[-1],
        "runs": [r.name for r in runs],
        "date": _dt.date.today().isoformat(),
        "residual": "mean APE train " + ", ".join(f"{m} {fit.train_ape[m]:.1%}"
                                                  for m in METRICS),
        "cv_error": cv_error,
        "train_ape": fit.train_ape, "cv_ape": cv_mean,
        "method": "ridgeline.calibrate.engine_fit (benchmarks/accuracy/bench_vllm_replay.py)",
        "replications": replications,
    }


def make_build(model_for: Callable[[Any], str], hardware: str) -> BuildFn:
    """Simulator setups of each run (its model, the GPU, its vLLM flags) with a given
    per-step CPU cost and no per-request cost (the fit adds that itself)."""
    cache: dict[tuple[str, float], Any] = {}

    def build(run: Any, step_overhead_s: float) -> Any:
        key = (run.name, step_overhead_s)
        if key not in cache:
            sc = Scenario(model=model_for(run), hardware=hardware, tp=run.tp,
                          max_num_seqs=run.max_num_seqs,
                          max_num_batched_tokens=run.max_num_batched_tokens,
                          gpu_memory_utilization=run.gpu_memory_utilization,
                          chunked_prefill=True, prefix_caching=True, engine_costs=False)
            sm = sc.step_model(costs=EngineCosts(step_overhead_s=step_overhead_s))
            cache[key] = Built(sm, sc.engine_config(sm), sc.cluster_config(sm))
        return cache[key]

    return build


def catalog_document(engine: str, fit: FitResult, prov: dict[str, Any],
                     folds: dict[str, dict[str, float]]) -> dict[str, Any]:
    """The engine costs file (`--engine FILE`, specs/data/engines/<engine>.json)."""
    return {
        "engine": engine,
        "description": f"{engine} costs outside the GPU kernels, fitted by replaying measured "
                       "runs (docs/engine.md, ridgeline.sim.engine_costs)",
        "costs": {k: {"value": v, "unit": "steps" if k.endswith("_steps") else "s",
                      "cv_fold_values": {f: fv[k] for f, fv in folds.items()}}
                  for k, v in fit.values.items()},
        "provenance": prov,
    }


def fit_engine_document(runs: Sequence[Any], build: BuildFn, engine: str, data_label: str,
                        fit_step: bool = True,
                        cache: dict[tuple[str, float], Prediction] | None = None,
                        replications: int = REPLICATIONS
                        ) -> tuple[dict[str, Any], FitResult, dict[str, dict[str, float]]]:
    """Fit on all runs, cross-validate leaving one model family out (when there are two or
    more), and build the catalog document with provenance. Each replay averages
    `replications` arrival draws (`ridgeline.calibrate.inference_perf_replay`); the engine's
    scheduling lag in steps is its structural value where known (`SCHEDULING_LAG_STEPS`),
    else fitted."""
    cache = {} if cache is None else cache
    lag = SCHEDULING_LAG_STEPS.get(engine)
    fit = fit_engine_costs(runs, build, cache, fit_step, replications, lag)
    if lag is not None:
        fit.notes.append(f"request_overhead_steps: {lag:g}, {engine}'s scheduling lag by "
                         "structure (not fitted)")
    cv: dict[str, dict[str, float]] | None = None
    folds: dict[str, dict[str, float]] = {}
    if len({r.family for r in runs}) >= 2:
        cv, folds = cross_validate(runs, build, cache, fit_step, replications, lag)
    else:
        fit.notes.append("one model family: no cross-validation; fit on runs of two or more "
                         "models to get a held-out error")
    prov = provenance(runs, fit, cv, data_label, replications)
    if lag is not None:
        prov["not_fitted"] = {"request_overhead_steps": f"{lag:g}: {engine}'s scheduling lag "
                              "by structure (ridgeline.sim.engine_costs.SCHEDULING_LAG_STEPS)"}
    return catalog_document(engine, fit, prov, folds), fit, fit.per_run if cv is None else cv


__all__ = [
    "FitResult",
    "catalog_document",
    "cross_validate",
    "fit_engine_costs",
    "fit_engine_document",
    "fit_request_overhead",
    "fit_step_overhead",
    "make_build",
    "provenance",
    "score_runs",
]

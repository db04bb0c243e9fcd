"""Model-error intervals: hand-computed intervals from a residual table written here, the
out-of-data widening, and the JSON fields of the installed `ridgeline simulate/estimate`."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from ridgeline.metrics.prediction_interval import (
    Distance,
    annotate_estimate,
    calibrated_stat_interval,
    conformal_halfwidth,
    conformal_rank,
    distance_from_data,
    family_out_scores,
    load_catalog,
    predict_interval,
    regime_of,
    residual_interval,
    residual_table,
    t_quantile,
)

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")

# Five held-out log-ratios ln(pred/measured). By hand: mean 0.01; deviations 0.09, -0.06,
# 0.01, 0.07, -0.11, squares sum 0.0288, sd = sqrt(0.0288/4) = 0.0848528.
R5 = [0.10, -0.05, 0.02, 0.08, -0.10]
SD5 = math.sqrt(0.0288 / 4)
# t(4, 0.90) = 1.533 and t(4, 0.975) = 2.776 from a printed t table.
HALF80 = 1.533 * SD5 * math.sqrt(1 + 1 / 5)
HALF95 = 2.776 * SD5 * math.sqrt(1 + 1 / 5)


# Nine held-out runs (family, regime, log-ratio) for the shipped rule, by hand.
# 80%, centred at zero: below the knee holds 5 runs (>= 4: its own scale), |r| sorted .02 .05
# .08 .10 .10, rank ceil(6 x 0.8) = 5 -> 0.10. Overloaded and near the knee (2 runs each) and
# "all" take all nine |r|: .02 .05 .08 .10 .10 .2 .3 .5 .6, rank ceil(10 x 0.8) = 8 -> 0.5.
# 95%, zero-centred over all nine: rank 10 > 9 -> the largest, 0.6 (capped).
# Family-out scores (each family's runs against centres from the other families only):
#   without a: b, c left; below b -.05, c .08, b .10 (3 runs, 2 families: own median .08),
#     others the median of all five left (-.05 .08 .10 .2 .6) = .10; a's runs: below -.10 ->
#     .18, below .02 -> .06, overloaded .3 -> .20, near .5 -> .40;
#   without b: below a -.10, a .02, c .08 -> .02; all six (-.10 .02 .08 .2 .3 .5) -> .14;
#     b's runs: -.05 -> .07, .10 -> .08, near .6 -> .46;
#   without c: below a -.10, b -.05, a .02, b .10 -> -.015; all seven -> .10; c's runs: .08 ->
#     .095, overloaded .2 -> .10.
# Sorted .06 .07 .08 .095 .10 .18 .20 .40 .46; 95% rank 10 > 9 -> 0.46. Regime centres of all
# nine: below .02 (own), the others the median of all, .10: below's 95% hull of [-.1, .1],
# [-.6, .6] and [.02 - .46, .02 + .46] is [-.6, .6].
HAND_RUNS = [("a", "below_knee", -0.10), ("b", "below_knee", -0.05), ("a", "below_knee", 0.02),
             ("c", "below_knee", 0.08), ("b", "below_knee", 0.10), ("c", "overloaded", 0.2),
             ("a", "overloaded", 0.3), ("a", "near_knee", 0.5), ("b", "near_knee", 0.6)]
C_BELOW, H80, H80_ALL, H95 = 0.0, 0.10, 0.5, 0.6
FAMILY_OUT = [0.06, 0.07, 0.08, 0.095, 0.10, 0.18, 0.20, 0.40, 0.46]
# engine without fitted costs: four below-knee runs of two families whose offsets differ in
# sign. 80%: |r| .4 .4 .2 .2, rank ceil(5 x 0.8) = 4 -> 0.4. Family-out: without a, only b's
# -.4, -.2 (one family: no own centre) -> centre -.3, a's scores .7 .5; likewise b's .7 .5;
# 95% rank 5 > 4 -> 0.7 around the median 0: [-.7, .7], wider than the zero-centred 0.4.
UNFITTED = [("a", "below_knee", 0.4), ("b", "below_knee", -0.4), ("a", "below_knee", 0.2),
            ("b", "below_knee", -0.2)]


def _runs(spec: list[tuple[str, str, float]], metric: str = "ttft_mean"
          ) -> list[dict[str, object]]:
    return [{"run": f"run{i}", "family": f, "regime": g, "log_ratio": {metric: r}}
            for i, (f, g, r) in enumerate(spec)]


def _catalog() -> dict[str, object]:
    return {"replay_hardware": "gpu-a", "fitted_engines": ["vllm"],
            "residuals": residual_table(_runs(HAND_RUNS), ("ttft_mean",)),
            "engine_unfitted": residual_table(_runs(UNFITTED), ("ttft_mean",)),
            "kernel_fit_cv": {"gpus": {"gpu-b": {"gemm_cv_median_ape": {"vllm": {"bf16": 0.1}},
                                                 "memory_bandwidth_bytes_s": 4e12},
                                       "gpu-c": {"gemm_cv_median_ape": {"vllm": {"bf16": 0.2}},
                                                 "memory_bandwidth_bytes_s": 1e12}}}}


def test_conformal_intervals_by_hand() -> None:
    assert conformal_rank(9, 80) == 8 and conformal_rank(9, 95) == 10
    assert conformal_rank(4, 80) == 4 and conformal_rank(16, 80) == 14
    assert conformal_halfwidth([0.3, -0.1, 0.2, 0.0, 0.4], 80) == (0.4, 5, False)
    assert conformal_halfwidth([0.3, -0.1, 0.2, 0.0, 0.4], 95) == (0.4, 5, True)
    runs = _runs(HAND_RUNS)
    assert sorted(family_out_scores(runs, "ttft_mean")) == pytest.approx(FAMILY_OUT)
    tab = residual_table(runs, ("ttft_mean",))["ttft_mean"]
    assert tab["below_knee"]["interval80"] == pytest.approx([-H80, H80])
    assert tab["below_knee"]["interval95"] == pytest.approx([-H95, H95])
    assert tab["below_knee"]["scale_n"] == 5 and tab["all"]["scale_n"] == 9
    for reg in ("near_knee", "overloaded", "all"):
        assert tab[reg]["interval80"] == pytest.approx([-H80_ALL, H80_ALL])
    assert tab["below_knee"]["conformal"]["95"]["capped"] is True
    assert tab["below_knee"]["conformal"]["80"]["rank"] == 5
    assert tab["all"]["conformal"]["80"]["rank"] == 8
    un = residual_table(_runs(UNFITTED), ("ttft_mean",))["ttft_mean"]["below_knee"]
    assert un["interval80"] == pytest.approx([-0.4, 0.4])
    assert un["interval95"] == pytest.approx([-0.7, 0.7])


def test_t_prediction_interval_by_hand() -> None:
    assert residual_interval(R5, 80) == pytest.approx((0.01 - HALF80, 0.01 + HALF80), abs=1e-9)
    assert residual_interval(R5, 95) == pytest.approx((0.01 - HALF95, 0.01 + HALF95), abs=1e-9)
    assert t_quantile(4, 80) == 1.533 and t_quantile(29, 95) == 2.045
    # two model families among the five runs: t(1, 0.90) = 3.078 and the 1/k term of k = 2
    half = 3.078 * SD5 * math.sqrt(1 + 1 / 2)
    assert residual_interval(R5, 80, units=2) == pytest.approx((0.01 - half, 0.01 + half))
    with pytest.raises(ValueError):
        residual_interval([0.1], 80)


def test_interval_of_a_prediction_inverts_the_log_ratio() -> None:
    cat = _catalog()
    d = distance_from_data("gpu-a", "vllm", catalog=cat)
    iv = predict_interval(100.0, "ttft_mean", "below_knee", d, cat)
    # measured = pred / exp(r): the high residual gives the low bound
    assert iv.bounds[80] == pytest.approx((100 * math.exp(-(C_BELOW + H80)),
                                           100 * math.exp(-(C_BELOW - H80))), rel=1e-9)
    assert iv.source["n"] == 5 and iv.source["regime"] == "below_knee"
    assert iv.source["scale_n"] == 5
    # two runs near the knee: the scale of all nine runs is used, and said so
    pooled = predict_interval(100.0, "ttft_mean", "near_knee", d, cat)
    assert pooled.source["n"] == 2 and pooled.source["scale_n"] == 9
    assert pooled.source["scale_from"] == "all runs"
    assert pooled.bounds[80] == pytest.approx((100 * math.exp(-H80_ALL),
                                               100 * math.exp(H80_ALL)), rel=1e-9)
    assert pooled.bounds[95] == pytest.approx((100 * math.exp(-H95), 100 * math.exp(H95)),
                                              rel=1e-9)
    # an engine without fitted costs takes the no-engine-cost residuals
    d_trt = distance_from_data("gpu-a", "trtllm", catalog=cat)
    un = predict_interval(100.0, "ttft_mean", "below_knee", d_trt, cat)
    assert un.source["table"] == "engine_unfitted" and un.source["n"] == 4


def test_out_of_data_gpus_widen_in_quadrature() -> None:
    cat = _catalog()
    base = predict_interval(100.0, "ttft_mean", "below_knee",
                            distance_from_data("gpu-a", catalog=cat), cat)
    meas = distance_from_data("gpu-b", catalog=cat)
    assert meas.hardware_kind == "measured kernels"
    assert meas.kernel_sigma_log == pytest.approx(0.1 / 0.6745)
    iv = predict_interval(100.0, "ttft_mean", "below_knee", meas, cat)
    k = 1.2815516 * 0.1 / 0.6745
    assert iv.bounds[80][0] == pytest.approx(100 * math.exp(-(C_BELOW + math.hypot(H80, k))))
    assert iv.bounds[80][1] == pytest.approx(100 * math.exp(-(C_BELOW - math.hypot(H80, k))))
    # derived by rule, bandwidth 1.1e12 -> nearest measured gpu-c: sqrt(2) x its sigma
    der = distance_from_data("gpu-x", catalog=cat, memory_bandwidth_bytes_s=1.1e12)
    assert der.hardware_kind == "derived by rule"
    assert der.kernel_sigma_log == pytest.approx(math.sqrt(2) * 0.2 / 0.6745)
    w = {name: predict_interval(100.0, "ttft_mean", "below_knee", dist, cat).bounds[95]
         for name, dist in (("base", distance_from_data("gpu-a", catalog=cat)),
                            ("meas", meas), ("der", der))}
    width = {k: hi - lo for k, (lo, hi) in w.items()}
    assert width["base"] < width["meas"] < width["der"]
    assert base.bounds[80][1] - base.bounds[80][0] < iv.bounds[80][1] - iv.bounds[80][0]


def test_shipped_catalog_derived_gpu_wider_than_replayed() -> None:
    h100 = distance_from_data("h100-sxm")
    mi300 = distance_from_data("mi300x")
    assert h100.hardware_kind == "replayed" and mi300.hardware_kind == "derived by rule"
    a = predict_interval(10.0, "itl", "below_knee", h100).bounds[80]
    b = predict_interval(10.0, "itl", "below_knee", mi300).bounds[80]
    assert b[1] - b[0] > a[1] - a[0]
    cat = load_catalog()
    assert cat["residuals"]["ttft_p99"]["all"]["n"] == 16


def test_regime_rule() -> None:
    assert regime_of(50.0, 80.0, 10.0) == "below_knee"
    assert regime_of(50.0, 130.0, 10.0) == "near_knee"      # P99 > 2.5 x mean
    assert regime_of(260.0, 300.0, 10.0) == "overloaded"    # mean > 25 x ITL
    assert regime_of(240.0, 300.0, 10.0) == "below_knee"


def test_estimate_rates_invert_the_time_interval() -> None:
    cat = _catalog()
    cat["residuals"]["itl"] = cat["residuals"]["ttft_mean"]
    cat["residuals"]["e2e_mean"] = cat["residuals"]["ttft_mean"]
    d = Distance("gpu-a", "replayed", 0.0, "", "vllm", True)
    res: dict[str, object] = {"tpot_s": 0.01, "decode_aggregate_tok_s": 3200.0}
    annotate_estimate(res, d, cat)
    lo, hi = C_BELOW - H80, C_BELOW + H80
    assert res["tpot_interval80_s"] == pytest.approx([0.01 * math.exp(-hi),
                                                      0.01 * math.exp(-lo)], rel=1e-5)
    # throughput = k / time: measured throughput = predicted x exp(r)
    assert res["decode_aggregate_interval80_tok_s"] == pytest.approx(
        [3200 * math.exp(lo), 3200 * math.exp(hi)], rel=1e-5)


def _run(*args: str) -> dict[str, object]:
    p = subprocess.run([RIDGELINE, *args, "--json"], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_simulate_json_has_intervals() -> None:
    out = _run("simulate", "--model", "llama-2-7b", "--rate", "4", "-n", "200")
    lat = out["analysis"]["latency"]
    for m in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        d = lat[m]
        for stat in ("mean", "median", "p90", "p99"):
            for lv in (80, 95):
                lo, hi = d[f"{stat}_interval{lv}"]
                assert 0 < lo < hi
            assert d[f"{stat}_interval95"][0] <= d[f"{stat}_interval80"][0]
            assert d[f"{stat}_interval95"][1] >= d[f"{stat}_interval80"][1]
        lo, hi = d["mean_interval80"]
        assert lo < d["mean"] < hi
        src = d["interval_source"]
        assert src["coverage"] == "nominal 80% and 95%"
        assert src["by_statistic"]["mean"]["hardware_kind"] == "replayed"
        # which residuals, how many, which regime
        for stat in ("mean", "median", "p90", "p99"):
            s = src["by_statistic"][stat]
            assert s["n"] >= 3 and s["scale_n"] == (s["n"] if s["n"] >= 4 else 16)
            assert s["residual"] == (("ttft_" if m == "ttft_ms" else "e2e_") + stat.replace(
                "median", "mean") if m in ("ttft_ms", "e2e_ms") else "itl")
    # the interval holds at least the catalog's residual interval (reruns only widen it)
    e = load_catalog()["residuals"]["e2e_mean"]
    reg = lat["e2e_ms"]["interval_source"]["by_statistic"]["mean"]["regime"]
    r_lo, r_hi = (e[reg] if reg in e else e["all"])["interval80"]
    m = lat["e2e_ms"]["mean"]
    lo, hi = lat["e2e_ms"]["mean_interval80"]
    assert lo <= m * math.exp(-r_hi) * (1 + 1e-6) and hi >= m * math.exp(-r_lo) * (1 - 1e-6)


def test_estimate_json_has_intervals() -> None:
    res = _run("estimate", "--model", "llama-2-7b", "--batch", "8")["result"]
    # the below-knee TTFT-mean interval recomputed from the stored runs, not the catalog's
    runs = load_catalog()["runs"]
    for lv in (80, 95):
        r_lo, r_hi = _hand_interval(runs, "ttft_mean", "below_knee", lv)
        v = res["prefill_s"]
        assert res[f"prefill_interval{lv}_s"] == pytest.approx([v * math.exp(-r_hi),
                                                                 v * math.exp(-r_lo)],
                                                                rel=1e-4)
    src = res["interval_source"]["by_value"]["prefill_s"]
    below = [r for r in runs if r["regime"] == "below_knee"]
    assert src["regime"] == "below_knee" and src["scale_n"] == len(below) == 10
    assert src["conformal"]["80"]["rank"] == 9   # ceil(11 x 0.8) of the 10 below-knee runs
    for k, u in (("tpot", "s"), ("e2e", "s"), ("decode_aggregate", "tok_s")):
        lo, hi = res[f"{k}_interval95_{u}"]
        assert lo < res[f"{k}_{u}"] < hi
    assert res["interval_source"]["by_value"]["tpot_s"]["residual"] == "itl"
    der = _run("estimate", "--model", "llama-2-7b", "--batch", "8", "--hardware",
               "mi300x")["result"]
    rel = [(hi - lo) / r["tpot_s"] for r in (res, der) for lo, hi in [r["tpot_interval80_s"]]]
    assert rel[1] > rel[0]


def test_rerun_at_scaled_rate_equals_an_engine_with_slower_steps() -> None:
    """The step-time propagation's identity: every step s times longer under the same
    arrivals is the run at s x the rate with every latency x s. The reference is an engine
    whose step-time model really returns s x the time (no fixed engine cost, which the rule
    would scale too)."""
    import copy

    from ridgeline.sim.model_error import _rerun_stats
    from ridgeline.sim.scenario import Built, Scenario

    sc = Scenario(model="llama-2-7b", requests=200, prompt="512", output="64",
                  engine_costs=False).validate()
    built = Built.of(sc)
    s = 1.15

    class Slower(type(built.step_model)):  # type: ignore[misc]
        def step_time_s(self, work):  # type: ignore[no-untyped-def]
            return s * super().step_time_s(work)

    slow = copy.copy(built.step_model)
    slow.__class__ = Slower
    truth = _rerun_stats(sc, Built(slow, built.config, built.cluster), 20.0, 1.0)
    fast = _rerun_stats(sc, built, 20.0, s)
    for m in ("ttft_ms", "e2e_ms", "tpot_ms"):
        for stat in ("mean", "median", "p90", "p99"):
            assert fast[m][stat] == pytest.approx(truth[m][stat], rel=1e-9)
    # and it is not the trivial scaling: queueing makes TTFT grow faster than s
    base = _rerun_stats(sc, built, 20.0, 1.0)
    assert truth["ttft_ms"]["mean"] != pytest.approx(s * base["ttft_ms"]["mean"], rel=1e-3)


def test_near_the_knee_the_interval_widens_beyond_the_residuals() -> None:
    lo_load = _run("simulate", "--model", "llama-2-7b", "--rate", "5", "-n", "1000")
    hi_load = _run("simulate", "--model", "llama-2-7b", "--rate", "44", "-n", "1000")
    rel = []
    for out in (lo_load, hi_load):
        t = out["analysis"]["latency"]["ttft_ms"]
        # the 95% end: a step time ~9% longer (the decode residual's 95% end) tips the
        # 44 req/s run past saturation; the 80% end (~3%) only bends it
        rel.append(t["mean_interval95"][1] / t["mean"])
        assert "reruns" in t["interval_source"]["step_time_propagation"]
    assert rel[1] > 2 * rel[0]


def test_estimate_without_engine_costs_uses_the_unfitted_residuals() -> None:
    res = _run("estimate", "--model", "llama-2-7b", "--batch", "8",
               "--no-engine-costs")["result"]
    e = load_catalog()["engine_unfitted"]["itl"]["below_knee"]
    r_lo, r_hi = e["interval80"]
    assert res["interval_source"]["by_value"]["tpot_s"]["table"] == "engine_unfitted"
    assert res["tpot_interval80_s"] == pytest.approx(
        [res["tpot_s"] * math.exp(-r_hi), res["tpot_s"] * math.exp(-r_lo)], rel=1e-5)


def _hand_interval(runs: list[dict[str, object]], metric: str, regime: str, level: int
                   ) -> tuple[float, float]:
    """The stated rule, written out again from the stored runs. 80%: +- the
    ceil((n + 1) q)-th smallest |r| (the largest past n) of the regime's runs where it has 4 or
    more, else of all runs. 95%: the hull of that, +- the same rank of all runs' |r|, and the
    regime's median (3 runs from 2 families, else all runs') +- the rank of the scores |r -
    that centre computed without the run's family|."""
    def med(xs: list[float]) -> float:
        xs = sorted(xs)
        k = len(xs)
        return xs[k // 2] if k % 2 else 0.5 * (xs[k // 2 - 1] + xs[k // 2])

    def lr(r: dict[str, object]) -> float:
        return float(r["log_ratio"][metric])  # type: ignore[index]

    def centre(pool: list[dict[str, object]], reg: str) -> float:
        sel = [r for r in pool if r["regime"] == reg]
        if reg != "all" and len(sel) >= 3 and len({r["family"] for r in sel}) >= 2:
            return med([lr(r) for r in sel])
        return med([lr(r) for r in pool])

    def rank_value(scores: list[float], q: int) -> float:
        scores = sorted(scores)
        k = math.ceil(round((len(scores) + 1) * q / 100, 9))
        return scores[min(k, len(scores)) - 1]

    own = [r for r in runs if r["regime"] == regime]
    h80 = rank_value([abs(lr(r)) for r in (own if regime != "all" and len(own) >= 4
                                            else runs)], 80)
    if level == 80:
        return -h80, h80
    fo = [abs(lr(r) - centre([x for x in runs if x["family"] != r["family"]],
                             str(r["regime"]))) for r in runs]
    hz, hf, c = rank_value([abs(lr(r)) for r in runs], 95), rank_value(fo, 95), \
        centre(runs, regime)
    return min(-h80, -hz, c - hf), max(h80, hz, c + hf)


def test_shipped_catalog_is_consistent_with_its_runs() -> None:
    """Each stored log-ratio is ln(predicted / measured) of its run, and each shipped
    interval is the stated rule applied to the stored runs (kept to 6 decimals)."""
    cat = load_catalog()
    runs = {r["run"]: r for r in cat["runs"]}
    for r in runs.values():
        for m, lr in r["log_ratio"].items():
            assert lr == pytest.approx(math.log(r["predicted"][m] / r["measured"][m]))
    checked = 0
    for m, by_regime in cat["residuals"].items():
        for reg, e in by_regime.items():
            groups = [runs[name]["family"] for name in e["runs"]]
            assert e["run_families"] == groups and e["families"] == len(set(groups))
            if "interval80" not in e:
                continue
            for lv in (80, 95):
                assert e[f"interval{lv}"] == pytest.approx(
                    list(_hand_interval(list(runs.values()), m, reg, lv)), abs=5e-6)
                checked += 1
    assert checked == 7 * 4 * 2   # the three regimes and all, for 7 metrics


def test_a_calibrated_tail_is_no_narrower_than_its_median() -> None:
    """By hand: TTFT P50's 80% log-ratio interval [-0.3, 0.2], P90's own [-0.1, 0.1] -> the
    P90 takes the hull [-0.3, 0.2]; TPOT's mean without residuals of its own takes TPOT P50's;
    a statistic with no calibrated residuals at all gets None (the caller uses the replay's)."""
    def entry(lo: float, hi: float) -> dict[str, object]:
        return {"n": 9, "interval80": [lo, hi], "interval95": [2 * lo, 2 * hi]}

    res = {"ttft_p50": entry(-0.3, 0.2), "ttft_p90": entry(-0.1, 0.1),
           "tpot_p50": entry(-0.05, 0.04)}
    cat = {"calibrated": {"residuals": res}}
    iv = calibrated_stat_interval(100.0, "ttft_ms", "p90", res, cat)
    assert iv is not None and iv.source["residual"] == "ttft_p90"
    assert iv.bounds[80] == pytest.approx((100 * math.exp(-0.2), 100 * math.exp(0.3)))
    assert iv.bounds[95] == pytest.approx((100 * math.exp(-0.4), 100 * math.exp(0.6)))
    mean = calibrated_stat_interval(10.0, "tpot_ms", "mean", res, cat)
    assert mean is not None and mean.source["residual"] == "tpot_p50"
    assert mean.bounds[80] == pytest.approx((10 * math.exp(-0.04), 10 * math.exp(0.05)))
    assert calibrated_stat_interval(10.0, "tpot_ms", "p99", res, cat) is None

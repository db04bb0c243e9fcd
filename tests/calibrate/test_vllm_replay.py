"""The replay of real vLLM runs, the engine costs and the TensorRT-LLM capacity policy.

Numbers compared against come from ../shared/data/vllm-inference-perf (measured by others on
H100) or are derived by hand here, never from ridgeline itself.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ridgeline.calibrate.inference_perf import load_run, quantile_lengths
from ridgeline.calibrate.inference_perf_replay import constant_load_arrivals_s, plan_replay, replay
from ridgeline.perf.step_time import LinearStepTime
from ridgeline.sim.engine import EngineConfig
from ridgeline.sim.engine_costs import EngineCosts, apply_request_overhead, load_engine_costs
from ridgeline.sim.event_loop import Workload, simulate
from tests.shared_data import needs_shared_data, shared_data_dir

DATA = shared_data_dir() / "vllm-inference-perf"
CODEGEN = DATA / "experiments" / "20260218-150956-codellama-34b-tp2-codegen"
needs_data = needs_shared_data("vllm-inference-perf", "experiments", CODEGEN.name)


@needs_data
def test_load_run_reads_what_ran() -> None:
    r = load_run(CODEGEN)
    # results/config.yaml (what inference-perf loaded): 10 groups x 10 prompts, two stages
    assert (r.num_groups, r.prompts_per_group) == (10, 10)
    assert [(s.rate_req_s, s.duration_s, s.requests) for s in r.stages] == [
        (5.0, 600.0, 3000), (10.0, 600.0, 6000)]
    assert (r.tp, r.max_num_seqs, r.max_num_batched_tokens) == (2, 128, 2048)
    assert r.summary.count == 9000
    assert r.per_stage[0].ttft_s["mean"] == pytest.approx(0.04452, abs=1e-4)
    # the ITL formula on stage 0: (E2E_mean - TTFT_mean) / (out_mean - 1) = 14.4 ms
    assert r.per_stage[0].itl_s == pytest.approx(0.01436, abs=5e-5)


def test_constant_load_arrivals_rescaled_to_duration() -> None:
    t = constant_load_arrivals_s(8.0, 600.0, np.random.default_rng(3))
    assert t.size == 4800
    assert t[-1] == pytest.approx(600.0, rel=1e-12)
    assert np.all(np.diff(t) > 0)


def test_quantile_lengths_keep_the_measured_mean() -> None:
    dist = {"min": 562.0, "p10": 567.0, "median": 575.0, "p90": 582.0, "max": 590.0,
            "mean": 574.24}
    xs = quantile_lengths(dist, 100)
    assert abs(np.mean(xs) - 574.24) < 0.5
    assert min(xs) >= 562 and max(xs) <= 590


@needs_data
def test_replay_cycles_the_prompts_of_the_run() -> None:
    r = load_run(CODEGEN)
    plan = plan_replay(r)
    assert plan.prompt_tokens.size == 9000
    assert np.array_equal(plan.prefix_group[:100], np.arange(100))
    assert np.array_equal(plan.prompt_tokens[:100], plan.prompt_tokens[100:200])


@needs_data
def test_replay_matches_a_measured_stage() -> None:
    """CodeLlama-34B TP2 on H100, 5 then 10 req/s: the measured stage ITLs are 14.36 and
    15.03 ms and vLLM kept up (TTFT 44.5 / 46.1 ms). The shipped model with the shipped
    engine costs must land within 5% on ITL and 10% on TTFT, with no runaway queueing
    (without the prefix cache's hits on the repeated prompts the ITL is ~17 ms)."""
    from ridgeline.sim.scenario import Built, Scenario

    r = load_run(CODEGEN)
    sc = Scenario(model=str(DATA / "model_configs" / "CodeLlama-34b-Instruct-hf"),
                  hardware="h100-sxm", tp=2, max_num_seqs=128, max_num_batched_tokens=2048)
    s = replay(r, Built.of(sc))   # the engine costs of the catalog, as `simulate` uses them
    for k, want_itl, want_ttft in ((0, 0.01436, 0.04452), (1, 0.01503, 0.04612)):
        assert s.stage_itl_s[k] == pytest.approx(want_itl, rel=0.05)
        assert s.stage_ttft_mean_s[k] == pytest.approx(want_ttft, rel=0.10)
    assert s.failed == 0


@needs_data
def test_score_runs_scores_each_stage_against_its_own_lifecycle_file() -> None:
    """The kernel-scale grid's `--criterion stage_itl`: the mean over a run's stages of the
    stage ITL's APE. The measured stage ITLs are computed here from the two
    stage_k_lifecycle_metrics.json files, (E2E mean - TTFT mean) / (output mean - 1):
    14.36 and 15.03 ms for CodeLlama-34B codegen."""
    import json

    from ridgeline.calibrate.engine_fit import score_runs
    from ridgeline.sim.scenario import Built, Scenario

    r = load_run(CODEGEN)
    sc = Scenario(model=str(DATA / "model_configs" / "CodeLlama-34b-Instruct-hf"),
                  hardware="h100-sxm", tp=2, max_num_seqs=128, max_num_batched_tokens=2048)
    built = Built.of(sc)
    measured = []
    for k in range(2):
        st = json.loads((CODEGEN / "results" / f"stage_{k}_lifecycle_metrics.json")
                        .read_text())["successes"]
        lat = st["latency"]
        measured.append((lat["request_latency"]["mean"] - lat["time_to_first_token"]["mean"])
                        / (st["output_len"]["mean"] - 1.0))
    assert measured == pytest.approx([0.01436, 0.01503], abs=5e-5)
    pred = replay(r, built, replications=1).stage_itl_s
    want = np.mean([abs(q - a) / a for q, a in zip(pred, measured, strict=True)])
    got = score_runs([r], lambda run, step_s: built, {}, {}, replications=1)[r.name]
    assert got["stage_itl"] == pytest.approx(want, rel=1e-9)
    assert 0.0 < got["stage_itl"] < 0.05


REASONING = DATA / "experiments" / "20260218-160939-codellama-34b-tp2-reasoning"


@needs_data
def test_overloaded_run_decodes_at_the_measured_step() -> None:
    """CodeLlama-34B TP2 at 4 req/s of 1,081-token prompts and 1,450 output tokens: vLLM
    holds 128 sequences at ~1.8k tokens of context for the whole run, its measured ITL is
    26.79 ms (summary: (E2E mean 158.99 s - TTFT mean 120.17 s) / (1450.2 - 1)) and the queue
    grows, E2E mean 158.99 s. The GQA decode kernel at that size streams the KV far below the
    bandwidth carried from A100: without the fitted grouped-query scale the replay decodes
    13% fast and queues half as long (E2E -55%, docs/BENCHMARKS.md)."""
    from ridgeline.sim.scenario import Built, Scenario

    r = load_run(REASONING)
    sc = Scenario(model=str(DATA / "model_configs" / "CodeLlama-34b-Instruct-hf"),
                  hardware="h100-sxm", tp=2, max_num_seqs=128, max_num_batched_tokens=2048)
    pred = replay(r, Built.of(sc), replications=1)
    v = pred.values
    assert v["itl"] == pytest.approx(0.02679, rel=0.05)
    assert v["e2e_mean"] == pytest.approx(158.99, rel=0.15)
    # one stage: its ITL is the run's, and the measured stage file says 26.79 ms too
    assert r.per_stage[0].itl_s == pytest.approx(0.02679, rel=1e-3)
    assert pred.stage_itl_s[0] == pytest.approx(0.02679, rel=0.05)
    # the per-request cost counts steps of the run's mean decode step, which the measured
    # ITL is: the replay's (each request's first-to-last token gap, pooled) must be it too
    raw = pred.raw[0]
    assert float(raw.gap_s[0]) == pytest.approx(0.02679, rel=0.05)
    assert float(np.nanmedian(raw.decode_step_s)) == pytest.approx(0.02679, rel=0.05)


@needs_data
def test_a_kv_bound_overloaded_run_times_out_as_many_requests_as_vllm_did() -> None:
    """Llama-2-7B TP1 (MHA: 0.5 MiB of KV per token) at 4 req/s of 1,082-token prompts and
    1,101 output tokens: the KV pool holds far fewer than 128 such sequences, vLLM preempts,
    and only 732 of the 4,800 requests finished within the client's 300 s (summary
    successes.count; 4,068 failures). The replay must lose as many: its KV capacity, its
    preemption and the client's timeout together decide that count."""
    from ridgeline.sim.scenario import Built, Scenario

    r = load_run(DATA / "experiments" / "20260217-170634-llama-2-7b-tp1-reasoning")
    assert r.summary.count == 732
    sc = Scenario(model=str(DATA / "model_configs" / "Llama-2-7b-hf"), hardware="h100-sxm",
                  tp=1, max_num_seqs=r.max_num_seqs,
                  max_num_batched_tokens=r.max_num_batched_tokens,
                  gpu_memory_utilization=r.gpu_memory_utilization)
    pred = replay(r, Built.of(sc), replications=1)
    assert pred.finished + pred.failed == 4800
    assert pred.finished == pytest.approx(732, rel=0.05)
    assert pred.preemptions > 0


@needs_data
def test_free_request_overhead_fit_recovers_a_known_seconds_and_steps() -> None:
    """An engine without a known scheduling lag (the TensorRT-LLM preset) fits both parts of
    its per-request cost. The shift is one number per run, so two runs whose decode steps
    differ (CodeLlama-34B TP2 ~15 ms, Llama-2-7B TP1 ~10 ms) are what tell the seconds from
    the steps. 'Measured' values made from the two replays shifted by 12.5 ms + 1.325 steps
    (off the coarse 2 ms x 0.1-step grid, on the refined one) must give back that point."""
    import dataclasses

    from ridgeline.calibrate.engine_fit import fit_request_overhead
    from ridgeline.calibrate.inference_perf import Measured
    from ridgeline.calibrate.inference_perf_replay import score_raw
    from ridgeline.sim.scenario import Built, Scenario

    true_s, true_steps = 0.0125, 1.325
    runs, preds = [], []
    for exp, cfg, tp in ((CODEGEN, "CodeLlama-34b-Instruct-hf", 2),
                         (DATA / "experiments" / "20260217-155451-llama-2-7b-tp1-codegen",
                          "Llama-2-7b-hf", 1)):
        r = load_run(exp)
        sc = Scenario(model=str(DATA / "model_configs" / cfg), hardware="h100-sxm", tp=tp,
                      max_num_seqs=128, max_num_batched_tokens=2048)
        p = replay(r, Built.of(sc), replications=1)
        v = score_raw(r, p.raw, true_s, true_steps).values
        m = r.summary
        fake = Measured(m.count, {"mean": v["e2e_mean"], "p90": v["e2e_p90"],
                                  "p99": v["e2e_p99"]},
                        {"mean": v["ttft_mean"], "p90": v["ttft_p90"], "p99": v["ttft_p99"]},
                        m.prompt_len, m.output_len)
        runs.append(dataclasses.replace(r, summary=fake))
        preds.append(p)
    steps = [float(p.raw[0].gap_s[0]) for p in preds]
    assert abs(steps[0] - steps[1]) > 0.003   # the two runs' steps differ by > 3 ms
    assert fit_request_overhead(runs, preds) == (true_s, true_steps)
    # with the lag known, only the seconds are searched
    assert fit_request_overhead(runs, preds, lag_steps=true_steps) == (true_s, true_steps)


def test_request_overhead_shifts_every_token_by_fixed_plus_steps() -> None:
    wl = Workload(prompt_tokens=np.array([10, 10, 10]), output_tokens=np.array([3, 1, 5]),
                  arrival_s=np.array([0.0, 1.0, 2.0]))
    cfg = EngineConfig(num_kv_blocks=16)
    base = simulate(wl, cfg, LinearStepTime(base_s=0.01))
    ev0 = base.event_times_s.copy()
    res = apply_request_overhead(base, EngineCosts(request_overhead_s=0.005,
                                                   request_overhead_steps=2.0))
    # every gap is one 10 ms step, so the run's mean decode step is 10 ms: each token of
    # each request moves by 0.005 + 2 x 0.010 s (one amount: a step's tokens stay together)
    assert np.allclose(res.event_times_s, ev0 + 0.025)
    # the config route gives the same times
    cfg2 = EngineConfig(num_kv_blocks=16, request_overhead_s=0.005, request_overhead_steps=2.0)
    again = simulate(wl, cfg2, LinearStepTime(base_s=0.01))
    assert np.array_equal(again.event_times_s, res.event_times_s)


def test_run_mean_step_pools_the_gaps() -> None:
    from ridgeline.sim.engine_costs import run_mean_step_s

    # 3 gaps of 10 ms and 1 gap of 30 ms: 60 ms over 4 gaps; a one-token request adds none
    assert run_mean_step_s(np.array([4, 2, 1]), np.array([0.01, 0.03, 0.5])) == \
        pytest.approx(0.015)


def test_engine_catalog_has_provenance() -> None:
    c = load_engine_costs("vllm")
    assert c.provenance.get("date") and c.provenance.get("runs")
    assert "cv_ape" in c.provenance
    t = load_engine_costs("trtllm")
    # no CPU cost fitted; the overlap scheduler's one-step lag is structure, not a fit
    assert (t.request_overhead_s, t.step_overhead_s, t.mixed_step_s) == (0.0, 0.0, 0.0)
    assert t.request_overhead_steps == 1.0 and "not fitted" in t.provenance["fitted_on"]


def _max_batch(policy: str) -> tuple[int, int, int]:
    # 8 requests of 32 prompt + 33 output tokens: each needs ceil(64/16) = 4 blocks for its
    # life; 10 blocks hold the life of at most 2 at once (by hand).
    wl = Workload(prompt_tokens=np.full(8, 32), output_tokens=np.full(8, 33),
                  arrival_s=np.zeros(8))
    cfg = EngineConfig(num_kv_blocks=10, max_num_seqs=8, max_num_batched_tokens=256,
                       capacity_policy=policy)
    res = simulate(wl, cfg, LinearStepTime(base_s=0.01, per_prefill_token_s=1e-5))
    return (int(res.timeline["batch_size"].max()), int(res.preemptions.sum()),
            sum(s == "ok" for s in res.status))


def test_guaranteed_no_evict_never_preempts_and_reserves_whole_life() -> None:
    batch, pre, ok = _max_batch("guaranteed_no_evict")
    assert (batch, pre, ok) == (2, 0, 8)
    vb, vpre, vok = _max_batch("vllm")   # vLLM admits on the prompt's blocks and preempts
    assert vb > 2 and vpre > 0 and vok == 8


def _vllm_detailed(path: Path, n: int = 12) -> tuple[float, float]:
    """A `vllm bench serve --save-detailed` file with hand-set per-request times."""
    import json

    ttfts = [0.05 + 0.001 * i for i in range(n)]
    itls = [[0.02] * 9 for _ in range(n)]          # 10 tokens: TTFT + 9 gaps of 20 ms
    lat = [t + 0.18 for t in ttfts]
    doc = {"date": "20260101-000000", "backend": "vllm", "model_id": "m", "num_prompts": n,
           "request_rate": 2.0, "burstiness": 1.0, "duration": n / 2.0, "completed": n,
           "failed": 0, "start_times": [0.5 * i for i in range(n)], "ttfts": ttfts,
           "itls": itls, "latencies": lat, "input_lens": [100] * n, "output_lens": [10] * n,
           "errors": [""] * n}
    path.write_text(json.dumps(doc))
    return float(np.mean(ttfts)), float(np.mean(lat))


def test_vllm_bench_json_becomes_a_replayable_run(tmp_path: Path) -> None:
    from ridgeline.calibrate.engine_runs import EngineFlags, load_measured_runs

    want_ttft, want_e2e = _vllm_detailed(tmp_path / "run.json")
    (run,) = load_measured_runs([str(tmp_path / "run.json")], EngineFlags(tp=2))
    assert run.summary.ttft_s["mean"] == pytest.approx(want_ttft)
    assert run.summary.e2e_s["mean"] == pytest.approx(want_e2e)
    assert run.summary.itl_s == pytest.approx(0.02)      # (E2E - TTFT) / (10 - 1)
    assert run.tp == 2 and run.prompt_tokens.tolist() == [100] * 12
    assert run.arrival_s[-1] == pytest.approx(5.5)


@needs_data
def test_calibrate_fit_engine_on_the_shared_runs(tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from ridgeline.cli import app

    out = tmp_path / "vllm-mine.json"
    exp = DATA / "experiments"
    res = CliRunner().invoke(app, [
        "calibrate", "fit", "--engine", "vllm", "--no-step-fit", "--replications", "2",
        "-o", str(out),
        str(exp / "20260218-150956-codellama-34b-tp2-codegen"),
        str(exp / "20260217-155451-llama-2-7b-tp1-codegen")])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert len(doc["provenance"]["runs"]) == 2
    assert doc["provenance"]["replications"] == 2
    # two model families: each held out once, so two fold values per constant
    assert len(doc["costs"]["request_overhead_s"]["cv_fold_values"]) == 2
    c = load_engine_costs(str(out))
    # vLLM V1's one-step scheduling lag is structure, not a fit (sim/engine_costs.py): the
    # steps are 1 in the fit and in every fold, and the file says so
    assert c.request_overhead_steps == 1.0
    assert set(doc["costs"]["request_overhead_steps"]["cv_fold_values"].values()) == {1.0}
    assert "request_overhead_steps" in doc["provenance"]["not_fitted"]
    assert "scheduling lag by structure" in res.output
    # the measured TTFTs (44-46 ms, 25-30 ms) exceed the simulated engine's: a positive cost
    assert c.request_overhead_s > 0
    import subprocess
    import sys

    bad = subprocess.run([str(Path(sys.executable).parent / "ridgeline"), "calibrate", "fit",
                          "--engine", "sglang", str(out)], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "error: --engine: got 'sglang'; allowed: vllm, trtllm"]


@needs_data
def test_calibrate_fit_of_one_model_claims_no_cross_validation(tmp_path: Path) -> None:
    """Runs of one model cannot hold a model out. The file, the command and `simulate`'s
    assumptions must say so, not print the training error as a leave-one-model-out one."""
    import json
    import subprocess
    import sys

    exe = str(Path(sys.executable).parent / "ridgeline")
    out = tmp_path / "one-model.json"
    fit = subprocess.run([exe, "calibrate", "fit", "--engine", "vllm", "--no-step-fit",
                          "--replications", "1", "-o", str(out), str(CODEGEN)],
                         capture_output=True, text=True, timeout=300)
    assert fit.returncode == 0, fit.stderr
    prov = json.loads(out.read_text())["provenance"]
    assert prov["cv_ape"] == {}
    assert prov["cv_error"].startswith("none: the runs are of one model family")
    assert "cross-validated: none" in fit.stdout
    assert "leave-one-model-out" not in fit.stdout
    sim = subprocess.run([exe, "simulate", "-m", "llama-3.1-8b", "-n", "20", "--rate", "1",
                          "--engine", str(out)], capture_output=True, text=True, timeout=300)
    assert sim.returncode == 0, sim.stderr
    said = " ".join(sim.stdout.split())
    assert "cross-validated: none: the runs are of one model family" in said
    # the kernel model's lines carry their own CV ("leave-one-model-out CV median"); the
    # engine costs' claim is worded "... mean APE"
    assert "leave-one-model-out mean APE" not in said


def test_client_timeout_aborts_and_frees_the_slot() -> None:
    # one slot; request 0 needs 100 steps of 10 ms (1 s) but its client gives up at 0.5 s,
    # so request 1 (sent at 0.1 s, 5 tokens) starts at the first step boundary >= 0.5 s
    wl = Workload(prompt_tokens=np.array([10, 10]), output_tokens=np.array([100, 5]),
                  arrival_s=np.array([0.0, 0.1]), timeout_s=0.5)
    cfg = EngineConfig(num_kv_blocks=64, max_num_seqs=1)
    res = simulate(wl, cfg, LinearStepTime(base_s=0.01), mode="step")
    assert res.status == ["error", "ok"]
    assert res.end_s[0] == pytest.approx(0.5)
    assert 49 <= res.tokens_out[0] <= 51           # the tokens out by the deadline
    assert res.events_s(1)[0] == pytest.approx(0.51, abs=0.011)
    assert res.events_s(1)[-1] == pytest.approx(0.55, abs=0.011)
    # the default (fast) mode takes the step-by-step engine for a timeout: same trace
    again = simulate(wl, cfg, LinearStepTime(base_s=0.01))
    assert np.array_equal(again.event_times_s, res.event_times_s)


def test_engine_presets_on_the_command_line(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    cli = str(Path(sys.executable).parent / "ridgeline")
    base = [cli, "simulate", "-m", "llama-2-7b", "--rate", "50", "--requests", "60",
            "--prompt", "fixed:1000", "--output", "fixed:400", "--num-kv-blocks", "200",
            "--json"]
    runs = {}
    for eng in ("vllm", "trtllm"):
        r = subprocess.run([*base, "--engine", eng], capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stderr
        runs[eng] = json.loads(r.stdout)
    # 200 blocks hold 2 whole lives of 1,400 tokens (88 blocks each) but 3 prompts (63 each):
    # vLLM admits on the prompt and preempts; TensorRT-LLM's policy never does
    assert runs["vllm"]["simulation"]["preemptions"] > 0
    assert runs["trtllm"]["simulation"]["preemptions"] == 0
    assert runs["trtllm"]["simulation"]["engine_core"] == "python"
    assert any("engine vllm: per request" in a for a in runs["vllm"]["assumptions"])
    r = subprocess.run([cli, "estimate", "-m", "llama-2-7b", "--json"], capture_output=True,
                       text=True, timeout=120)
    assert any(a.startswith("engine vllm:") and "per step" in a
               for a in json.loads(r.stdout)["assumptions"])


@needs_data
def test_config_reader_without_pyyaml_matches_pyyaml(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    yaml = pytest.importorskip("yaml")
    from ridgeline.calibrate.inference_perf import _mini_yaml

    real = builtins.__import__

    def no_yaml(name: str, *a: object, **k: object) -> object:
        if name == "yaml":
            raise ImportError(name)
        return real(name, *a, **k)  # type: ignore[arg-type]

    for exp in sorted((DATA / "experiments").iterdir()):
        text = (exp / "results" / "config.yaml").read_text()
        monkeypatch.setattr(builtins, "__import__", no_yaml)
        mine = _mini_yaml(text)
        monkeypatch.setattr(builtins, "__import__", real)
        assert mine == yaml.safe_load(text), exp.name


GENERAL_7B = DATA / "experiments" / "20260217-231439-llama-2-7b-tp1-general"


@needs_shared_data("vllm-inference-perf", "experiments", GENERAL_7B.name)
def test_replay_keeps_up_near_max_num_seqs_on_llama_2_7b() -> None:
    """Llama-2-7B TP1 on H100 at 8 then 20 req/s (results/stage_*_lifecycle_metrics.json):
    measured stage ITLs 9.71 and 19.78 ms, TTFT 27.1 / 51.9 ms, no failures: vLLM kept up at
    ~83 sequences of ~700 tokens. Its MHA decode attention reads 512 KiB of KV per token, so
    the stage pins the H100 decode-attention bandwidth: at 0.85 x the carried efficiency the
    20 req/s stage tips into queueing (ITL +39%, docs/BENCHMARKS.md)."""
    from ridgeline.sim.scenario import Built, Scenario

    r = load_run(GENERAL_7B)
    sc = Scenario(model=str(DATA / "model_configs" / "Llama-2-7b-hf"), hardware="h100-sxm",
                  tp=1, max_num_seqs=128, max_num_batched_tokens=2048)
    s = replay(r, Built.of(sc))
    for k, want_itl in ((0, 0.00971), (1, 0.01978)):
        assert s.stage_itl_s[k] == pytest.approx(want_itl, rel=0.05)
    assert s.failed == 0
    assert s.stage_ttft_mean_s[1] < 2 * 0.05185   # no runaway queueing


@needs_data
def test_replay_averages_independent_arrival_draws() -> None:
    """A prediction is the mean over `replications` arrival draws (seeds seed, seed + 1, ...):
    each metric of a 2-draw replay is the mean of the two 1-draw replays, and the draws
    differ (inference-perf's exponential gaps are random)."""
    from ridgeline.calibrate.inference_perf_replay import REPLICATIONS, score_raw
    from ridgeline.sim.scenario import Built, Scenario

    r = load_run(CODEGEN)
    sc = Scenario(model=str(DATA / "model_configs" / "CodeLlama-34b-Instruct-hf"),
                  hardware="h100-sxm", tp=2, max_num_seqs=128, max_num_batched_tokens=2048)
    built = Built.of(sc)
    one = [replay(r, built, seed=k, replications=1) for k in (5, 6)]
    both = replay(r, built, seed=5, replications=2)
    assert both.extra["replications"] == 2
    assert one[0].values["ttft_p99"] != one[1].values["ttft_p99"]
    for m, v in both.values.items():
        assert v == pytest.approx((one[0].values[m] + one[1].values[m]) / 2, rel=1e-12)
    # the time-shift path (what the engine-cost fit varies) averages the same way
    shifted = score_raw(r, both.raw, 0.004, 1.0).values
    each = [score_raw(r, o.raw, 0.004, 1.0).values for o in one]
    assert shifted["e2e_p90"] == pytest.approx((each[0]["e2e_p90"] + each[1]["e2e_p90"]) / 2)
    with pytest.raises(ValueError, match="replications"):
        replay(r, built, replications=0)
    # the command's default is the library's
    import inspect

    from ridgeline.commands.calibrate import fit_cmd

    assert inspect.signature(fit_cmd).parameters["replications"].default == REPLICATIONS


def test_measured_arrivals_replay_once(tmp_path: Path) -> None:
    from ridgeline.calibrate.engine_runs import EngineFlags, load_measured_runs
    from ridgeline.sim.scenario import Built, Scenario

    _vllm_detailed(tmp_path / "run.json")
    (run,) = load_measured_runs([str(tmp_path / "run.json")], EngineFlags(tp=1))
    sc = Scenario(model="llama-3.1-8b", hardware="h100-sxm", tp=1)
    p = replay(run, Built.of(sc), replications=4)
    assert p.extra["replications"] == 1 and len(p.raw) == 1

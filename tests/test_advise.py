"""`advise`: synthetic traces built to show one symptom each get that diagnosis first; a
healthy trace gets none. Traces come from the simulator through the scenario library."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ridgeline.advise import advise, amdahl_time_factor, parse_prometheus
from ridgeline.sim.scenario import Scenario
from ridgeline.sim.scenario_run import run_scenario

CLI = str(Path(sys.executable).parent / "ridgeline")


def _trace(tmp_path: Path, name: str, **kw) -> Path:
    from ridgeline.commands.simulate import _write_trace

    sc = Scenario(seed=1, **kw)
    run = run_scenario(sc)
    path = tmp_path / f"{name}.jsonl"
    _write_trace(str(path), run.header, run.result)
    return path


def test_saturation_is_ttft_queueing_first(tmp_path):
    p = _trace(tmp_path, "sat", rate_req_s=40, requests=500, prompt="fixed:1000",
               output="fixed:200")
    adv = advise(p)
    assert adv.diagnoses[0] == "ttft_queueing"
    assert adv.facts["ttft_queue_share"] > 0.9


def test_memory_bound_decode_is_tpot_first(tmp_path):
    # An 8B model in bf16 on an L40S (864 GB/s) at a trickle: every decode step streams
    # 16 GB of weights, ~20 ms; intensity ~1 FLOP/B, far below the ridge.
    p = _trace(tmp_path, "mb", hardware="l40s", rate_req_s=0.5, requests=80,
               prompt="fixed:500", output="fixed:100")
    adv = advise(p, slos=["tpot_ms<=15"])
    assert adv.diagnoses == ["tpot_memory_bound"]
    f = adv.facts
    assert f["decode_intensity_flop_per_byte"] < f["ridge_flop_per_byte"]
    recs = {r.technique: r for r in adv.findings[0].recommendations}
    assert "speedup" not in recs  # names are techniques
    assert recs["weight-only quantization (fp8)"].predicted


def test_preemption_storm_is_memory_first(tmp_path):
    p = _trace(tmp_path, "pre", rate_req_s=20, requests=300, num_kv_blocks=300,
               prompt="fixed:1000", output="fixed:400")
    adv = advise(p)
    assert adv.diagnoses[0] == "memory_pressure"
    assert adv.facts["preemptions"] > 0


def test_interference_is_a_tail_finding(tmp_path):
    p = _trace(tmp_path, "int", rate_req_s=3, requests=250, chunked_prefill=False,
               prompt="uniform:min=100,max=8000", output="fixed:300")
    adv = advise(p, slos=["ttft_ms<=5000"])
    assert adv.diagnoses[0] == "tail_interference"
    assert adv.facts["itl_spikes_aligned_with_prefill"] > 0.9
    assert adv.findings[0].recommendations[0].technique == "chunked prefill"


def test_healthy_trace_gets_no_finding(tmp_path):
    p = _trace(tmp_path, "ok", rate_req_s=2, requests=200)
    adv = advise(p)
    assert adv.findings == []
    d = json.loads(adv.to_json())
    assert d["findings"] == [] and "No symptom" in adv.markdown()


def test_amdahl_and_prometheus():
    # Half the time sped up 2x: 0.5 + 0.25 = 0.75 of the old time.
    assert amdahl_time_factor(0.5, 2.0) == pytest.approx(0.75)
    text = ('# HELP x\nvllm:num_preemptions_total{model_name="m"} 3.0\n'
            'vllm:num_preemptions_total{model_name="n"} 4\nvllm:kv_cache_usage_perc 0.97\n')
    m = parse_prometheus(text)
    assert m["vllm:num_preemptions_total"] == 7 and m["vllm:kv_cache_usage_perc"] == 0.97


def test_metrics_file_shows_kv_pressure(tmp_path):
    p = _trace(tmp_path, "ok2", rate_req_s=2, requests=100)
    adv = advise(p, metrics_text="vllm:kv_cache_usage_perc 0.99\n")
    assert adv.diagnoses[0] == "memory_pressure"


def test_cli_json_and_bad_input(tmp_path):
    p = _trace(tmp_path, "cli", rate_req_s=2, requests=60)
    r = subprocess.run([CLI, "advise", str(p), "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["findings"] == []
    for args in (["advise", str(tmp_path / "missing.jsonl")],
                 ["advise", str(p), "--slo", "ttft<=bogus"],
                 ["advise", str(p), "--metrics", str(tmp_path / "none.txt")]):
        r = subprocess.run([CLI, *args], capture_output=True, text=True)
        assert r.returncode == 2, (args, r.stderr)
        assert "Traceback" not in r.stderr
        assert [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]


# ---- predicted effects against hand computations -------------------------------------------
#
# A hand-made trace (no simulator): requests one at a time, so the decode batch is 1, each
# with a 500-token prompt, 100 output tokens one per event, TTFT 0.1 s and a TPOT of exactly
# `tpot_ms`. llama-3.1-8b in bf16 on an L40S. The expected numbers below come from the model's
# shapes (config.json of Llama 3.1 8B) and the L40S datasheet, not from ridgeline's perf model.

L, D, HQ, HKV, HD, FF, V = 32, 4096, 32, 8, 128, 14336, 128256   # Llama 3.1 8B
BW_EFF_B_S = 864e9 * 0.85          # L40S GDDR6 864 GB/s x the catalog's streaming efficiency
KERNEL_S = 2e-6                    # L40S catalog: per-kernel launch overhead (CUDA graphs)
# Kernels of one decode step: per layer attn_norm, qkv, rope, attention, o_proj, mlp_norm,
# gate_up, act_mul, down (9); plus embedding, final_norm, lm_head.
DECODE_KERNELS = 9 * L + 3
LINEAR_PARAMS = L * (D * (HQ + 2 * HKV) * HD + HQ * HD * D + D * 2 * FF + FF * D)   # 6.98e9
LM_HEAD_PARAMS = D * V             # kept 16-bit when the other weights are quantized
# Activations one decode sequence moves (2 B each): per layer the linear layers' inputs and
# outputs, two norms (4d), RoPE (2(h_q+h_kv)d_h), SiLU-mul (3 ff), attention's Q in and O
# out; then embedding (d x 2 reads), final norm (2d) and the LM head's in/out (d + V).
ACT_BYTES_PER_SEQ = 2 * (L * ((D + (HQ + 2 * HKV) * HD) + (HQ * HD + D) + (D + 2 * FF)
                              + (FF + D) + 2 * 4 * D + 2 * (HQ + HKV) * HD + 3 * FF
                              + 2 * HQ * HD) + 2 * D + 2 * D + (D + V))    # ~10.8 MB
PROMPT, OUTPUT = 500, 100
CTX = PROMPT + (OUTPUT - 2) / 2    # mean KV context of the decode steps: S + (N-2)/2


def _hand_trace(tpot_ms: float, ttft_s: float = 0.1, n: int = 40, prompt: int = PROMPT,
                dataset: dict | None = None, engine: dict | None = None,
                interval_s: float = 10.0, model: str = "llama-3.1-8b",
                hardware: str = "l40s", parallelism: dict | None = None):
    from ridgeline.trace.table import Trace

    recs = []
    for i in range(n):
        sent = interval_s * i        # 10 s apart: each lasts ~6 s, so one at a time
        ev = [sent + ttft_s + j * tpot_ms / 1e3 for j in range(OUTPUT)]
        recs.append({"id": f"r{i}", "sent_s": sent, "scheduled_s": sent, "event_times_s": ev,
                     "end_s": ev[-1], "output_tokens": OUTPUT, "prompt_tokens": prompt})
    header = {"source": "hand", "model": model, "hardware": hardware,
              "precision": {"weights": "bf16", "kv": "bf16", "activations": "bf16"},
              # The hand numbers follow the plain roofline, max(F/C_eff, D/beta_eff)
              # per operator, not the fitted kernel model that is the default.
              "engine_config": {"max_num_seqs": 256, "max_num_batched_tokens": 8192,
                                "kernel_model": False, **(engine or {})},
              "dataset": dataset or {}, **({"parallelism": parallelism} if parallelism else {})}
    return Trace.from_records(header, recs)


def _hand_decode_s(w_bytes: float, kv_bytes: float, ctx_tokens: float = CTX, tp: int = 1,
                   extra_s: float = 0.0) -> float:
    """Memory-bound decode step at batch 1: linear weights (w_bytes per element) and the
    16-bit LM head, read once; the KV of ctx old tokens read plus the new one written; all
    over the effective bandwidth, plus the kernel launches (activations ~11 MB: 0.07%)."""
    weights = (LINEAR_PARAMS * w_bytes + LM_HEAD_PARAMS * 2.0) / tp
    kv = L * 2 * (HKV // tp) * HD * kv_bytes * (ctx_tokens + 1)
    # (With TP the activations shard in part; at 0.07% of the bytes that is left out.)
    return (weights + kv + ACT_BYTES_PER_SEQ) / BW_EFF_B_S + DECODE_KERNELS * KERNEL_S \
        + extra_s


def _amdahl_factor(p: float, s: float) -> float:
    """New time / old time when a share p gets s times faster (Amdahl): (1-p) + p/s."""
    return (1.0 - p) + p / s


@pytest.fixture(scope="module")
def tpot_advice():
    return advise(_hand_trace(tpot_ms=60.0))   # over the default 50 ms budget


def test_default_budgets_are_seed_004s():
    # The metrics chapter's goodput example: "TTFT < 1 s 且 TPOT < 50 ms".
    from ridgeline.advise import DEFAULT_BUDGETS_MS

    assert DEFAULT_BUDGETS_MS == {"ttft": 1000.0, "tpot": 50.0}
    assert advise(_hand_trace(tpot_ms=49.0)).findings == []          # within both
    assert advise(_hand_trace(tpot_ms=51.0)).diagnoses == ["tpot_memory_bound"]
    adv = advise(_hand_trace(tpot_ms=30.0, ttft_s=1.05))
    assert [f.stage for f in adv.findings] == ["ttft"]
    assert advise(_hand_trace(tpot_ms=30.0, ttft_s=0.95)).findings == []
    # Strict as the seed: a P99 TTFT of exactly 1 s misses "< 1 s"; an inclusive bound given
    # with --slo accepts it.
    exact = _hand_trace(tpot_ms=30.0, ttft_s=1.0)
    adv = advise(exact)
    assert adv.facts["ttft_p99_ms"] == 1000.0
    assert [f.stage for f in adv.findings] == ["ttft"]
    assert "TTFT P99 < 1000 ms, TPOT P99 < 50 ms" in adv.markdown()
    assert advise(exact, slos=["ttft_ms<=1000"]).findings == []


def test_measured_share_is_model_step_over_trace_tpot(tpot_advice):
    f = tpot_advice.facts
    assert f["decode_batch"] == 1.0
    assert f["tpot_p50_ms"] == pytest.approx(60.0)
    t_bf16_ms = _hand_decode_s(2.0, 2.0) * 1e3                       # ~21.1 ms
    assert f["predicted_decode_step_ms"] == pytest.approx(t_bf16_ms, rel=1e-6)


@pytest.mark.parametrize("technique, w_bytes, kv_bytes", [
    ("weight-only quantization (fp8)", 1.0, 2.0),               # ~1.86x on the step
    ("weight-only quantization (int4)", 0.5 + 2 / 128, 2.0),     # GPTQ groups of 128, fp16 scale
    ("fp8 KV cache", 2.0, 1.0),                                  # ~1.002x: 549 tokens of KV
])
def test_quantization_effects_are_bytes_ratios_through_amdahl(tpot_advice, technique, w_bytes,
                                                              kv_bytes):
    recs = {r.technique: r for r in tpot_advice.findings[0].recommendations}
    e = recs[technique].effect
    t_old, t_new = _hand_decode_s(2.0, 2.0), _hand_decode_s(w_bytes, kv_bytes)
    s = t_old / t_new                       # faster: > 1 whenever fewer bytes are read
    assert s >= 1.0
    p = t_old * 1e3 / 60.0                  # the model explains ~35% of the measured 60 ms
    assert e["speedup"] == pytest.approx(s, rel=1e-6)
    assert e["share"] == pytest.approx(p, rel=1e-6)
    assert e["time_factor"] == pytest.approx(_amdahl_factor(p, s), rel=1e-6)
    assert e["predicted_tpot_ms"] == pytest.approx(60.0 * _amdahl_factor(p, s), rel=1e-6)
    assert f"measured TPOT x {_amdahl_factor(p, s):.2f}" in recs[technique].predicted


def test_fp8_weights_effect_numbers(tpot_advice):
    # The two named bugs: an inverted speed-up (fp8 "1.8x slower") and Amdahl without the
    # measured share (the whole TPOT scaled by 1/s).
    e = {r.technique: r for r in tpot_advice.findings[0].recommendations}[
        "weight-only quantization (fp8)"].effect
    bytes_bf16 = (LINEAR_PARAMS + LM_HEAD_PARAMS) * 2.0
    bytes_fp8 = LINEAR_PARAMS * 1.0 + LM_HEAD_PARAMS * 2.0
    assert bytes_bf16 / bytes_fp8 == pytest.approx(1.87, abs=0.01)
    assert 1.8 < e["speedup"] < 1.87             # bytes ratio, diluted by KV and launches
    # p ~ 0.35: TPOT x (0.65 + 0.35/1.84) ~ 0.84, not x 1/1.84 ~ 0.54.
    assert 0.82 < e["time_factor"] < 0.86


def test_tp2_effect_halves_bytes_and_adds_allreduces(tpot_advice):
    e = {r.technique: r for r in tpot_advice.findings[0].recommendations}[
        "tensor parallelism x2"].effect
    # Per GPU: half the weights and KV heads; 2 all-reduces per layer + the vocab-parallel
    # embedding's, each the link latency (10 us) + 2(p-1)/p x d x 2 B / 32 GB/s (PCIe Gen4).
    allreduce_s = (2 * L + 1) * (10e-6 + 1.0 * D * 2 / 32e9)
    t_old = _hand_decode_s(2.0, 2.0)
    t_new = _hand_decode_s(2.0, 2.0, tp=2, extra_s=allreduce_s)
    assert e["new_ms"] == pytest.approx(t_new * 1e3, rel=1e-3)     # activations shard in part
    assert e["speedup"] == pytest.approx(t_old / t_new, rel=1e-3)
    assert e["time_factor"] == pytest.approx(_amdahl_factor(t_old * 1e3 / 60, t_old / t_new),
                                             rel=1e-3)


def test_speculative_effect_is_expected_tokens_per_verify(tpot_advice):
    # k = 4 drafts at acceptance 0.7: E = (1 - 0.7^5) / (1 - 0.7) = 2.7731 tokens per verify
    # pass. At batch 1 the verify pass (5 tokens) reads the same weights as a decode step,
    # writes 5 tokens' KV, and moves 5 tokens' activations (logits rows included; the
    # prefill-path attention also reads the new K/V: 2 h_kv d_h x 2 B per token and layer):
    # time per token ~ t / E.
    from ridgeline.advise import SPEC_ALPHA, SPEC_K

    assert (SPEC_K, SPEC_ALPHA) == (4, 0.7)
    e_tok = (1 - 0.7 ** 5) / (1 - 0.7)
    assert e_tok == pytest.approx(2.7731, abs=1e-4)
    e = {r.technique: r for r in tpot_advice.findings[0].recommendations}[
        "speculative decoding"].effect
    t_old = _hand_decode_s(2.0, 2.0)
    extra_act = SPEC_K * ACT_BYTES_PER_SEQ + (SPEC_K + 1) * L * 2 * HKV * HD * 2
    t_verify = _hand_decode_s(2.0, 2.0, ctx_tokens=CTX + SPEC_K) + extra_act / BW_EFF_B_S
    assert e["speedup"] == pytest.approx(e_tok * t_old / t_verify, rel=1e-5)
    p = t_old * 1e3 / 60
    assert e["time_factor"] == pytest.approx(_amdahl_factor(p, e_tok * t_old / t_verify),
                                             rel=1e-5)


def test_memory_recommendation_fp8_frees_linear_weights_only():
    # The LM head and embedding stay 16-bit under fp8 weights: fp8 frees one byte per linear
    # weight (6.98e9 B = 6.50 GiB), not half of all weights (8.03e9 B).
    adv = advise(_hand_trace(tpot_ms=30.0), metrics_text="vllm:kv_cache_usage_perc 0.99\n")
    assert adv.diagnoses == ["memory_pressure"]
    recs = {r.technique: r for r in adv.findings[0].recommendations}
    e = recs["weight quantization"].effect
    assert e["freed_bytes_per_gpu"] == pytest.approx(LINEAR_PARAMS * 1.0, rel=1e-6)
    kv_tok_b = L * 2 * HKV * HD * 2.0                    # 128 KiB per token
    assert e["extra_kv_tokens"] == pytest.approx(LINEAR_PARAMS / kv_tok_b, rel=1e-6)
    assert "~6.5 GiB" in recs["weight quantization"].predicted
    # Little's law KV demand: requests in flight per replica x the mean context S + (N-2)/2.
    f = adv.facts
    assert f["little_kv_demand_tokens"] == pytest.approx(f["mean_in_flight"] * CTX)
    assert 0.2 < f["mean_in_flight"] < 0.4         # ~3 s requests every 10 s


def _hand_prefill_s(s_tok: int) -> float:
    """One prompt prefilled alone on an L40S (bf16 dense 362 TFLOP/s x 0.7): linear layers
    2 x 6.98e9 x S FLOPs and causal attention 4 h_q d_h per pair per layer (S(S+1)/2 pairs)
    compute-bound; the LM head (one row) and the per-token elementwise kernels (norms 2 x 4d,
    RoPE 2(h_q+h_kv)d_h, SiLU-mul 3 ff; 2 bytes each) memory-bound."""
    c_eff = 362.05e12 * 0.7
    elementwise_b = s_tok * (L * (2 * 4 * D + 2 * (HQ + HKV) * HD + 3 * FF) * 2 + D * 4 + 2 * D * 2)
    return (2 * LINEAR_PARAMS * s_tok / c_eff
            + 4 * HQ * HD * L * s_tok * (s_tok + 1) / 2 / c_eff
            + (LM_HEAD_PARAMS * 2 + elementwise_b) / BW_EFF_B_S + DECODE_KERNELS * KERNEL_S)


def test_prefill_finding_numbers_by_hand():
    # 8,000-token prompts of which 2,000 are a shared prefix, prefix caching off, TTFT over a
    # 500 ms budget and dominated by the prefill itself: a hit skips 2000/8000 = 25%.
    tr = _hand_trace(tpot_ms=30.0, ttft_s=0.7, prompt=8000,
                     dataset={"prefix_tokens": 2000}, engine={"enable_prefix_caching": False})
    adv = advise(tr, slos=["ttft_ms<=500"])
    assert adv.diagnoses == ["ttft_prefill"]
    # Prefill alone of 8,000 tokens on an L40S, by hand (_hand_prefill_s).
    pre_s = _hand_prefill_s(8000)
    assert pre_s == pytest.approx(0.569, abs=0.002)
    assert adv.facts["predicted_prefill_p50_ms"] == pytest.approx(pre_s * 1e3, rel=1e-5)
    # Queueing's share of the median TTFT: (700 ms - prefill) / 700 ms ~ 19%.
    assert adv.facts["ttft_queue_share"] == pytest.approx((0.7 - pre_s) / 0.7, rel=1e-5)
    # Utilization: lambda x (prefill + (N-1) decode steps at the observed batch of 1, context
    # S + (N-2)/2 = 8049) / 1 replica.
    busy_s = pre_s + (OUTPUT - 1) * _hand_decode_s(2.0, 2.0, ctx_tokens=8000 + 49)
    lam = adv.facts["arrival_rate_req_s"]
    assert lam == pytest.approx(1 / 10.0, rel=0.02)         # one request every 10 s
    assert adv.facts["utilization"] == pytest.approx(lam * busy_s, rel=1e-5)
    recs = {r.technique: r for r in adv.findings[0].recommendations}
    assert recs["prefix caching"].effect == {"prefix_share_of_prompt": 0.25}
    assert "up to 25% of its tokens" in recs["prefix caching"].predicted


def test_larger_batch_cap_effect_by_hand():
    # max_num_seqs = 8 with ~9 requests in flight (a 6.04 s request every 6.04/9 s): the decode
    # batch sits at its cap. Doubling the cap: the step reads the weights once for 16 instead
    # of 8 sequences, so throughput per replica x 2 t(8) / t(16).
    dur_s = 0.1 + (OUTPUT - 1) * 0.060
    adv = advise(_hand_trace(tpot_ms=60.0, n=120, interval_s=dur_s / 9,
                             engine={"max_num_seqs": 8}))
    assert adv.facts["decode_batch"] == 8.0
    recs = {r.technique: r for r in adv.findings[0].recommendations}
    e = recs["larger batch cap (max_num_seqs)"].effect

    def t_s(b: int) -> float:    # memory-bound: weights once, each sequence's KV, activations
        return (((LINEAR_PARAMS + LM_HEAD_PARAMS) * 2
                 + b * (L * 2 * HKV * HD * 2 * (CTX + 1) + ACT_BYTES_PER_SEQ))
                / BW_EFF_B_S + DECODE_KERNELS * KERNEL_S)

    assert e["old_ms"] == pytest.approx(t_s(8) * 1e3, rel=1e-6)
    assert e["new_ms"] == pytest.approx(t_s(16) * 1e3, rel=1e-6)
    assert e["throughput_factor"] == pytest.approx(2 * t_s(8) / t_s(16), rel=1e-6)   # ~1.91


def test_effects_of_a_sub_millisecond_decode_step():
    # Qwen2.5-0.5B on an H100: ~1 GB of weights at 2.85 TB/s effective, ~0.35 ms, plus
    # 24 x 9 + 3 launches of 2 us: a decode step under 1 ms still gets its predictions.
    dur_s = 0.1 + (OUTPUT - 1) * 0.060
    adv = advise(_hand_trace(tpot_ms=60.0, n=120, interval_s=dur_s / 9, model="qwen2.5-0.5b",
                             hardware="h100-sxm", engine={"max_num_seqs": 8}))
    assert adv.facts["predicted_decode_step_ms"] < 1.0
    recs = {r.technique: r for r in adv.findings[0].recommendations}
    for technique in ("weight-only quantization (fp8)", "tensor parallelism x2",
                      "speculative decoding", "larger batch cap (max_num_seqs)"):
        assert recs[technique].effect is not None, technique
        assert recs[technique].effect["old_ms"] < 1.0


def test_markdown_carries_each_recommendations_predicted_effect(tpot_advice):
    md = tpot_advice.markdown()
    for r in tpot_advice.findings[0].recommendations:
        if r.predicted:
            assert f"- **{r.technique}**: {r.why} Predicted: {r.predicted}." in md


def test_the_traces_tensor_parallelism_prices_the_step():
    # The same trace, its header saying TP 2: the step is the TP-2 one computed by hand in
    # test_tp2_effect_halves_bytes_and_adds_allreduces (half the weights and KV heads per GPU,
    # 2 all-reduces per layer + the embedding's over PCIe Gen4).
    adv = advise(_hand_trace(tpot_ms=60.0, parallelism={"tp": 2}))
    allreduce_s = (2 * L + 1) * (10e-6 + 1.0 * D * 2 / 32e9)
    t_tp2 = _hand_decode_s(2.0, 2.0, tp=2, extra_s=allreduce_s)
    assert adv.facts["predicted_decode_step_ms"] == pytest.approx(t_tp2 * 1e3, rel=1e-3)


def test_utilization_is_per_replica_with_the_batch_at_its_cap():
    # 8,000-token prompts, one every 0.25 s, each lasting 0.7 + 99 x 0.03 = 3.67 s: ~14.7 in
    # flight over 2 replicas, ~7.3 each, above the cap of 4 sequences. Utilization = lambda x
    # (prefill alone + 99 decode steps at batch 4, context S + (N-2)/2, each shared by 4) / 2.
    tr = _hand_trace(tpot_ms=30.0, ttft_s=0.7, prompt=8000, n=80, interval_s=0.25,
                     engine={"enable_prefix_caching": False, "replicas": 2, "max_num_seqs": 4})
    adv = advise(tr, slos=["ttft_ms<=500"])
    f = adv.facts
    assert f["mean_in_flight"] / 2 > 4
    ctx = 8000 + (OUTPUT - 2) / 2
    t_dec4 = (((LINEAR_PARAMS + LM_HEAD_PARAMS) * 2
               + 4 * (L * 2 * HKV * HD * 2 * (ctx + 1) + ACT_BYTES_PER_SEQ))
              / BW_EFF_B_S + DECODE_KERNELS * KERNEL_S)
    busy_s = _hand_prefill_s(8000) + (OUTPUT - 1) * t_dec4 / 4
    lam = f["arrival_rate_req_s"]
    assert lam == pytest.approx(4.0, rel=0.02)
    assert f["utilization"] == pytest.approx(lam * busy_s / 2, rel=1e-5)

"""Speculative decoding in the step-time model (ridgeline.perf.whatif), in the engine that
`simulate` runs, and in `estimate --spec-k`; every expected number is worked out by hand.

E = (1 - a^(k+1)) / (1 - a) tokens per verify pass (k drafts, acceptance a). A verify pass
computes k+1 tokens per sequence on its context, with logits for all of them; a mixed step's
prefill chunks are not speculative, so only the decode share is divided by E.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from ridgeline.cli import app
from ridgeline.perf.roofline_step import RooflineStepTime
from ridgeline.perf.step_time import BatchWork, LinearStepTime
from ridgeline.perf.whatif import WhatIf, WhatIfStepTime
from ridgeline.sim.engine import Engine, EngineConfig, EngineRequest

L, D, HQ, HKV, HD, FF, V = 32, 4096, 32, 8, 128, 14336, 128256   # Llama 3.1 8B config.json
LINEAR_PARAMS = L * (D * (HQ + 2 * HKV) * HD + HQ * HD * D + D * 2 * FF + FF * D)
C_EFF = 989.4e12 * 0.7           # H100 SXM dense bf16 peak x the catalog's GEMM efficiency
BW_EFF = 3.35e12 * 0.85          # HBM3 3.35 TB/s x the catalog's streaming efficiency


def _e(k: int, a: float) -> float:
    return (1 - a ** (k + 1)) / (1 - a)


def test_mixed_step_divides_only_the_decode_share():
    # 1 s + 1e-4 s per prompt token + 1e-8 s per attention pair + 1e-6 s per KV token read.
    base = LinearStepTime(base_s=0.010, per_prefill_token_s=1e-4, per_attn_pair_s=1e-8,
                          per_context_token_s=1e-6)
    m = WhatIfStepTime(base, WhatIf(spec_k=3, spec_alpha=0.5))
    e = _e(3, 0.5)                                         # 1.875
    # A 512-token prefill chunk (no cached context) and 4 decode sequences on 4,000 KV tokens.
    pairs = 512 * 513 / 2
    w = BatchWork(prefill_tokens=512, prefill_attn_pairs=pairs, prefill_seqs=1,
                  decode_seqs=4, decode_context_tokens=4000)
    t_pre = 0.010 + 512e-4 + pairs * 1e-8                   # the chunk alone
    # Verify: 4 x 4 = 16 more tokens, 4 x 4000... pairs: q x context + b q (q+1)/2 = 16,040.
    t_mix = 0.010 + (512 + 16) * 1e-4 + (pairs + 4 * 4000 + 4 * 4 * 5 / 2) * 1e-8 + 4000e-6
    assert m.step_time_s(w) == pytest.approx(t_pre + (t_mix - t_pre) / e)
    # Prefill-only steps are untouched.
    pre_only = BatchWork(prefill_tokens=512, prefill_attn_pairs=pairs, prefill_seqs=1)
    assert m.step_time_s(pre_only) == pytest.approx(t_pre)


def test_engine_event_times_with_speculation():
    # The engine `simulate` runs, with test_engine's step (10 ms + 1 ms per prompt token +
    # 2 ms per decoding sequence) under k=3, a=0.5 (E = 1.875). A verify pass turns each
    # decoding sequence into 4 prompt tokens (4 ms), no decode-sequence term.
    base = LinearStepTime(base_s=0.010, per_prefill_token_s=0.001, per_decode_seq_s=0.002)
    m = WhatIfStepTime(base, WhatIf(spec_k=3, spec_alpha=0.5))
    eng = Engine(EngineConfig(num_kv_blocks=100), m)
    eng.add_request(EngineRequest("A", prompt_tokens=10, output_tokens=3, arrival_s=0.0))
    r0 = eng.step(0.0)                     # A's prefill alone: 10 + 10 = 20 ms, not divided
    assert r0.duration_s == pytest.approx(0.020)
    eng.add_request(EngineRequest("B", prompt_tokens=20, output_tokens=2, arrival_s=0.005))
    r1 = eng.step(0.020)                   # B's prefill (30 ms) + A's verify (4 ms) / E
    assert r1.duration_s == pytest.approx(0.030 + 0.004 / 1.875)       # 32.13 ms
    assert sorted(r1.emitted) == [("A", 1), ("B", 1)]
    r2 = eng.step(0.020 + r1.duration_s)   # both verify: (10 + 8) ms / E = 9.6 ms
    assert r2.duration_s == pytest.approx(0.018 / 1.875)
    assert sorted(r2.finished) == ["A", "B"]


def test_simulate_uses_the_python_engine_for_speculation():
    from ridgeline.sim.core import engine_blocker
    from ridgeline.sim.scenario import Scenario

    sc = Scenario(whatif=WhatIf(spec_k=4))
    sm = sc.step_model()
    assert engine_blocker(sm, sc.engine_config(sm)) is not None


def _lm_head_s(rows: float) -> float:
    """The LM head GEMM [rows, d] x [d, V] on an H100: max(compute, HBM) (roofline)."""
    return max(2 * D * V * rows / C_EFF, (D * V * 2 + rows * (D + V) * 2) / BW_EFF)


def test_verify_pass_computes_logits_for_every_position():
    # At batch 256 with k = 4 the verify pass needs 256 x 5 = 1,280 rows of logits, not 256:
    # the LM head is then compute-bound, 2 d V rows / C = 1.94 ms instead of ~0.39 ms.
    base = RooflineStepTime.from_names(model="llama-3.1-8b", hardware="h100-sxm",
                                       kernel_model=False)   # the plain roofline, by hand
    m = WhatIfStepTime(base, WhatIf(spec_k=4, spec_alpha=0.7))
    b, ctx = 256, 1151
    t = float(m.speculative_round_s(b, b * ctx))
    b_rows = BatchWork(prefill_tokens=b * 5, prefill_attn_pairs=5 * b * ctx + b * 15,
                       prefill_context_tokens=b * ctx, prefill_seqs=b)   # logits for b rows
    t_b_rows = float(base.step_time_s(b_rows))
    assert t - t_b_rows == pytest.approx(_lm_head_s(b * 5) - _lm_head_s(b), rel=1e-6)
    assert (t - t_b_rows) / t == pytest.approx(0.036, abs=0.004)   # the issue's ~3.6%


def test_estimate_spec_ceiling_is_speculative_and_above_the_throughput():
    # The decode ceiling for one round: B E / max(F_v / C, D_v / beta), F_v and D_v
    # the verify pass's FLOPs and bytes. llama-3.1-8b bf16, S=1024, N=256: T = 1151.
    runner = CliRunner()
    e = _e(4, 0.7)
    ctx = 1024 + (256 - 2) / 2
    for b in (1, 256):
        r = runner.invoke(app, ["estimate", "-b", str(b), "--spec-k", "4", "--json"])
        assert r.exit_code == 0, r.output
        out = json.loads(r.stdout)["result"]
        q = 5
        pairs = b * (q * ctx + q * (q + 1) / 2)
        # FLOPs: 2 per weight per token through the linear layers and the LM head (all b q
        # positions), attention 4 h_q d_h per causal pair and layer (QK^T and PV).
        f_v = 2 * (LINEAR_PARAMS + D * V) * b * q + 4 * HQ * HD * L * pairs
        # Bytes: all weights once, the KV of T old + q new tokens per sequence.
        d_v = (LINEAR_PARAMS + D * V) * 2 + b * (ctx + q) * L * 2 * HKV * HD * 2
        hand = b * e / max(f_v / C_EFF, d_v / BW_EFF)
        assert out["decode_ceiling_tok_s"] == pytest.approx(hand, rel=0.01), b
        assert out["decode_ceiling_tok_s"] >= out["decode_aggregate_tok_s"]
        assert "speculative" in out["decode_ceiling_formula"]
    # b = 1 is memory-bound (~521 tok/s), b = 256 compute-bound (~24,600 tok/s).
    # the decode ceiling is a --details row (the decode roofline terms)
    text = runner.invoke(app, ["estimate", "-b", "1", "--spec-k", "4", "--details"]).stdout
    assert "(speculative)" in text


def test_plain_ceiling_unchanged():
    r = CliRunner().invoke(app, ["estimate", "-b", "1", "--json"])
    out = json.loads(r.stdout)["result"]
    ctx = 1024 + 127
    d = (LINEAR_PARAMS + D * V) * 2 + (ctx + 1) * L * 2 * HKV * HD * 2
    assert out["decode_ceiling_tok_s"] == pytest.approx(BW_EFF / d, rel=0.01)   # ~188
    assert out["decode_ceiling_formula"] == "min(B·C/F_dec, B·β/D_dec)"
    assert np.isfinite(out["decode_aggregate_tok_s"])


def test_simulate_spec_tpot_is_plain_tpot_over_e():
    # One request at a time (0.2 req/s, 100 outputs of ~5 ms): every decode step is a batch
    # of one, memory-bound, so a verify pass of k+1 = 5 tokens costs a decode step (the same
    # 15 GB of weights; 4 more tokens of KV and logits, < 0.1%). TPOT = t_decode / E; TTFT
    # (a prefill-only step) is unchanged.
    from ridgeline.sim.scenario import Scenario
    from ridgeline.sim.scenario_run import run_scenario

    def p50(run, key):
        return run.analysis.latency[key].percentiles["p50"].value

    # The plain roofline (the catalog's 0.7/0.85: the argument above is the roofline's) and no
    # engine CPU costs, which add the same time to both runs' tokens.
    kw = dict(rate_req_s=0.2, requests=12, prompt="fixed:500", output="fixed:100", seed=3,
              compute_efficiency=0.7, bandwidth_efficiency=0.85, engine_costs=False)
    plain = run_scenario(Scenario(**kw))
    spec = run_scenario(Scenario(whatif=WhatIf(spec_k=4, spec_alpha=0.7), **kw))
    assert p50(spec, "tpot_ms") == pytest.approx(p50(plain, "tpot_ms") / _e(4, 0.7), rel=0.002)
    assert p50(spec, "ttft_ms") == pytest.approx(p50(plain, "ttft_ms"), rel=1e-9)


def test_whatif_describe_records_what_was_set():
    # The trace header's record of the what-ifs: only what was set, E by hand.
    assert WhatIf().describe() == {}
    assert WhatIf(cpu_detokenize_us_per_event=50.0).describe() == {
        "cpu_detokenize_us_per_event": 50.0}
    assert WhatIf(cpu_tokenize_us_per_token=2.0, enforce_eager=True).describe() == {
        "cpu_tokenize_us_per_token": 2.0, "enforce_eager": True}
    d = WhatIf(spec_k=4, spec_alpha=0.7).describe()
    assert d["spec_tokens_per_step"] == pytest.approx(1 + 0.7 + 0.49 + 0.343 + 0.2401)
    assert (d["spec_k"], d["spec_alpha"], d["spec_draft_model"]) == (4, 0.7, None)

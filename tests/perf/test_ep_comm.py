"""The expert-parallel dispatch/combine each engine runs (perf/comm.py, perf/ops.py).

Bytes are hand-computed from DeepSeek-V3's shapes (hidden 7,168, 8 of 256 experts, 58 MoE
layers); DeepEP's fitted time is held to the measured SGLang rows; the engine defaults are read
from the preset files; the flag goes through the installed `ridgeline estimate`.
"""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from ridgeline.errors import RidgelineError
from ridgeline.perf.comm import EP_BACKENDS, default_ep_backend
from ridgeline.perf.ops import VAR, build_table
from ridgeline.perf.roofline_step import RooflineStepTime
from ridgeline.specs import load_model
from ridgeline.specs.parallel import Parallelism
from ridgeline.specs.precision import resolve_precision

RIDGELINE = Path(sys.executable).with_name("ridgeline")
DATA = Path(__file__).parents[1] / "data" / "aic_kernels"
D, MOE_LAYERS, EP, TOKENS = 7168, 58, 8, 64
# A token's 8 experts all miss one rank's 32 of 256 with probability C(224, 8) / C(256, 8).
REMOTE_RANKS = 7 * (1 - math.comb(224, 8) / math.comb(256, 8))


def _bytes_per_gpu_per_layer(backend: str, weights: str) -> float:
    """The table's seconds per token over a 1 B/s link with no latency: bytes, times 64
    tokens, over the MoE layers (no DeepEP kernels measured: the link carries its rows)."""
    par = Parallelism(tp=1, ep=EP, attn_dp=EP, ep_comm=backend)
    t = build_table(load_model("deepseek-v3"), resolve_precision(weights), par, 1.0, 0.0,
                    collectives=lambda kind, p: None if kind.startswith("deepep_")
                    else (0.0, 1.0))
    assert t.comm_s[VAR["any"]] == 0.0
    return float(t.comm_s[VAR["n"]]) * TOKENS / MOE_LAYERS


@pytest.mark.parametrize("weights, expert_input_bytes", [("bf16", 2), ("fp8", 1)])
def test_bytes_each_backend_moves_by_hand(weights: str, expert_input_bytes: int) -> None:
    """64 tokens over EP 8. All-gather: every GPU receives the other 7/8 of the 64 16-bit
    rows, and the reduce-scatter sends as many back: 2 x 7/8 x 64 x 7,168 x 2 B, whatever the
    experts' dtype (the experts quantize after the gather). DeepEP: each GPU's 8 tokens go
    once to the 4.63 remote ranks holding one of their experts, fp8 out where the expert GEMMs
    take fp8 (always on the low-latency kernels), 16-bit back."""
    assert f"{REMOTE_RANKS:.4f}" == "4.6328"
    ag = 7 / 8 * 64 * 7168 * 2 + 7 / 8 * 64 * 7168 * 2
    assert ag == 1_605_632
    assert _bytes_per_gpu_per_layer("allgather_reducescatter", weights) == pytest.approx(ag)
    ht = 8 * REMOTE_RANKS * 7168 * (expert_input_bytes + 2)
    assert _bytes_per_gpu_per_layer("deepep_high_throughput", weights) == pytest.approx(ht)
    ll = 8 * REMOTE_RANKS * 7168 * (1 + 2)
    assert _bytes_per_gpu_per_layer("deepep_low_latency", weights) == pytest.approx(ll)
    assert ht < ag and ll < ag


def test_all_gather_and_reduce_scatter_use_their_own_links() -> None:
    """Each collective's own (latency, bus bandwidth): 58 layers x (12 + 5 us), and the
    7/8 x 7,168 x 2 B a token's row costs over 100 GB/s out and 50 GB/s back."""
    links = {"all_gather": (12e-6, 100e9), "reduce_scatter": (5e-6, 50e9)}
    t = build_table(load_model("deepseek-v3"), resolve_precision("bf16"),
                    Parallelism(tp=1, ep=EP, attn_dp=EP, ep_comm="allgather_reducescatter"),
                    1.0, 0.0, collectives=lambda kind, p: links.get(kind))
    assert t.comm_s[VAR["any"]] == pytest.approx(58 * 17e-6)
    row = 7 / 8 * 7168 * 2
    assert t.comm_s[VAR["n"]] == pytest.approx(58 * (row / 100e9 + row / 50e9))


def test_the_gather_runs_over_the_attention_ranks_only() -> None:
    """TP 8 x EP 8 without attention DP: every GPU already holds the step's tokens (vLLM uses
    no all2all manager then) and the outputs' sum is the TP all-reduce, so only the 2 x 61 + 1
    all-reduces remain. TP 2 x attention-DP 4: the gather spans the 4 ranks, 3/4 of the
    tokens, on the links measured for 4 GPUs."""
    model, pr = load_model("deepseek-v3"), resolve_precision("bf16")
    seen: list[tuple[str, int]] = []

    def links(kind: str, p: int) -> tuple[float, float]:
        seen.append((kind, p))
        return 0.0, 1.0

    tp8 = build_table(model, pr, Parallelism(tp=8, ep=8, ep_comm="allgather_reducescatter"),
                      1.0, 0.0, collectives=links)
    assert tp8.comm_s[VAR["n"]] == pytest.approx(123 * 2 * 7 / 8 * D * 2)
    assert {k for k, _ in seen} == {"all_reduce"}
    seen.clear()
    mixed = build_table(model, pr, Parallelism(tp=2, ep=8, attn_dp=4,
                                               ep_comm="allgather_reducescatter"),
                        1.0, 0.0, collectives=links)
    all_reduce = 123 * 2 * 1 / 2 * D * 2 / 4   # one rank's quarter of the tokens
    gather = MOE_LAYERS * 3 / 4 * D * (2 + 2)
    assert mixed.comm_s[VAR["n"]] == pytest.approx(all_reduce + gather)
    assert ("all_gather", 4) in seen and ("reduce_scatter", 4) in seen


def test_deepep_low_latency_step_cost_matches_the_measured_rows() -> None:
    """On H100 with SGLang's measured DeepEP fit: one MoE layer's dispatch + combine of
    `num_token` tokens per GPU (8 GPUs, so n = 8 x num_token) against the measured rows."""
    sm = RooflineStepTime.from_names("deepseek-v3", "h100-sxm", weights="bf16", tp=1, ep=EP,
                                     attn_dp=EP, ep_comm="deepep_low_latency", check_fit=False,
                                     engine="sglang")
    with open(DATA / "attn_deepep_ll_h100.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert rows
    for r in rows:
        n = EP * int(r["num_token"])
        got = (sm.table.comm_s[VAR["n"]] * n + sm.table.comm_s[VAR["any"]]) / MOE_LAYERS
        want = (float(r["dispatch_avg_t_us"]) + float(r["combine_avg_t_us"])) * 1e-6
        assert got == pytest.approx(want, rel=0.25)


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_each_engine_runs_its_presets_backend(engine: str) -> None:
    text = resources.files("ridgeline.specs").joinpath("data", "engines",
                                                      f"{engine}.json").read_text()
    want = json.loads(text)["ep_comm"]["all2all_backend"]
    assert want in EP_BACKENDS
    assert default_ep_backend(engine) == want
    sm = RooflineStepTime.from_names("deepseek-v3", "h200", tp=1, ep=EP, attn_dp=EP,
                                     engine=engine)
    assert sm.parallel.ep_comm == want


def test_vllms_default_is_the_all_gather() -> None:
    # vLLM's ParallelConfig.all2all_backend default; SGLang's --moe-a2a-backend none gathers
    # and reduce-scatters too.
    assert default_ep_backend("vllm") == "allgather_reducescatter"
    assert default_ep_backend("sglang") == "allgather_reducescatter"
    with pytest.raises(RidgelineError, match=r"all2all-backend: got 'pplx'; allowed: "
                       r"allgather_reducescatter, deepep_high_throughput, deepep_low_latency"):
        RooflineStepTime.from_names("deepseek-v3", "h200", tp=1, ep=EP, attn_dp=EP,
                                    ep_comm="pplx")


def _estimate(tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], str]:
    out = tmp_path / "estimate.txt"
    with out.open("w") as f:
        proc = subprocess.run([str(RIDGELINE), "estimate", "deepseek-v3", "-g", "h200", "--tp",
                               "1", "--attention-dp", "8", "--ep", "8", "-b", "64", *extra],
                              stdout=f, stderr=subprocess.PIPE, text=True, timeout=300)
    return proc, out.read_text()


def test_estimate_states_the_backend_and_its_bytes(tmp_path: Path) -> None:
    proc, text = _estimate(tmp_path)
    assert proc.returncode == 0, proc.stderr
    # 7/8 x 7,168 x (2 + 2) B a token, the all-gather's.
    assert "EP dispatch/combine: allgather_reducescatter (25,088 B per token per GPU" in text
    proc, text = _estimate(tmp_path, "--all2all-backend", "deepep_low_latency")
    assert proc.returncode == 0, proc.stderr
    # 4.6328 / 8 x 7,168 x (1 + 2) B.
    ll = REMOTE_RANKS / 8 * 7168 * 3
    assert f"{ll:,.0f}" == "12,453"
    assert f"EP dispatch/combine: deepep_low_latency ({ll:,.0f} B per token per GPU" in text


def test_estimate_refuses_an_unknown_backend(tmp_path: Path) -> None:
    proc, text = _estimate(tmp_path, "--all2all-backend", "pplx")
    assert proc.returncode != 0 and text == ""
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert errors == ["error: all2all-backend: got 'pplx'; allowed: allgather_reducescatter, "
                      "deepep_high_throughput, deepep_low_latency"]

"""The operator table's coefficients against bytes, FLOPs and seconds worked out by hand.

Each number below is derived from the model's published shapes (heads, head size, layers,
hidden size, experts) and the formula named beside it, not read back from ridgeline. The
rows checked are the ones a mutation pass found untested: qk-norm, the experts' activation,
the EP all-to-all, the sliding-window work variables and the windowed prefill's bytes.
"""

from __future__ import annotations

import numpy as np
import pytest

from ridgeline.perf.ops import VAR, build_table
from ridgeline.perf.window import EXT_VAR, build_ext_table, window_work
from ridgeline.specs import load_model, resolve_precision
from ridgeline.specs.parallel import Parallelism

BF16 = 2.0


def _row(table, name: str) -> int:  # type: ignore[no-untyped-def]
    return table.names.index(name)


def test_qk_norm_reads_and_writes_q_and_k_of_every_layer() -> None:
    """Qwen3-8B (32 query heads, 8 KV heads, head 128, 36 layers) normalises Q and K per head:
    read + write of (32 + 8) x 128 bf16 values per token per layer = 20,480 B, 737,280 B over
    36 layers. Llama-3.1-8B has no qk-norm and so no such row."""
    table = build_table(load_model("qwen3-8b"), resolve_precision(), Parallelism(tp=1), 1.0, 0.0)
    i = _row(table, "qk_norm")
    assert table.bytes[i, VAR["n"]] == pytest.approx(2 * (32 + 8) * 128 * BF16 * 36, rel=1e-12)
    assert table.bytes[i, VAR["n"]] == pytest.approx(737_280.0, rel=1e-12)
    # At TP 2 each GPU holds 16 query heads and 4 KV heads: half the bytes.
    tp2 = build_table(load_model("qwen3-8b"), resolve_precision(), Parallelism(tp=2), 1.0, 0.0)
    assert tp2.bytes[_row(tp2, "qk_norm"), VAR["n"]] == pytest.approx(368_640.0, rel=1e-12)
    llama = build_table(load_model("llama-3.1-8b"), resolve_precision(), Parallelism(tp=1),
                        1.0, 0.0)
    assert "qk_norm" not in llama.names


def test_experts_activation_costs_each_routed_expert_per_token() -> None:
    """Mixtral-8x7B at TP 2: 2 routed experts per token, each with 14,336 / 2 = 7,168
    intermediate columns per GPU. SiLU(gate) x up reads gate and up and writes one:
    3 x 2 x 7,168 x 2 B = 86,016 B per token per layer, 2,752,512 B over 32 layers, and
    5 FLOPs per output element: 5 x 2 x 7,168 x 32 = 2,293,760 FLOPs per token."""
    table = build_table(load_model("mixtral-8x7b"), resolve_precision(), Parallelism(tp=2),
                        1.0, 0.0)
    i = _row(table, "experts_act")
    assert table.bytes[i, VAR["n"]] == pytest.approx(2_752_512.0, rel=1e-12)
    assert table.flops[i, VAR["n"]] == pytest.approx(2_293_760.0, rel=1e-12)


def test_ep_all_to_all_sends_each_token_to_its_experts_once_per_dispatch_and_combine() -> None:
    """Mixtral-8x7B with its experts over EP 2 (TP 2): 32 MoE layers x (dispatch + combine)
    = 64 all-to-alls a step, as DeepEP sends them. A token goes to the other rank once when
    one of its k = 2 experts is there: all 4 of that rank's experts are missed with
    probability C(4, 2)/C(8, 2) = 6/28, so 22/28 = 11/14 of a hidden vector of 4,096 bf16
    values per token; the GPU holds 1/p of the tokens:
    64 x 11/14 x 4,096 x 2 B / 2 = 205,970.29 B per token (per pair it would be 262,144 B);
    over a 100 GB/s link that is 2.0597 us per token, plus 64 x 10 us of latency whenever the
    step runs. TP's ring all-reduce comes on top (65 of them: 2 per layer and the
    embedding). No DeepEP kernels measured here: the all-to-all link carries the rows."""
    lat_s, bw = 10e-6, 100e9

    def links(kind: str, p: int) -> tuple[float, float] | None:
        return None if kind.startswith("deepep_") else (lat_s, bw)

    par = Parallelism(tp=2, ep=2, ep_comm="deepep_high_throughput")
    table = build_table(load_model("mixtral-8x7b"), resolve_precision(), par, bw, lat_s, links)
    ar_per_token = 65 * (2 * 1 / 2) * 4096 * BF16 / bw   # ring: 2(p-1)/p x n d b_a / bw
    ep_bytes = 64 * 11 / 14 * 4096 * BF16 / 2
    assert ep_bytes == pytest.approx(205_970.2857, rel=1e-9)
    assert table.comm_s[VAR["n"]] == pytest.approx(ep_bytes / bw + ar_per_token, rel=1e-12)
    assert table.comm_s[VAR["any"]] == pytest.approx((64 + 65) * lat_s, rel=1e-12)
    no_ep = build_table(load_model("mixtral-8x7b"), resolve_precision(),
                        Parallelism(tp=2, ep_comm="deepep_high_throughput"), bw, lat_s, links)
    assert table.comm_s[VAR["n"]] - no_ep.comm_s[VAR["n"]] == pytest.approx(2.0597029e-6,
                                                                           rel=1e-7)


def test_window_work_caps_cached_reads_at_the_window_per_sequence() -> None:
    """A window of 4 tokens. Prefill: 2 sequences, each a 5-token chunk after 10 cached tokens
    (pt 10, pc 20, ps 2): each query sees a full window, so 2 x 5 x 4 = 40 pairs and each
    sequence reads 4 cached tokens, 8 in all (not 20). Decode: 3 sequences at 10 tokens of
    context (dq 3, dc 30) read 3 x 4 = 12 tokens, not 30. A window wider than every context
    changes nothing."""
    one = np.array([1.0])
    pairs_w, pc_w, dc_w = window_work(4.0, pt=10 * one, pairs=1e6 * one, pc=20 * one,
                                      ps=2 * one, dq=3 * one, dc=30 * one)
    assert (float(pairs_w[0]), float(pc_w[0]), float(dc_w[0])) == (40.0, 8.0, 12.0)
    wide = window_work(1e6, pt=10 * one, pairs=2 * (11 + 15) * 5 / 2 * one, pc=20 * one,
                       ps=2 * one, dq=3 * one, dc=30 * one)
    assert [float(a[0]) for a in wide] == [130.0, 20.0, 30.0]


def test_windowed_prefill_moves_q_o_new_kv_and_its_write_per_new_token() -> None:
    """Mistral-7B-v0.1 (every layer windowed; 32 query heads, 8 KV heads, head 128, 32 layers),
    TP 1, bf16. Per new token per layer FlashAttention reads Q (32 x 128 x 2 B = 8,192 B),
    writes O (8,192 B), reads the new K and V (2 x 8 x 128 x 2 B = 4,096 B) and writes them
    to the cache (4,096 B): 24,576 B, 786,432 B over 32 layers. Each windowed cached token
    costs one K/V read: 4,096 B per layer, 131,072 B in all."""
    m = load_model("tests/data/hf_configs/mistralai--Mistral-7B-v0.1.json")
    table = build_ext_table(m, resolve_precision(), Parallelism(tp=1), 1.0, 0.0)
    i = _row(table, "attn_prefill_window")
    assert table.bytes[i, EXT_VAR["pt"]] == pytest.approx(786_432.0, rel=1e-12)
    assert table.bytes[i, EXT_VAR["pc_w"]] == pytest.approx(131_072.0, rel=1e-12)
    # 4 FLOPs per head dimension per causal pair (QK^T and PV): 4 x 32 x 128 x 32 layers.
    assert table.flops[i, EXT_VAR["pairs_w"]] == pytest.approx(524_288.0, rel=1e-12)

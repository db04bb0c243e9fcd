"""The step model prices each step's collectives at that step's own message size, in the
size-banded form fitted on NVIDIA's measured all-reduce tables.

Hand numbers: Llama-3.1-8B (hidden 4096, 32 layers, bf16 activations) over two H100s runs
2 x 32 + 1 = 65 all-reduces a step (after attention and after the MLP in every layer, and
the vocab-parallel embedding), each of tokens x 4096 x 2 bytes. The band constants are read
from the catalog file itself (vLLM's custom all-reduce over 2 GPUs); the measured rows are
AIConfigurator's (tests/data/aic_kernels/attn_allreduce_h100_vllm.csv, message_size in bf16
elements, latency in ms).
"""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ridgeline.perf.comm import BandedTerm
from ridgeline.perf.fast_step import CompiledStep
from ridgeline.perf.roofline_step import RooflineStepTime
from ridgeline.perf.step_time import BatchWork
from ridgeline.sim import core
from ridgeline.sim.engine import EngineConfig

REPO = Path(__file__).resolve().parents[2]
CATALOG = REPO / "src" / "ridgeline" / "specs" / "data" / "kernels_measured_attention_comm.json"
ROWS = REPO / "tests" / "data" / "aic_kernels" / "attn_allreduce_h100_vllm.csv"
HIDDEN, LAYERS, ACT_BYTES = 4096, 32, 2
COUNT = 2 * LAYERS + 1


def _bands() -> dict:
    cat = json.loads(CATALOG.read_text())
    return cat["gpus"]["h100_sxm"]["engines"]["vllm"]["custom_all_reduce"]["by_gpus"]["2"][
        "banded"]


def _hand_allreduce_s(message_bytes: float) -> float:
    """One all-reduce over 2 GPUs by hand: bus bytes 2(p-1)/p x message = the message."""
    b = _bands()
    band = b["above"] if message_bytes >= b["edge_message_bytes"] else b["below"]
    if "high" in b and message_bytes >= b["edge_high_message_bytes"]:
        band = b["high"]
    x = 1.0 * message_bytes
    return (band["latency_us"] * 1e-6 + x / band["bus_bandwidth_bytes_s"]
            + band["sqrt_us_per_sqrt_byte"] * 1e-6 * math.sqrt(x))


def _measured_ms(elements: int) -> float:
    with open(ROWS, newline="") as fh:
        for r in csv.DictReader(fh):
            if int(r["num_gpus"]) == 2 and int(r["message_size"]) == elements:
                return float(r["latency"])
    raise AssertionError(f"no measured row of {elements} elements")


@pytest.fixture(scope="module")
def tp2() -> RooflineStepTime:
    return RooflineStepTime.from_names(model="llama-3.1-8b", hardware="h100-sxm", tp=2)


# (tokens in the step, measured message size in bf16 elements): a decode step of 16
# sequences (128 KiB: one-shot, the lowest band), a 128-token prefill (1 MiB: two-shot) and a
# 1024-token one (8 MiB: the upper edge, where the top band starts).
STEPS = [(16, 65536), (128, 524288), (1024, 4194304)]


def test_the_steps_span_every_band() -> None:
    b = _bands()
    sizes = [t * HIDDEN * ACT_BYTES for t, _ in STEPS]
    assert sizes[0] < b["edge_message_bytes"] <= sizes[1] < b["edge_high_message_bytes"] \
        <= sizes[2]


@pytest.mark.parametrize(("tokens", "elements"), STEPS)
def test_step_comm_is_the_band_of_its_message_size(tp2: RooflineStepTime, tokens: int,
                                                    elements: int) -> None:
    message = tokens * HIDDEN * ACT_BYTES
    assert message == 2 * elements   # the measured row's own size
    want = COUNT * _hand_allreduce_s(message)
    work = (BatchWork(decode_seqs=tokens, decode_context_tokens=tokens * 500)
            if tokens == 16 else BatchWork(prefill_tokens=tokens, prefill_seqs=1,
                                           prefill_attn_pairs=tokens * (tokens + 1) / 2))
    got = float(tp2.breakdown(work).comm_s)
    assert got == pytest.approx(want, rel=1e-9)
    # And the fitted band stays within 10% of the measured kernel at that size.
    assert got / COUNT == pytest.approx(_measured_ms(elements) * 1e-3, rel=0.10)


def test_installed_estimate_prints_the_banded_comm(tmp_path: Path) -> None:
    """`ridgeline estimate --json`: decode of 16 sequences and a 1024-token prompt over tp 2."""
    exe = Path(sys.executable).parent / "ridgeline"
    got = {}
    for batch, prompt in ((16, 1024), (1, 1024)):
        out = tmp_path / f"est_{batch}.json"
        with open(out, "w") as fh:
            subprocess.run([str(exe), "estimate", "--model", "llama-3.1-8b", "--hardware",
                            "h100-sxm", "--tp", "2", "--batch", str(batch), "--prompt",
                            str(prompt), "--output", "64", "--json"], stdout=fh, check=True)
        got[batch] = json.loads(out.read_text())["result"]
    assert got[16]["decode_comm_s"] == pytest.approx(
        COUNT * _hand_allreduce_s(16 * HIDDEN * ACT_BYTES), rel=1e-9)
    assert got[1]["prefill_comm_s"] == pytest.approx(
        COUNT * _hand_allreduce_s(1024 * HIDDEN * ACT_BYTES), rel=1e-9)


def test_every_evaluator_agrees_across_the_edge(tp2: RooflineStepTime) -> None:
    """Compiled step, matrix path and per-operator breakdown on steps either side of the band
    edge (1024 tokens here), mixed and decode-only."""
    n = np.array([1023.0, 1024.0, 1025.0, 4000.0, 3.0, 0.0])
    pt = np.array([1000.0, 1000.0, 1000.0, 4000.0, 0.0, 0.0])
    dq = n - pt
    work = BatchWork(prefill_tokens=pt, prefill_seqs=(pt > 0).astype(float),
                     prefill_attn_pairs=pt * (pt + 1) / 2, decode_seqs=dq,
                     decode_context_tokens=dq * 300)
    ref = tp2.breakdown(work).total_s
    v, _ = tp2.work_vars(work)
    np.testing.assert_allclose(tp2._times(v), ref, rtol=1e-12)
    np.testing.assert_allclose(tp2._times_exact(v), ref, rtol=1e-12)
    for j in range(n.size):
        one = BatchWork(prefill_tokens=pt[j], prefill_seqs=float(pt[j] > 0),
                        prefill_attn_pairs=pt[j] * (pt[j] + 1) / 2, decode_seqs=dq[j],
                        decode_context_tokens=dq[j] * 300)
        assert tp2.step_time_s(one) == pytest.approx(float(ref[j]), rel=1e-12, abs=0.0)
    assert ref[-1] == 0.0


def test_three_bands_in_python_compiled_and_the_c_core(tp2: RooflineStepTime) -> None:
    """A term of three bands (edges 100 and 1000 tokens): its seconds by hand, the compiled
    step's generated code and the C core, bit for bit."""
    term = BandedTerm(edges=(100.0, 1000.0),
                      bands=((1e-4, 1e-6, 0.0), (2e-4, 5e-7, 1e-6), (4e-4, 2e-7, 3e-6)))
    hand = {50.0: 1e-4 + 50e-6, 100.0: 2e-4 + 50e-6 + 10e-6,
            999.0: 2e-4 + 999 * 5e-7 + 1e-6 * math.sqrt(999.0),
            1000.0: 4e-4 + 200e-6 + 3e-6 * math.sqrt(1000.0), 0.0: 0.0}
    for n, want in hand.items():
        assert float(term.seconds(n)) == pytest.approx(want, rel=1e-12)
    fast = tp2._fast
    k = tp2._n_ops
    nw = fast.program["lin"].size
    compiled = CompiledStep(tp2._stack[:k, :nw], tp2._stack[k:, :nw], tp2._linear[:nw],
                            False, 0.0, 1.0, bands=[*tp2._bands, term])
    base = CompiledStep(tp2._stack[:k, :nw], tp2._stack[k:, :nw], tp2._linear[:nw],
                        False, 0.0, 1.0, bands=tp2._bands)
    for n, want in hand.items():
        assert compiled.scalar(n, 0.0, 0.0, 1.0 if n else 0.0, 0.0, 0.0) - base.scalar(
            n, 0.0, 0.0, 1.0 if n else 0.0, 0.0, 0.0) == pytest.approx(want, rel=1e-9,
                                                                        abs=1e-15)
    tp2._fast, keep = compiled, tp2._fast
    try:
        c = core.Core(EngineConfig(max_num_seqs=256), tp2, 1, "round-robin", False)
        for n in (1, 50, 99, 100, 101, 999, 1000, 1001, 5000):
            for nd in (0, 7):
                want_s = compiled.scalar(float(n), float(n * n), 0.0, 1.0, float(nd),
                                         float(nd * 100))
                assert c.step_seconds(n, n * n, 0, 1, nd, nd * 100) == want_s
    finally:
        tp2._fast = keep

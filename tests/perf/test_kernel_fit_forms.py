"""The size-banded collective form against rows of NVIDIA's measured NCCL tables.

Rows in tests/data/aic_kernels/nccl_bands_h100_b200.csv are copied unchanged from
AIConfigurator's kernel database (ai-dynamo/aiconfigurator, commit 095f58a51,
aic-core/src/aiconfigurator_core/systems/data/<source_file>; latency in ms, message_size in
fp16 elements): NCCL 2.27 all-reduce over 8 H100s and all-to-all over 8 B200s, one row per
message size from 512 B to 1 GiB. The one alpha-beta line per GPU count that the step model
charges missed these by 8-34% (median, by size decade); the banded form is held to the
catalog's own stated leave-one-size-decade-out error and to the 10% bar.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ridgeline.perf.comm import banded_collective_s
from ridgeline.perf.measured_attention import (
    MeasuredKernels,
    collective_s,
    ep_all_to_all_s,
    measured_catalog,
    measured_for,
)
from ridgeline.perf.measured_kernels import measured_catalog as gemm_moe_catalog

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "aic_kernels"
SCRIPT = REPO / "benchmarks" / "accuracy" / "fit_aic_attention_comm.py"


def _nccl_only(hardware: str) -> MeasuredKernels:
    """The GPU's measured constants with NCCL's all-reduce (no engine custom kernel)."""
    mk = measured_for(hardware, "vllm")
    assert mk is not None
    return dataclasses.replace(mk, custom_all_reduce=None)


def _rows(gpu: str) -> list[dict[str, str]]:
    with open(DATA / "nccl_bands_h100_b200.csv", newline="") as fh:
        return [r for r in csv.DictReader(fh) if r["source_file"].startswith(gpu)]


@pytest.mark.parametrize(("hardware", "gpu", "kind", "op"), [
    ("h100-sxm", "h100_sxm", "all_reduce", "all_reduce"),
    ("b200", "b200_sxm", "all_to_all", "all_to_all")])
def test_banded_collective_matches_measured_rows(hardware: str, gpu: str, kind: str,
                                                 op: str) -> None:
    rows = _rows(gpu)
    assert len(rows) == 21
    mk = _nccl_only(hardware)
    size = np.array([int(r["message_size"]) * 2.0 for r in rows])
    want = np.array([float(r["latency"]) * 1e-3 for r in rows])
    got = collective_s(mk, kind, 8, size)
    assert got is not None
    ape = np.abs(got / want - 1.0)
    stated = measured_catalog()["gpus"][gpu]["nccl"][op]["by_gpus"]["8"]["banded"]["_fit"]
    # These rows are a subset of the fitted ones: their median error is within the fit's
    # stated training error's p90, and under the bar; the old line missed the bar here.
    assert float(np.median(ape)) <= 0.10
    assert float(np.median(ape)) <= stated["residual"]["p90_ape"]
    assert stated["cv"]["median_ape"] <= 0.10
    lat, bw = (lambda r: (r["latency_us"] * 1e-6, r["bus_bandwidth_bytes_s"]))(
        measured_catalog()["gpus"][gpu]["nccl"][op]["by_gpus"]["8"])
    f = (2.0 if kind == "all_reduce" else 1.0) * 7 / 8
    line_ape = np.abs((lat + f * size / bw) / want - 1.0)
    assert float(np.median(ape)) < float(np.median(line_ape))
    # No fitted time below the least the collective moves over the datasheet link (450/900
    # GB/s): the all-to-all's bus bytes; an all-reduce reduced in the NVSwitch sends each
    # byte to the switch and back once.
    link = {"h100-sxm": 450e9, "b200": 900e9}[hardware]
    least = size if kind == "all_reduce" else f * size
    assert np.all(got >= least / link)


def test_band_edges_by_hand() -> None:
    """H100 NCCL all-reduce over 8 GPUs at the fitted edge and one size below it: the
    stored constants evaluated by hand (latency + x / bw + gamma sqrt(x), x = 2 (7/8)
    bytes), and the measured rows at those sizes."""
    b = measured_catalog()["gpus"]["h100_sxm"]["nccl"]["all_reduce"]["by_gpus"]["8"]["banded"]
    edge = float(b["edge_message_bytes"])
    mk = _nccl_only("h100-sxm")
    measured = {int(r["message_size"]) * 2: float(r["latency"]) * 1e-3
                for r in _rows("h100_sxm")}
    assert int(edge) in measured and int(edge) // 2 in measured
    for s, band in ((edge / 2, b["below"]), (edge, b["above"])):
        x = 1.75 * s
        hand = band["latency_us"] * 1e-6 + x / band["bus_bandwidth_bytes_s"] + \
            band["sqrt_us_per_sqrt_byte"] * 1e-6 * math.sqrt(x)
        got = collective_s(mk, "all_reduce", 8, s)
        assert got is not None and float(got) == pytest.approx(hand, rel=1e-12)
        # Within 15% of the measured row (the fit's training p90 APE is 10%; 64 MiB, the last
        # size of the lower band, is its worst: +10.2%).
        assert hand == pytest.approx(measured[int(s)], rel=0.15)


def test_banded_form_switches_at_the_edge() -> None:
    """A hand example: below 1 MB 10 us + x / 100 GB/s; from 1 MB 20 us + x / 200 GB/s +
    1e-8 s/sqrt(B) sqrt(x)."""
    lo, hi = (10e-6, 100e9, 0.0), (20e-6, 200e9, 1e-8)
    t = banded_collective_s(np.array([999_999.0, 1e6, 4e6]), 1.0, 1e6, lo, hi)
    assert t[0] == pytest.approx(10e-6 + 999_999 / 100e9)
    assert t[1] == pytest.approx(20e-6 + 1e6 / 200e9 + 1e-8 * 1e3)
    assert t[2] == pytest.approx(20e-6 + 20e-6 + 20e-6)


def test_custom_all_reduce_three_bands_match_measured_rows() -> None:
    """TensorRT-LLM's custom all-reduce over 8 H100s runs one-shot, two-shot, then NCCL: the
    catalog's three bands against all 23 measured rows (tests/data/aic_kernels/
    custom_allreduce_h100_trtllm_p8.csv, message_size in bf16 elements, latency in ms), and
    one size in each band evaluated by hand from the stored constants."""
    with open(DATA / "custom_allreduce_h100_trtllm_p8.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 23
    mk = measured_for("h100-sxm", "trtllm")
    assert mk is not None and mk.custom_all_reduce is not None
    b = mk.custom_all_reduce["by_gpus"]["8"]["banded"]
    assert {"below", "above", "high", "edge_message_bytes", "edge_high_message_bytes"} <= set(b)
    size = np.array([int(r["message_size"]) * 2.0 for r in rows])
    want = np.array([float(r["latency"]) * 1e-3 for r in rows])
    got = collective_s(mk, "all_reduce", 8, size)
    assert got is not None
    ape = np.abs(got / want - 1.0)
    assert float(np.median(ape)) <= 0.10
    assert b["_fit"]["cv"]["median_ape"] <= 0.10
    e1, e2 = float(b["edge_message_bytes"]), float(b["edge_high_message_bytes"])
    assert e1 < e2 and e1 in size and e2 in size
    for s, band in ((size[0], b["below"]), (e1, b["above"]), (e2, b["high"])):
        x = 1.75 * s
        hand = band["latency_us"] * 1e-6 + x / band["bus_bandwidth_bytes_s"] + \
            band["sqrt_us_per_sqrt_byte"] * 1e-6 * math.sqrt(x)
        one = collective_s(mk, "all_reduce", 8, s)
        assert one is not None and float(one) == pytest.approx(hand, rel=1e-12)
    # No band beats the least an all-reduce moves through an NVSwitch that reduces in the
    # switch: each byte to it and back once over the 450 GB/s link.
    assert np.all(got >= size / 450e9)


def test_ep_all_to_all_without_deepep_takes_the_banded_nccl_time() -> None:
    """vLLM on B200 has no DeepEP table: dispatch + combine are NCCL's all-to-all twice,
    at 64 tokens x top-8 x 7,168 x 2 B = 7,340,032 B per GPU. The measured 8-B200
    all-to-all of 8 MiB (the nearest row above) bounds it from above."""
    mk = measured_for("b200", "vllm")
    assert mk is not None
    mk = dataclasses.replace(mk, deepep={})
    rows = {int(r["message_size"]) * 2: float(r["latency"]) * 1e-3 for r in _rows("b200_sxm")}
    msg = 64 * 8 * 7168 * 2.0
    nccl = collective_s(mk, "all_to_all", 8, msg)
    assert nccl is not None
    lo, hi = rows[4 * 2**20], rows[8 * 2**20]
    assert lo < float(nccl) < hi * 1.1
    assert ep_all_to_all_s(mk, 64, 7168, 8, 8) == pytest.approx(2 * float(nccl))


def test_fit_script_refits_collectives_through_the_command(tmp_path: Path) -> None:
    """`fit_aic_attention_comm.py --only-collectives --gpus l40s` rewrites L40S's collectives
    in a copy of the catalog and reports each (engine, collective, GPU count) row with its
    train and CV error; a bad --gpus is one error line."""
    data = REPO.parent / "shared" / "data" / "aic-kernels"
    if not (data / "l40s" / "comm").is_dir():
        pytest.skip("the measured tables are not in ../shared/data")
    cat = tmp_path / "cat.json"
    cat.write_text(json.dumps(measured_catalog()))
    res = tmp_path / "res.json"
    run = subprocess.run([sys.executable, str(SCRIPT), "--only-collectives", "--gpus", "l40s",
                          "--catalog", str(cat), "--results", str(res), "--data", str(data)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    rows = json.loads(res.read_text())["rows"]
    ar2 = [r for r in rows if r["gpu"] == "l40s" and r["engine"] == "nccl"
           and r["class"] == "all_reduce/p2"]
    assert len(ar2) == 1 and ar2[0]["cv_median_ape"] <= 0.10
    assert ar2[0]["line_cv_median_ape"] > ar2[0]["cv_median_ape"]
    got = json.loads(cat.read_text())["gpus"]["l40s"]["nccl"]["all_reduce"]["by_gpus"]["2"]
    assert {"below", "above", "edge_message_bytes"} <= set(got["banded"])
    bad = subprocess.run([sys.executable, str(SCRIPT), "--only-collectives", "--gpus", "x9"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.startswith("error: --gpus: got x9")


def _in_fit_script(body: str) -> Any:
    """Run `body` in a fresh interpreter with benchmarks/accuracy/fit_aic_kernels.py imported
    as `fk` (and json, numpy as np); return what it prints as JSON. A subprocess keeps the
    benchmark script out of the test process's imports."""
    scripts = str(REPO / "benchmarks" / "accuracy")
    code = ("import sys, json\n"
            "import numpy as np\n"
            f"sys.path.insert(0, {scripts!r})\n"
            "import fit_aic_kernels as fk\n" + body)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_least_absolute_refit_lands_on_the_median() -> None:
    """The GEMM/MoE fits' L1 refit (reweighted Levenberg-Marquardt): a constant fitted to
    log errors 0 (seven rows) and 2 (three rows, a kernel's slow path) is their median 0,
    where least squares gives their mean 0.6."""
    # the fit script runs as a subprocess (tests do not import benchmark scripts)
    l2_0, l1_0 = _in_fit_script(
        "y = np.array([0.0] * 7 + [2.0] * 3)\n"
        "def resid(theta):\n"
        "    return theta[0] - y\n"
        "l2 = fk.lm_fit(resid, np.array([1.0]), 60)\n"
        "l1 = fk.lm_fit_l1(resid, np.array([1.0]), 60, 8)\n"
        "print(json.dumps([float(l2[0]), float(l1[0])]))\n")
    assert l2_0 == pytest.approx(0.6, abs=1e-4)
    assert abs(l1_0) < 0.02


def test_moe_fit_rows_leave_out_min_latency_routing_and_price_relu2_experts_non_gated() -> None:
    """The MoE fit's rows of B200 TensorRT-LLM NVFP4, against the measured table itself:
    Mixtral's layer (4096 x 14336, 8 experts, top-2) at TP1 and 4 tokens is the fastest
    balanced-routing row of the standard kernel, not the faster min-latency row (timed through
    a DeepSeek-V3 group-limited gate, not the balanced routing); Nemotron-3-Super's relu2
    experts (4096 x 2688, 512, top-22) are fitted as a non-gated layer (1 x I up columns)."""
    pq = pytest.importorskip("pyarrow.parquet")
    data = REPO.parent / "shared" / "data" / "aic-kernels"
    tables = sorted((data / "b200_sxm" / "moe" / "trtllm").glob("*/moe_perf.parquet"))
    if not tables:
        pytest.skip("the measured tables are not in ../shared/data")
    t = pq.read_table(tables[0]).to_pydict()
    lat: dict[str, list[float]] = {}
    for i in range(len(t["latency"])):
        if (t["moe_dtype"][i], t["hidden_size"][i], t["inter_size"][i], t["num_experts"][i],
                t["topk"][i], t["moe_tp_size"][i], t["moe_ep_size"][i], t["num_tokens"][i],
                t["distribution"][i]) == ("nvfp4", 4096, 14336, 8, 2, 1, 1, 4, "balanced"):
            lat.setdefault(t["kernel_source"][i], []).append(t["latency"][i])
    standard = min(lat["moe_torch_flow_cutlass"])
    assert min(lat["moe_torch_flow_min_latency"]) < 0.8 * standard  # the test discriminates
    mix_s, up_nano, up_rest, known = _in_fit_script(
        f"b = fk._moe_rows(fk.Path({str(tables[0])!r}))['nvfp4']['balanced']\n"
        "sh = b['shape']\n"
        "mix = (sh == [4096, 14336, 8, 2]).all(axis=1) & (b['tokens'] == 4)"
        " & (b['inter_loc'] == 14336)\n"
        "nano = (sh == [4096, 2688, 512, 22]).all(axis=1)\n"
        "print(json.dumps([b['lat_s'][mix].tolist(), sorted(set(b['up'][nano].tolist())),"
        " sorted(set(b['up'][~nano].tolist())), b['gating_known']]))\n")
    assert mix_s == [pytest.approx(standard * 1e-3, rel=1e-9)]
    assert up_nano == [1.0] and 2.0 in up_rest and known


GEMM_SCRIPT = REPO / "benchmarks" / "accuracy" / "fit_aic_kernels.py"


def test_only_gemm_refits_the_gemms_and_keeps_the_moe_section(tmp_path: Path) -> None:
    """`fit_aic_kernels.py --only-gemm` on a hand-made L40S table (36 (n, k) shapes x 7 m):
    time = max(2mnk/(C 0.6), (2mk + 2mn + 2k(n + 500))/(beta 0.9) + 3 us), C = 362.05e12
    (L40S bf16), beta = 864e9: a narrow GEMM reads its weights as if 500 columns wider. The
    fit must recover the padding and efficiencies and leave the catalog's MoE section and
    the other GPUs' and engines' GEMM fits as they were; naming both --only-gemm and
    --only-moe is one error line."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    c, beta = 362.05e12, 864e9
    m, n, k = (a.ravel() for a in np.meshgrid(
        [1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0],
        [256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0],
        [256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0], indexing="ij"))
    t_s = np.maximum(2 * m * n * k / (c * 0.6),
                     (2 * m * k + 2 * m * n + 2 * k * (n + 500.0)) / (beta * 0.9) + 3e-6)
    table = tmp_path / "data" / "aic-kernels" / "l40s" / "gemm" / "vllm" / "0.1"
    table.mkdir(parents=True)
    pq.write_table(pa.table({"gemm_dtype": ["bfloat16"] * len(m), "m": m.astype(int),
                             "n": n.astype(int), "k": k.astype(int),
                             "latency": t_s * 1e3}), table / "gemm_perf.parquet")
    cat, res = tmp_path / "cat.json", tmp_path / "res.json"
    cat.write_text(json.dumps(gemm_moe_catalog()))
    before = json.loads((REPO / "benchmarks" / "results" / "aic_kernel_fits_gemm_moe.json")
                        .read_text())
    res.write_text(json.dumps(before))
    env = {**os.environ, "RIDGELINE_SHARED_DATA": str(tmp_path / "data")}
    run = subprocess.run([sys.executable, str(GEMM_SCRIPT), "--only-gemm", "--gpus", "l40s",
                          "--engines", "vllm", "--out-catalog", str(cat),
                          "--out-results", str(res)],
                         capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, run.stderr
    got = json.loads(cat.read_text())
    assert got["moe"] == gemm_moe_catalog()["moe"]
    p = got["gemm"]["l40s"]["vllm"]["bf16"]
    assert p["weight_pad_n"] == pytest.approx(500.0, rel=0.05)
    assert p["compute_efficiency"] == pytest.approx(0.6, rel=0.02)
    assert p["bandwidth_efficiency"] == pytest.approx(0.9, rel=0.02)
    assert p["_fit"]["cv"]["median_ape"] < 0.01
    rows = json.loads(res.read_text())["fits"]
    named = [r for r in rows if r["op"] == "gemm" and (r["gpu"], r["engine"]) == ("l40s", "vllm")]
    assert [r["dtype"] for r in named] == ["bf16"]
    assert got["gemm"]["l40s"]["vllm"].keys() == {"bf16"}

    def others(fits: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [r for r in fits if (r["gpu"], r["engine"]) != ("l40s", "vllm")]
    assert others(rows) == others(before["fits"]) and len(others(rows)) > 100
    was = gemm_moe_catalog()["gemm"]
    assert got["gemm"]["l40s"]["sglang"] == was["l40s"]["sglang"]
    assert got["gemm"]["h100_sxm"] == was["h100_sxm"]
    bad = subprocess.run([sys.executable, str(GEMM_SCRIPT), "--only-gemm", "--only-moe"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.startswith("error: --only-moe and --only-gemm")

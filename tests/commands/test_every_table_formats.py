"""`--format csv` and `--format json` parse on every command that prints a table (the ones
test_output_format.py and test_bench_formats.py do not run), through the installed command
with stdout a pipe; numbers checked where a closed form gives them."""

from __future__ import annotations

import csv
import io
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).with_name("ridgeline")
RIDGELINE = str(BIN) if BIN.exists() else shutil.which("ridgeline") or "ridgeline"
AIPERF = Path(__file__).parents[1] / "data" / "peers" / "aiperf" / "clean" / "profile_export.jsonl"

THEORY = {
    "amdahl": ["--fraction", "0.5", "--speedup", "4"],
    "little": ["--rate", "5", "--latency-s", "2"],
    "mm1": ["--arrival-rate", "5", "--service-rate", "8"],
    "mmc": ["--arrival-rate", "5", "--service-rate", "3", "-c", "3"],
    "fanout": ["-k", "10"],
    "samples": [],
    "e2e": ["--ttft-ms", "100", "--tpot-ms", "10", "--output-tokens", "100"],
}


def ok(*args: str) -> str:
    proc = subprocess.run([RIDGELINE, *args], capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def csv_blocks(text: str) -> list[list[list[str]]]:
    """A page's CSV: one block, or several separated by an empty line; every row of a
    block as wide as its header."""
    blocks = [list(csv.reader(io.StringIO(b))) for b in text.split("\n\n") if b.strip()]
    assert blocks, text
    for b in blocks:
        assert len(b) >= 2 and len({len(r) for r in b}) == 1, b
    return blocks


@pytest.mark.parametrize("sub", sorted(THEORY))
def test_theory_csv_and_json_parse(sub: str) -> None:
    (block,) = csv_blocks(ok("theory", sub, *THEORY[sub], "--format", "csv"))
    assert block[0] == ["quantity", "value"]
    values = {k: float(v) for k, v in block[1:]}   # numbers, no thousands separators
    js = json.loads(ok("theory", sub, *THEORY[sub], "--format", "json"))
    assert set(js) == set(values)


def test_theory_mmc_csv_is_erlang_c_by_hand() -> None:
    """lambda 5, mu 3, c 3: a = 5/3, rho = 5/9, Erlang C by its closed form."""
    (block,) = csv_blocks(ok("theory", "mmc", *THEORY["mmc"], "--format", "csv"))
    got = {k: float(v) for k, v in block[1:]}
    a, c, rho = 5 / 3, 3, 5 / 9
    top = a**c / math.factorial(c) / (1 - rho)
    p_wait = top / (sum(a**k / math.factorial(k) for k in range(c)) + top)
    assert got["P(wait) (Erlang C)"] == pytest.approx(p_wait, rel=1e-9)
    assert got["mean wait in queue Wq (s)"] == pytest.approx(p_wait / (c * 3 - 5), rel=1e-9)
    (amdahl,) = csv_blocks(ok("theory", "amdahl", *THEORY["amdahl"], "--format", "csv"))
    assert float(amdahl[1][1]) == pytest.approx(1 / (0.5 + 0.5 / 4))


def test_theory_worked_examples_parse() -> None:
    (block,) = csv_blocks(ok("theory", "--format", "csv"))
    assert len(block) > 10
    assert len(json.loads(ok("theory", "--format", "json"))) == len(block) - 1


@pytest.mark.parametrize("args", [["models"], ["hardware"], ["roofline"]], ids=" ".join)
def test_catalogs_and_roofline_csv_and_json_parse(args: list[str]) -> None:
    blocks = csv_blocks(ok(*args, "--format", "csv"))
    assert sum(len(b) - 1 for b in blocks) >= 3
    assert json.loads(ok(*args, "--format", "json"))


def test_roofline_csv_is_the_ridge_by_hand() -> None:
    """H100 SXM bf16: 989.4 TFLOP/s over 3.35 TB/s; a square GEMM's intensity is
    2mkn / (2(mk + kn + mn)) bytes, so an m below the ridge is memory bound."""
    (block,) = csv_blocks(ok("roofline", "--format", "csv"))
    head = block[0]
    rows = [dict(zip(head, r, strict=True)) for r in block[1:]]
    for r in rows:
        ridge = 989.4e12 / 3.35e12
        assert r["bound"] == ("memory" if float(r["FLOP/byte"]) < ridge else "compute")


def test_compare_gate_and_advise_csv_and_json_parse(tmp_path: Path) -> None:
    a, b = str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")
    ok("simulate", "--rate", "4", "-n", "200", "--trace", a, "--format", "json")
    ok("simulate", "--rate", "8", "-n", "200", "--trace", b, "--format", "json")
    (cmp_block,) = csv_blocks(ok("compare", a, b, "--format", "csv"))
    assert cmp_block[0][:3] == ["metric", "A", "B"]
    assert json.loads(ok("compare", a, b, "--format", "json"))
    gate = ["gate", a, b, "--max-regression", "tpot_p95=500%"]
    (gate_block,) = csv_blocks(ok(*gate, "--format", "csv"))
    assert gate_block[0][0] == "metric" and gate_block[1][0].startswith("tpot_p95")
    assert json.loads(ok(*gate, "--format", "json"))["exit_code"] == 0
    # An input format's name given to gate's --format is still the input format.
    assert "PASS" in ok("gate", str(AIPERF), str(AIPERF), "--max-regression", "tpot_p95=5%",
                        "--format", "aiperf")
    advice = json.loads(ok("advise", b, "--format", "json"))
    assert advice["budgets_ms"] == {"ttft": 1000.0, "tpot": 50.0}  # the default budgets

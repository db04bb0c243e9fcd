"""`plan --confidence`: the search rescaled to the world where every step is slower by the
upper end of the decode-time residual's interval."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from ridgeline.metrics.prediction_interval import load_catalog
from ridgeline.plan.confidence import pessimistic_request, pessimistic_step_scale
from ridgeline.plan.space import PlanRequest

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")


def test_request_rescaled_by_hand() -> None:
    req = PlanRequest(models=("llama-2-7b",), hardware=("h100-sxm",), rate_req_s=10.0,
                      slos=("ttft_ms<=60", "decode_rate_tok_s>=20"))
    out = pessimistic_request(req, 1.2)
    assert out.rate_req_s == pytest.approx(12.0)
    assert out.slos == ("ttft_ms<=50", "decode_rate_tok_s>=24")


def test_step_scale_from_the_catalog() -> None:
    # H100 SXM is the replayed GPU: s = exp(-r_low) of the decode-time residual's 80% interval
    r_lo = load_catalog()["residuals"]["itl"]["below_knee"]["interval80"][0]
    s, desc = pessimistic_step_scale(0.9, ["h100-sxm"])
    assert s == pytest.approx(math.exp(-r_lo), rel=1e-9)
    s2, _ = pessimistic_step_scale(0.9, ["h100-sxm", "mi300x"])
    assert s2 > s and desc["confidence"] == 0.9


def test_plan_confidence_cli() -> None:
    base = [RIDGELINE, "plan", "--model", "llama-2-7b", "--hardware", "h100-sxm", "--tp", "1",
            "--max-num-seqs", "64", "--max-num-batched-tokens", "8192",
            "--chunked-prefill", "on", "--rate", "20", "--prompt", "512", "--output", "128",
            "--slo", "ttft_ms<=60", "--max-replicas", "4", "--requests", "300",
            "--goodput-target", "0.9", "--verify-requests", "1000"]
    bad = subprocess.run([*base, "--confidence", "0.8"], capture_output=True, text=True)
    assert bad.returncode == 2
    assert bad.stderr.strip() == "error: --confidence: got 0.8; allowed: 0.9 or 0.975"
    p = subprocess.run([*base, "--confidence", "0.9", "--json"], capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    worst = out["at_confidence"]
    s = worst["step_time"]["step_time_scale"]
    assert s > 1 and worst["rate_req_s"] == pytest.approx(20 * s, rel=1e-3)
    # the pessimistic answer never needs fewer replicas than the nominal one
    assert worst["chosen"]["replicas"] >= out["chosen"]["replicas"]

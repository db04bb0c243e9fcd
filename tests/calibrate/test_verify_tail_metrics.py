"""verify's extra statistics (METRIC_pQ tails and METRIC_mean) on the measured side, against
values worked out by hand from a trace written here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ridgeline.calibrate.verify import verify
from ridgeline.sim.calibrated_profile import CalibrationProfile

# Ten requests, one every 10 s (no overlap), request i: first token at 1 + i/10 s after its
# send, then two more tokens 2 s and 2 + (i + 1)^2/100 s later, done at the last token (skewed,
# so a mean is not the median). TTFT_i = (1 + i/10) s; ITL gaps 2 s and (2 + (i + 1)^2/100) s;
# TPOT_i = (4 + (i + 1)^2/100) / 2 s.
N = 10
TTFT_MS = [1000.0 + 100.0 * i for i in range(N)]
GAPS_MS = [g for i in range(N) for g in (2000.0, 2000.0 + 10.0 * (i + 1) ** 2)]
TPOT_MS = [(4000.0 + 10.0 * (i + 1) ** 2) / 2 for i in range(N)]


def _trace(tmp_path: Path) -> Path:
    recs = []
    for i in range(N):
        sent = 10.0 * i
        first = sent + TTFT_MS[i] / 1e3
        ev = [first, first + 2.0, first + 2.0 + 2.0 + (i + 1) ** 2 / 100.0]
        recs.append({"type": "request", "id": str(i), "sent_s": sent, "event_times_s": ev,
                     "end_s": ev[-1], "prompt_tokens": 8, "output_tokens": 3,
                     "status": "ok"})
    head = {"type": "header", "schema_version": 1, "source": "bench",
            "load": {"pattern": "open", "arrival": "poisson", "rate_req_s": 0.1}}
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join(json.dumps(x) for x in [head, *recs]) + "\n")
    return p


def _p90(xs: list[float]) -> float:
    """numpy's linear percentile, by hand: rank 0.9 (n - 1) between neighbours."""
    xs = sorted(xs)
    h = 0.9 * (len(xs) - 1)
    lo = int(h)
    return xs[lo] + (h - lo) * (xs[lo + 1] - xs[lo])


def test_tails_and_means_are_measured_like_the_medians(tmp_path: Path) -> None:
    prof = CalibrationProfile.from_table([1, 8], [0.5, 0.6])
    rep = verify([str(_trace(tmp_path))], prof,
                 metrics=["ttft_p90", "e2e_p90", "tpot_mean", "itl_mean"])
    got = {r.metric: r for r in rep.rows}
    assert list(got) == ["ttft_p90", "e2e_p90", "tpot_mean", "itl_mean"]
    assert got["ttft_p90"].measured == pytest.approx(_p90(TTFT_MS))          # 1810 ms
    e2e = [t + 4000.0 + 10.0 * (i + 1) ** 2 for i, t in enumerate(TTFT_MS)]
    assert got["e2e_p90"].measured == pytest.approx(_p90(e2e))
    assert got["tpot_mean"].measured == pytest.approx(sum(TPOT_MS) / N)       # 2192.5 ms
    assert got["itl_mean"].measured == pytest.approx(sum(GAPS_MS) / len(GAPS_MS))
    for r in rep.rows:
        assert r.predicted > 0 and r.ci_low <= r.measured <= r.ci_high
    # without `metrics` the default medians, as before
    assert [r.metric for r in verify([str(_trace(tmp_path))], prof).rows] == [
        "ttft_p50", "tpot_p50", "e2e_p50"]

"""Importers on REAL exports written by each peer tool in one run, checked against the
summary the same tool wrote in the same run (tests/data/peers/*/README.md says how each
file was made: tool version, command, date, server).

Each file goes through the installed `ridgeline analyze --window all --json` (the peers
report over every request of the run), and its counts and P50s must equal the peer's own:
- AIPerf 0.13.0: `profile_export_aiperf.json` (numpy linear percentiles, as ridgeline's).
  Its `inter_token_latency` is ridgeline's per-request TPOT; its `inter_chunk_latency` is
  ridgeline's pooled ITL; `request_count` counts successful requests only.
- GuideLLM 0.8.1: `benchmarks.json` metrics. GuideLLM's percentiles are an inverted CDF
  (no interpolation) and its ITL is weighted by output tokens - 1; both runs were made with
  a fixed output length (equal weights) and an odd number of successful requests, where the
  inverted-CDF median and numpy's linear median are the same sample, so the numbers must be
  equal, not merely close.
- vLLM 0.33.0 `vllm bench serve --save-result --save-detailed`: the same file holds vLLM's
  own `p50_*_ms` / `mean_*_ms`, `completed` and `failed`.
- LLMPerf (ray-project/llmperf, no PyPI release: files its authors published in the repo):
  `*_summary.json` beside `*_individual_responses.json` (pandas linear quantiles). LLMPerf's
  `inter_token_latency_s` includes TTFT (see docs/metrics.md), so only TTFT, E2E and the
  counts are compared.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")
PEERS = Path(__file__).parents[1] / "data" / "peers"
REL = 1e-9  # the peers' JSON summaries carry full float precision


def _analyze(path: Path) -> dict[str, Any]:
    r = subprocess.run([RIDGELINE, "analyze", str(path), "--window", "all", "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _p50(ours: dict[str, Any], metric: str) -> float:
    return ours["latency"][metric]["percentiles"]["p50"]["value"]


@pytest.mark.parametrize("run", ["clean", "errors", "server-killed"])
def test_aiperf_real_export_matches_aiperfs_own_summary(run: str) -> None:
    d = PEERS / "aiperf" / run
    ours = _analyze(d / "profile_export.jsonl")
    theirs = json.loads((d / "profile_export_aiperf.json").read_text())
    counts = ours["counts"]
    assert counts["requests"] == sum(1 for line in (d / "profile_export.jsonl").open()
                                     if line.strip())
    assert counts["successful"] == theirs["request_count"]["avg"]
    errors = (theirs.get("error_request_count") or {}).get("avg", 0)
    assert counts["requests"] - counts["successful"] == errors
    for mine, tag in (("ttft_ms", "time_to_first_token"), ("tpot_ms", "inter_token_latency"),
                      ("e2e_ms", "request_latency"), ("itl_ms", "inter_chunk_latency")):
        assert theirs[tag]["unit"] == "ms"
        assert _p50(ours, mine) == pytest.approx(theirs[tag]["p50"], rel=REL), (run, mine)
        assert ours["latency"][mine]["mean"] == pytest.approx(theirs[tag]["avg"], rel=REL)


def test_aiperf_real_exports_hold_what_the_cases_claim() -> None:
    """The error runs really have failed requests of the kinds their READMEs name."""
    errors = _analyze(PEERS / "aiperf" / "errors" / "profile_export.jsonl")["counts"]
    assert errors["errors_by_kind"] == {"Bad Request": 9}
    killed = _analyze(PEERS / "aiperf" / "server-killed" / "profile_export.jsonl")["counts"]
    assert killed["errors_by_kind"] == {"ClientConnectorError": 21, "ClientPayloadError": 2}


def test_aiperf_real_export_out_of_order_end_is_still_refused(tmp_path: Path) -> None:
    """Exact ns arithmetic passes equal times; an end 1 µs before the last chunk is refused."""
    lines = (PEERS / "aiperf" / "clean" / "profile_export.jsonl").read_text().splitlines()
    rec = json.loads(lines[3])
    rec["metadata"]["request_end_ns"] -= 1000
    lines[3] = json.dumps(rec)
    bad = tmp_path / "profile_export.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    r = subprocess.run([RIDGELINE, "analyze", str(bad)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2
    assert "is before its last event" in r.stderr and rec["metadata"]["x_request_id"] in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("run", ["clean", "errors"])
def test_guidellm_real_export_matches_guidellms_own_summary(run: str) -> None:
    d = PEERS / "guidellm" / run
    ours = _analyze(d / "benchmarks.json")
    metrics = json.loads((d / "benchmarks.json").read_text())["benchmarks"][0]["metrics"]
    totals = metrics["request_totals"]
    counts = ours["counts"]["by_status"]
    assert (counts["ok"], counts["error"], counts["cutoff"]) == (
        totals["successful"], totals["errored"], totals["incomplete"])
    assert totals["successful"] % 2 == 1  # the case's premise (see the module docstring)
    for mine, tag, to_ms in (("ttft_ms", "time_to_first_token_ms", 1.0),
                             ("tpot_ms", "inter_token_latency_ms", 1.0),
                             ("e2e_ms", "request_latency", 1e3)):
        s = metrics[tag]["successful"]
        assert _p50(ours, mine) == pytest.approx(s["percentiles"]["p50"] * to_ms, rel=REL)
        assert _p50(ours, mine) == pytest.approx(s["median"] * to_ms, rel=REL)
        assert ours["latency"][mine]["mean"] == pytest.approx(s["mean"] * to_ms, rel=REL)


@pytest.mark.parametrize("run", ["clean", "errors", "server-killed"])
def test_vllm_real_result_matches_vllms_own_summary(run: str) -> None:
    path = PEERS / "vllm" / run / "result.json"
    ours = _analyze(path)
    theirs = json.loads(path.read_text())
    counts = ours["counts"]["by_status"]
    assert (counts["ok"], counts["error"]) == (theirs["completed"], theirs["failed"])
    assert theirs["burstiness"] == 1.0  # what --save-result vllm must write for Poisson
    for mine, key in (("ttft_ms", "ttft"), ("tpot_ms", "tpot"), ("itl_ms", "itl"),
                      ("e2e_ms", "e2el")):
        assert _p50(ours, mine) == pytest.approx(theirs[f"p50_{key}_ms"], rel=REL), mine
        assert ours["latency"][mine]["mean"] == pytest.approx(theirs[f"mean_{key}_ms"],
                                                              rel=REL), mine


@pytest.mark.parametrize("run", ["vllm-cur16", "tgi-cur32"])
def test_llmperf_published_result_matches_llmperfs_own_summary(run: str) -> None:
    d = PEERS / "llmperf" / run
    ours = _analyze(d / "01-ai-Yi-1-5-34B-Chat_550_150_individual_responses.json")
    s = json.loads((d / "01-ai-Yi-1-5-34B-Chat_550_150_summary.json").read_text())
    counts = ours["counts"]
    assert counts["requests"] == s["results_num_requests_started"]
    assert counts["by_status"]["ok"] == s["results_num_completed_requests"]
    assert counts["by_status"]["error"] == s["results_number_errors"]
    for mine, key in (("ttft_ms", "ttft_s"), ("e2e_ms", "end_to_end_latency_s")):
        assert _p50(ours, mine) == pytest.approx(
            s[f"results_{key}_quantiles_p50"] * 1e3, rel=REL), mine
        assert ours["latency"][mine]["mean"] == pytest.approx(s[f"results_{key}_mean"] * 1e3,
                                                              rel=REL), mine

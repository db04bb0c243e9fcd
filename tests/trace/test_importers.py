"""Importers on small example files written by hand from each tool's documented schema
(tests/data). Expected values are worked out from the files' numbers in the comments."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from ridgeline.errors import RidgelineError
from ridgeline.metrics.analysis import analyze
from ridgeline.trace.importers import detect_format, load_trace

DATA = Path(__file__).parents[1] / "data"


@pytest.mark.parametrize(("name", "fmt"), [
    ("vllm_detailed.json", "vllm"), ("vllm_append.json", "vllm"),
    ("aiperf_profile_export.jsonl", "aiperf"), ("guidellm_benchmarks.json", "guidellm"),
    ("llmperf_individual_responses.json", "llmperf"),
])
def test_detect_format(name: str, fmt: str) -> None:
    assert detect_format(DATA / name) == fmt


def test_vllm_detailed() -> None:
    t = load_trace(DATA / "vllm_detailed.json")
    assert t.header.source == "import:vllm" and t.header.model == "Qwen/Qwen2.5-7B-Instruct"
    assert t.header.has_event_times and t.header.has_event_tokens and t.header.has_send_times
    assert t.status_names() == ["ok", "ok", "error", "ok"]
    np.testing.assert_allclose(t.sent_s, [0.0, 0.5, 1.0, 1.5])
    # Request 0: send 0, TTFT 0.2, gaps 0.05 0.05 0.1 → events 0.2 0.25 0.3 0.4.
    np.testing.assert_allclose(t.event_times_s[:4], [0.2, 0.25, 0.3, 0.4])
    r = analyze(t, window="all")
    lat = r.latency
    np.testing.assert_allclose(np.sort(r.samples["ttft_ms"]), [200, 250, 300])
    # TPOT: (0.4-0.2)/3, 0.04/1, 0.12/2 → 66.67, 40, 60 ms; vLLM's own mean_tpot 55.56.
    np.testing.assert_allclose(np.sort(r.samples["tpot_ms"]), [40, 60, 200 / 3])
    assert lat["tpot_ms"].mean == pytest.approx(t.header.peer_reported["mean_tpot_ms"], abs=0.01)
    # vLLM's ITL pools the chunk gaps: 50 50 100 40 60 60 → mean 60 = its mean_itl_ms.
    assert lat["itl_ms"].mean == pytest.approx(60.0)
    assert lat["e2e_ms"].mean == pytest.approx(370.0)
    assert r.counts["errors_by_kind"] == {"error": 1}


def test_vllm_append_result_select() -> None:
    first = load_trace(DATA / "vllm_append.json")
    assert any("2 vLLM result objects" in n for n in first.header.notes)
    second = load_trace(DATA / "vllm_append.json", select=1)
    # No start_times in the second object: send times unknown, vLLM's duration used.
    assert not second.header.has_send_times and second.header.duration_s == 1.5
    # Request 0: 6 tokens in 2 chunks → tokens per chunk unknown.
    assert not second.header.has_event_tokens
    r = analyze(second)
    assert r.latency["itl_per_token_ms"].unavailable
    assert r.latency["ttft_ms"].mean == pytest.approx(120.0)
    # TPOT request 0: one gap of 0.2 s over 6 - 1 tokens = 40 ms; request 1: 0.2/2 = 100 ms.
    np.testing.assert_allclose(np.sort(r.samples["tpot_ms"]), [40.0, 100.0])
    # Throughput over vLLM's own duration, tokens at completion: (6 + 3) / 1.5 s.
    assert r.throughput.output_tok_s == pytest.approx(6.0)
    assert math.isnan(r.little.ratio)
    with pytest.raises(RidgelineError, match="--select"):
        load_trace(DATA / "vllm_append.json", select=5)


def test_vllm_without_per_request_lists(tmp_path: Path) -> None:
    p = tmp_path / "agg.json"
    p.write_text(json.dumps({"backend": "vllm", "request_throughput": 1.0, "duration": 2.0}))
    with pytest.raises(RidgelineError, match="--save-detailed"):
        load_trace(p, fmt="vllm")


def test_aiperf() -> None:
    t = load_trace(DATA / "aiperf_profile_export.jsonl")
    assert len(t) == 3  # the warm-up record is skipped
    assert t.ids == ["req-a", "req-b", "req-c"]
    np.testing.assert_allclose(t.sent_s, [0.0, 0.5, 1.0])
    # req-a: TTFT 150 ms, chunk gaps 50 40 60 ms → events 0.15 0.2 0.24 0.3; end 0.3.
    np.testing.assert_allclose(t.event_times_s[:4], [0.15, 0.2, 0.24, 0.3])
    r = analyze(t, window="all")
    # TPOT req-a (0.3 - 0.15)/3 = 50 ms = AIPerf's inter_token_latency; req-b 100 ms.
    np.testing.assert_allclose(np.sort(r.samples["tpot_ms"]), [50.0, 100.0])
    assert r.counts["errors_by_kind"] == {"ServerError": 1}
    assert r.latency["itl_ms"].count == 4
    assert r.latency["prompt_tokens"].mean == pytest.approx(425.0)


def test_guidellm() -> None:
    t = load_trace(DATA / "guidellm_benchmarks.json")
    assert not t.header.has_event_times
    assert t.status_names() == ["ok", "ok", "error"]
    r = analyze(t, window="all")
    # g1: TTFT 0.25 s, TPOT (0.55 - 0.25)/(4 - 1) = 0.1 s; g2: TTFT 0.15, (1.45-0.65)/8 = 0.1.
    np.testing.assert_allclose(np.sort(r.samples["ttft_ms"]), [150.0, 250.0], rtol=1e-6)
    np.testing.assert_allclose(r.samples["tpot_ms"], [100.0, 100.0], rtol=1e-5)
    assert r.latency["itl_ms"].unavailable == "the source records no per-event times"
    # Completion-based tokens: (4 + 9) in the window [0, 1.5] s.
    assert r.throughput.output_tok_s == pytest.approx(13 / 1.5)
    second = load_trace(DATA / "guidellm_benchmarks.json", select=1)
    assert len(second) == 1


def test_llmperf() -> None:
    t = load_trace(DATA / "llmperf_individual_responses.json")
    assert not t.header.has_send_times
    r = analyze(t)
    # TPOT = (e2e - ttft)/(N - 1): (2.0 - 0.5)/50 = 30 ms, (1.4 - 0.4)/20 = 50 ms.
    np.testing.assert_allclose(np.sort(r.samples["tpot_ms"]), [30.0, 50.0])
    np.testing.assert_allclose(np.sort(r.samples["e2e_ms"]), [1400.0, 2000.0])
    assert r.throughput.unavailable is not None
    assert r.counts["errors_by_kind"] == {"429": 1}
    assert any("unavailable" in w for w in r.warnings)


def test_unknown_format_is_a_user_error(tmp_path: Path) -> None:
    p = tmp_path / "x.json"
    p.write_text('{"hello": 1}')
    with pytest.raises(RidgelineError, match="--format"):
        load_trace(p)
    with pytest.raises(RidgelineError, match="--format"):
        load_trace(p, fmt="bogus")


# ---- bad numbers in a peer's file: a one-line error naming the record and the field ------

def _edit_vllm(tmp_path: Path, edit) -> Path:
    obj = json.loads((DATA / "vllm_detailed.json").read_text())
    edit(obj)
    out = tmp_path / "vllm_bad.json"
    out.write_text(json.dumps(obj))
    return out


@pytest.mark.parametrize(("edit", "needle"), [
    (lambda o: o["latencies"].__setitem__(1, -1.0), "request 1: field 'latencies': got -1.0"),
    (lambda o: o["ttfts"].__setitem__(0, "abc"), "request 0: field 'ttfts': got 'abc'"),
    (lambda o: o["ttfts"].__setitem__(0, [1]), "request 0: field 'ttfts'"),
    (lambda o: o["itls"][0].__setitem__(1, -0.05), "request 0: field 'itls[1]'"),
    (lambda o: o["output_lens"].__setitem__(0, "many"), "field 'output_lens'"),
    (lambda o: o["input_lens"].__setitem__(3, 2.5), "request 3: field 'input_lens'"),
    (lambda o: o["start_times"].__setitem__(2, "x"), "request 2: field 'start_times'"),
    # TTFT after the end of the request: inconsistent, not importable as "ok".
    (lambda o: o["ttfts"].__setitem__(0, 5.0), "request 0: field 'latencies'"),
])
def test_vllm_bad_numbers_are_one_line_errors(tmp_path: Path, edit, needle: str) -> None:
    with pytest.raises(RidgelineError) as e:
        load_trace(_edit_vllm(tmp_path, edit))
    msg = str(e.value)
    assert needle in msg and "\n" not in msg and "allowed" in msg


def test_other_importers_refuse_negative_and_non_numeric(tmp_path: Path) -> None:
    lines = (DATA / "aiperf_profile_export.jsonl").read_text().splitlines()
    rec = json.loads(lines[1])
    rec["metrics"]["request_latency"]["value"] = -1000.0
    bad = tmp_path / "profile_export.jsonl"
    bad.write_text("\n".join([lines[0], json.dumps(rec), *lines[2:]]) + "\n")
    with pytest.raises(RidgelineError, match=r"record 0: field 'metrics.request_latency"):
        load_trace(bad, fmt="aiperf")
    rec = json.loads(lines[1])
    rec["metrics"]["time_to_first_token"]["value"] = "soon"
    bad.write_text("\n".join([lines[0], json.dumps(rec), *lines[2:]]) + "\n")
    with pytest.raises(RidgelineError, match=r"field 'metrics.time_to_first_token.value'"):
        load_trace(bad, fmt="aiperf")

    items = json.loads((DATA / "llmperf_individual_responses.json").read_text())
    ok = next(i for i, r in enumerate(items) if not r.get("error_code"))
    items[ok]["end_to_end_latency_s"] = -2.0
    bad = tmp_path / "llmperf.json"
    bad.write_text(json.dumps(items))
    with pytest.raises(RidgelineError, match=rf"item {ok}: field 'end_to_end_latency_s'"):
        load_trace(bad, fmt="llmperf")

    rep = json.loads((DATA / "guidellm_benchmarks.json").read_text())
    r0 = rep["benchmarks"][0]["requests"]["successful"][0]
    r0["info"]["timings"]["first_token_iteration"] = r0["info"]["timings"]["request_start"] - 1
    bad = tmp_path / "guidellm.json"
    bad.write_text(json.dumps(rep))
    with pytest.raises(RidgelineError, match=r"request 0: field 'first_token_iteration'"):
        load_trace(bad, fmt="guidellm")

"""Metrics on a hand-made trace; every expected number is worked out by hand below.

Requests (times in s; tokens per event in brackets):
  A ok      sent 0.0 (scheduled 0.0)  events 0.2[1] 0.3[4] 0.5[2]  end 0.5   N=7   prompt 10
  B error   sent 0.1                  no events                    end 0.15        prompt 60
  C ok      sent 0.2                  events 0.4[1]                end 0.41  N=1   prompt 20
  D cutoff  sent 0.3                  events 0.5[1] 0.6[1]         end 0.65        prompt 30
  E ok      sent 0.4                  events 1.0[5] (one chunk)    end 1.0   N=5   prompt 40
  F ok      sent 0.5 (scheduled 0.45) events 0.6 0.7 0.8 0.9       end 0.95  N=4   prompt 50
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from ridgeline.metrics.analysis import analyze
from ridgeline.metrics.per_request import request_metrics
from ridgeline.trace.table import Trace

RECORDS = [
    {"id": "A", "scheduled_s": 0.0, "sent_s": 0.0, "event_times_s": [0.2, 0.3, 0.5],
     "event_tokens": [1, 4, 2], "end_s": 0.5, "output_tokens": 7, "prompt_tokens": 10},
    {"id": "B", "sent_s": 0.1, "end_s": 0.15, "status": "error", "error_kind": "http_500",
     "prompt_tokens": 60},
    {"id": "C", "sent_s": 0.2, "event_times_s": [0.4], "end_s": 0.41, "output_tokens": 1,
     "prompt_tokens": 20},
    {"id": "D", "sent_s": 0.3, "event_times_s": [0.5, 0.6], "end_s": 0.65, "status": "cutoff",
     "error_kind": "client_cutoff", "prompt_tokens": 30},
    {"id": "E", "sent_s": 0.4, "event_times_s": [1.0], "event_tokens": [5], "end_s": 1.0,
     "output_tokens": 5, "prompt_tokens": 40},
    {"id": "F", "scheduled_s": 0.45, "sent_s": 0.5, "event_times_s": [0.6, 0.7, 0.8, 0.9],
     "end_s": 0.95, "output_tokens": 4, "prompt_tokens": 50},
]


@pytest.fixture()
def trace() -> Trace:
    return Trace.from_records({"source": "hand"}, RECORDS)


def test_per_request_values(trace: Trace) -> None:
    rm = request_metrics(trace)
    np.testing.assert_allclose(rm.ttft_s[[0, 2, 4, 5]], [0.2, 0.2, 0.6, 0.1])
    # TPOT: A = (0.5 - 0.2) / (7 - 1) = 0.05; F = (0.9 - 0.6) / 3 = 0.1.
    assert rm.tpot_s[0] == pytest.approx(0.05)
    assert rm.tpot_s[5] == pytest.approx(0.1)
    assert math.isnan(rm.tpot_s[2])  # N = 1: undefined
    assert math.isnan(rm.tpot_s[4])  # 5 tokens in one event: undefined
    assert rm.tpot_single_token == 1 and rm.tpot_single_event == 1
    np.testing.assert_allclose(rm.e2e_s, [0.5, 0.05, 0.21, 0.35, 0.6, 0.45])
    assert rm.decode_rate_tok_s[0] == pytest.approx(20.0)
    assert rm.itl_max_s[0] == pytest.approx(0.2) and rm.itl_max_s[5] == pytest.approx(0.1)
    assert rm.queue_s[5] == pytest.approx(0.05) and rm.queue_s[0] == 0.0
    assert rm.output_tokens[3] == 2  # D: no declared count, events carry 2
    assert rm.tokens_from_events == 1


def test_latency_distributions(trace: Trace) -> None:
    r = analyze(trace, window=(0.0, 1.0))
    lat = r.latency
    assert lat["ttft_ms"].count == 4  # ok requests A, C, E, F
    assert lat["ttft_ms"].mean == pytest.approx((200 + 200 + 600 + 100) / 4)
    assert lat["ttft_ms"].median == pytest.approx(200.0)
    assert lat["tpot_ms"].count == 2 and lat["tpot_ms"].mean == pytest.approx(75.0)
    # Pooled ITL per event: A gives 100, 200; F gives 100, 100, 100 (D is not ok).
    assert lat["itl_ms"].count == 5
    assert lat["itl_ms"].mean == pytest.approx(600 / 5)
    assert lat["itl_ms"].max == pytest.approx(200.0)
    # Per token: A's gaps divided by 4 and 2 tokens → 25, 100; F's stay 100.
    assert lat["itl_per_token_ms"].mean == pytest.approx((25 + 100 + 300) / 5)
    assert lat["itl_per_token_ms"].min == pytest.approx(25.0)
    assert lat["e2e_ms"].mean == pytest.approx((500 + 210 + 600 + 450) / 4)
    assert lat["queue_ms"].count == 2 and lat["queue_ms"].max == pytest.approx(50.0)
    # numpy linear P90 of TTFT [100, 200, 200, 600]: h = 3 * 0.9 = 2.7 → 200 + 0.7 * 400.
    assert lat["ttft_ms"].percentiles["p90"].value == pytest.approx(480.0)
    assert r.counts["by_status"] == {"ok": 4, "error": 1, "cutoff": 1, "rejected": 0}
    assert r.counts["errors_by_kind"] == {"http_500": 1, "client_cutoff": 1}


def test_throughput_concurrency_little(trace: Trace) -> None:
    r = analyze(trace, window=(0.0, 1.0))
    t = r.throughput
    assert t.completed_in_window == 4
    assert t.requests_s == pytest.approx(4.0)
    # Events in [0, 1]: A 7 + C 1 + D 2 + E 5 + F 4 tokens = 19 (D's count although cut off).
    assert t.output_tok_s == pytest.approx(19.0)
    # Prompt tokens of requests whose first event is in the window: all but B → 150.
    assert t.total_tok_s == pytest.approx(169.0)
    # Areas in flight: 0.5 + 0.05 + 0.21 + 0.35 + 0.6 + 0.45 = 2.16 over 1 s.
    assert r.concurrency.mean_in_flight == pytest.approx(2.16)
    assert r.concurrency.max_in_flight == 4
    # The in-flight series: 60 bins of 1/60 s. [0, .017]: A alone; [.1, .117]: A and B;
    # [.45, .467]: A, D, E (C left at .41, F comes at .5).
    series = r.concurrency.series_in_flight
    assert len(series) == 60
    assert (series[0], series[6], series[27]) == (pytest.approx(1.0), pytest.approx(2.0),
                                                  pytest.approx(3.0))
    # Little's law over the ARRIVAL window [0, 0.5] (window cut at the last send; over
    # [0, 1] every request starts and ends inside, so L = λW would hold by arithmetic).
    lt = r.little
    assert (lt.window_start_s, lt.window_end_s) == (0.0, 0.5)
    assert lt.lambda_req_s == pytest.approx(6 / 0.5)  # all six sent in [0, 0.5]
    assert lt.w_s == pytest.approx(0.36)  # their whole stays: (0.5+.05+.21+.35+.6+.45)/6
    # Time in system inside [0, 0.5]: A 0.5, B 0.05, C 0.21, D 0.2, E 0.1, F 0 → 1.06.
    assert lt.l_in_flight == pytest.approx(1.06 / 0.5)
    assert lt.ratio == pytest.approx(2.12 / (12 * 0.36))
    # Departures in [0, 0.5]: A (0.5), B, C → 3/0.5 s; in system at 0: A; at 0.5: D, E, F.
    assert lt.completed_req_s == pytest.approx(6.0)
    assert (lt.in_system_start, lt.in_system_end) == (1, 3)
    assert lt.backlog_growth == 2
    # Half the arrivals are not served in the window, but a growth of 2 is within noise
    # (3·sqrt(L + 1) = 5.3): edge effects of a window of 0.5 s < 10 W, not overload.
    assert lt.status == "inconsistent" and lt.ok is False
    assert "edge effects" in lt.note


def test_little_overload_by_hand() -> None:
    # 40 arrivals, one every 0.1 s; a single server taking 0.2 s each (FIFO): request k
    # ends at 0.2 (k + 1), so the queue grows by one every 0.2 s.
    recs = [{"id": str(k), "sent_s": 0.1 * k, "event_times_s": [0.2 * (k + 1)],
             "end_s": 0.2 * (k + 1), "output_tokens": 1} for k in range(40)]
    r = analyze(Trace.from_records({"source": "hand"}, recs), window="all")
    lt = r.little
    # Arrival window [0, 3.9]: 40 arrivals; departures at 0.2..3.8 → 19.
    assert lt.lambda_req_s == pytest.approx(40 / 3.9)
    assert lt.completed_req_s == pytest.approx(19 / 3.9)
    # In system at 3.9: requests 19..39 = 21 (request 18 ended at 3.8); at 0: request 0.
    assert (lt.in_system_start, lt.in_system_end) == (1, 21)
    assert lt.status == "overloaded" and lt.ok is False


def test_goodput(trace: Trace) -> None:
    r = analyze(trace, slos=["ttft_ms<=300", "tpot_ms<=60"], window=(0.0, 1.0))
    g = r.goodput
    assert g is not None
    # A meets both; C meets TTFT and has no TPOT (N = 1: vacuous); E fails TTFT; F fails TPOT.
    assert g.good_requests == 2 and g.judged_requests == 6
    assert g.attainment == pytest.approx(2 / 6)
    assert g.requests_s == pytest.approx(2.0)
    assert g.output_tok_s == pytest.approx(8.0)  # A's 7 tokens + C's 1
    lo, hi = g.attainment_ci
    assert lo <= 2 / 6 <= hi


def test_little_and_concurrency_on_a_window_after_zero(trace: Trace) -> None:
    # Window [0.25, 1.0]; Little's arrival window [0.25, last send 0.5], 0.25 s long.
    r = analyze(trace, window="0.25:1.0")
    lt = r.little
    assert (lt.window_start_s, lt.window_end_s) == (0.25, 0.5)
    assert lt.lambda_req_s == pytest.approx(3 / 0.25)           # D, E, F sent in it
    assert lt.w_s == pytest.approx((0.35 + 0.6 + 0.45) / 3)     # their whole stays
    # Time in system inside [0.25, 0.5]: A 0.25, B 0, C 0.16, D 0.2, E 0.1, F 0 -> 0.71.
    assert lt.l_in_flight == pytest.approx(0.71 / 0.25)
    assert lt.completed_req_s == pytest.approx(2 / 0.25)        # A (0.5) and C (0.41)
    assert (lt.in_system_start, lt.in_system_end) == (2, 3)     # A, C; D, E, F
    assert lt.backlog_growth == 3 - 2
    # Mean in flight over [0.25, 1.0]: A .25 + C .16 + D .35 + E .6 + F .45 = 1.81 / 0.75 s.
    assert r.concurrency.mean_in_flight == pytest.approx(1.81 / 0.75)


def test_window_excludes_warm_up_requests(trace: Trace) -> None:
    r = analyze(trace, window="0.25:1.0")
    # Sent in [0.25, 1.0]: D, E, F; of those E and F are ok.
    assert r.counts["latency_population"] == 2
    assert r.counts["excluded_outside_window"] == 2
    assert r.latency["ttft_ms"].mean == pytest.approx((600 + 100) / 2)
    assert any("outside the measurement window" in w for w in r.warnings)


def test_to_dict_is_json_safe(trace: Trace) -> None:
    import json

    d = analyze(trace, slos=["e2e_s<=1"], window="all").to_dict()
    text = json.dumps(d, allow_nan=False)
    assert '"ttft_ms"' in text and '"output_tok_s"' in text
    assert d["goodput"]["good_requests"] == 4


def test_empty_and_all_failed_traces() -> None:
    t = Trace.from_records({"source": "x"}, [
        {"id": "a", "sent_s": 0.0, "end_s": 0.1, "status": "error", "error_kind": "timeout"}])
    r = analyze(t)
    assert r.latency["ttft_ms"].unavailable
    assert r.counts["errors_by_kind"] == {"timeout": 1}
    r0 = analyze(Trace.from_records({"source": "x"}, []))
    assert r0.counts["requests"] == 0 and r0.throughput.unavailable


@pytest.mark.parametrize(("change", "needle"), [
    ({"event_times_s": [-0.1, 0.3, 0.5]}, "first event (-0.1 s) is before sent_s"),
    ({"end_s": -0.5}, "end_s (-0.5 s) is before sent_s"),
    ({"end_s": 0.4}, "before its last event"),
    ({"event_times_s": [0.2, 0.1, 0.5]}, "go backwards"),
])
def test_inconsistent_times_are_refused_not_reported(change: dict, needle: str) -> None:
    """A record whose first event precedes sent_s would give a negative TTFT: analyze
    refuses the trace with one line, as `validate` calls it invalid."""
    from ridgeline.errors import RidgelineError

    recs = [dict(RECORDS[0], **change), *RECORDS[1:]]
    with pytest.raises(RidgelineError) as e:
        analyze(Trace.from_records({"source": "hand"}, recs))
    assert needle in str(e.value) and "request 'A'" in str(e.value)
    assert "\n" not in str(e.value) and "validate" in str(e.value)


def test_negative_ttft_refused_through_the_cli(tmp_path) -> None:
    import json
    import subprocess
    import sys
    from pathlib import Path

    p = tmp_path / "t.jsonl"
    p.write_text('{"type":"header","source":"t"}\n' + json.dumps(
        {"type": "request", "id": "a", "sent_s": 1.0, "event_times_s": [0.5],
         "end_s": 1.2}) + "\n")
    exe = Path(sys.executable).parent / "ridgeline"
    proc = subprocess.run([str(exe), "analyze", str(p)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("error: ") and "negative TTFT" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert subprocess.run([str(exe), "validate", str(p)], capture_output=True,
                          timeout=60).stdout.count(b"INVALID") == 1


@pytest.mark.parametrize("text, want", [
    ("ttft_ms<=500", [True, True, False]), ("ttft_ms<500", [True, False, False]),
    ("ttft_ms>=500", [False, True, True]), ("ttft_ms>500", [False, False, True]),
    ("ttft_s:0.5", [True, True, False]),            # ':' = no worse than: <= for latency
    ("decode_rate_tok_s:0.5", [False, True, True]),  # and >= for a rate
])
def test_slo_operators_at_the_bound(text: str, want: list[bool]) -> None:
    from ridgeline.metrics.slo import parse_slo

    # 0.4, 0.5 and 0.6 in the base unit (seconds for TTFT, tokens/s for the rate).
    assert parse_slo(text).holds(np.array([0.4, 0.5, 0.6])).tolist() == want
    assert parse_slo("ttft_ms<=0").bound_base == 0.0     # a zero bound is allowed


def test_compare_difference_and_its_ci_in_order() -> None:
    from ridgeline.metrics.compare import compare

    def run(ttfts: list[float]) -> Trace:
        return Trace.from_records({"source": "hand"}, [
            {"id": str(i), "sent_s": float(i), "event_times_s": [i + t, i + t + 0.05],
             "end_s": i + t + 0.05, "output_tokens": 2, "prompt_tokens": 10}
            for i, t in enumerate(ttfts)])

    a_ttft = [0.1 + 0.01 * k for k in range(41)]          # median 0.30 s
    b_ttft = [t + 0.1 + 0.002 * k for k, t in enumerate(a_ttft)]   # median 0.44 s
    row = compare(analyze(run(a_ttft), window="all"), analyze(run(b_ttft), window="all"),
                  ["ttft_ms_p50"]).rows[0]
    assert (row.a, row.b) == (pytest.approx(300.0), pytest.approx(440.0))
    assert row.diff == pytest.approx(140.0)
    d = row.to_dict()
    lo, hi = d["diff_ci95"]
    assert lo < 140.0 < hi and (lo, hi) == row.diff_ci
    assert d["relative_change"] == pytest.approx(140 / 300)
    # Significant only when the CI excludes 0 (41 requests of 0.1-0.5 s: it does not here).
    assert d["verdict"] == ("significant" if lo > 0 or hi < 0 else "within noise")
    # Throughput rows over the whole run: A's last request ends at 40 + 0.5 + 0.05 s, B's at
    # 40 + 0.68 + 0.05 s; 41 requests of 2 tokens each.
    rows = compare(analyze(run(a_ttft), window="all"), analyze(run(b_ttft), window="all"),
                   ["requests_s", "output_tok_s"]).rows
    assert (rows[0].a, rows[0].b) == (pytest.approx(41 / 40.55), pytest.approx(41 / 40.73))
    assert (rows[1].a, rows[1].b) == (pytest.approx(82 / 40.55), pytest.approx(82 / 40.73))
    # Their CIs are on the rate's scale: a Poisson count of 41 (sd ~ 6.4) over ~40.6 s gives
    # each rate an sd of ~0.16 req/s, so B - A's 95% CI is about +-0.45 req/s wide.
    lo, hi = rows[0].diff_ci
    assert lo < rows[0].diff < hi and 0.4 < hi - lo < 1.5


def test_streaming_totals_by_hand() -> None:
    # The streamed summary (fleet runs) over the whole run, fed in two chunks: first send 0,
    # last end 1.0 -> 1 s. OK requests A, C, E, F: 4/s; their E2E 0.5 + 0.21 + 0.6 + 0.45 =
    # 1.76 s over 1 s in flight on average; 19 output tokens (every event, D's included) and
    # 210 prompt tokens (all six).
    from ridgeline.metrics.streaming import StreamingMetrics

    sm = StreamingMetrics()
    sm.add_trace(Trace.from_records({"source": "hand"}, RECORDS[:3]))
    sm.add_trace(Trace.from_records({"source": "hand"}, RECORDS[3:]))
    r = sm.result()
    assert r["window"]["duration_s"] == pytest.approx(1.0)
    assert r["throughput"]["requests_per_s"] == pytest.approx(4.0)
    assert r["throughput"]["output_tok_s"] == pytest.approx(19.0)
    assert r["throughput"]["total_tok_s"] == pytest.approx(229.0)
    assert r["mean_in_flight"] == pytest.approx(1.76)
    assert r["requests"] == 6


def test_print_analysis_writes_the_table_to_the_console_it_is_given(capsys) -> None:  # type: ignore[no-untyped-def]
    """The CLI passes its console (one onto a buffer here): the table goes there, not stdout."""
    import io

    from rich.console import Console

    from ridgeline.metrics.render import print_analysis

    recs = [{"id": str(k), "sent_s": 0.1 * k, "event_times_s": [0.1 * k + 0.05],
             "end_s": 0.1 * k + 0.05, "output_tokens": 1} for k in range(20)]
    r = analyze(Trace.from_records({"source": "hand"}, recs), window="all")
    buf = io.StringIO()
    print_analysis(r, console=Console(file=buf, width=160))
    text = buf.getvalue()
    assert "ridgeline analyze" in text and "ttft" in text.lower()
    assert capsys.readouterr().out == ""

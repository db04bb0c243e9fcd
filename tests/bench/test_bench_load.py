"""Load patterns: arrivals as asked (KS / CV), concurrency limits, bounds, warm-up, workers."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ridgeline.bench.client import EndpointConfig
from ridgeline.bench.dataset import parse_dataset
from ridgeline.bench.load import LoadSpec
from ridgeline.bench.multiprocess import split_concurrency
from ridgeline.bench.single_run import BenchConfig, run_bench
from ridgeline.errors import RidgelineError
from ridgeline.metrics.knee import max_power_index as knee_index
from ridgeline.metrics.knee import ttft_knee_index
from ridgeline.workload.arrivals import arrival_times_s, parse_arrival
from ridgeline.workload.lengths import parse_lengths
from ridgeline.workload.streams import workload_streams
from tests.bench.test_bench_server import fetch_log, start_subprocess_server

# KS critical value at alpha = 0.001 is 1.949 / sqrt(n) (asymptotic Kolmogorov).
KS_CRIT_0001 = 1.949


def ks_exponential(gaps: np.ndarray, rate: float) -> float:
    """Kolmogorov–Smirnov distance between the gaps' empirical CDF and Exp(rate)."""
    x = np.sort(gaps)
    n = x.size
    cdf = 1.0 - np.exp(-rate * x)
    return float(max((np.arange(1, n + 1) / n - cdf).max(), (cdf - np.arange(n) / n).max()))


@pytest.fixture(scope="module")
def server() -> Any:
    proc, url = start_subprocess_server()
    yield url
    proc.terminate()
    proc.wait(10)


def run(server: str, tmp_path: Path, load: LoadSpec, *, name: str = "t", model: str = "steady",
        output: str = "fixed:2", extra: dict | None = None, **cfg: Any
        ) -> tuple[Any, dict, list[dict], dict]:
    config = BenchConfig(
        endpoint=EndpointConfig(server, model, extra_body=extra or {"ttft_s": 0, "itl_s": 0}),
        load=load, trace_path=tmp_path / f"{name}.jsonl", prompt=parse_lengths("fixed:8"),
        output=parse_lengths(output), **cfg)
    outcome = run_bench(config, warn=lambda m: None)
    lines = [json.loads(x) for x in Path(config.trace_path).read_text().splitlines()]
    recs = [x for x in lines if x["type"] == "request"]
    return outcome, lines[0], recs, lines[-1]


def max_in_flight(recs: list[dict]) -> int:
    """Sweep over send/end times (an end at the same instant as a send frees the slot first)."""
    points = sorted([(r["sent_s"], 1) for r in recs] + [(r["end_s"], -1) for r in recs],
                    key=lambda p: (p[0], p[1]))
    level = peak = 0
    for _, d in points:
        level += d
        peak = max(peak, level)
    return peak


def test_poisson_realized_gaps_pass_ks_at_the_asked_rate(server: str, tmp_path: Path) -> None:
    rate, n = 100.0, 400
    _, header, recs, footer = run(server, tmp_path,
                                  LoadSpec(None, parse_arrival("poisson", rate), requests=n))
    assert len(recs) == n and footer["type"] == "footer"
    sent = np.sort([r["sent_s"] for r in recs])
    gaps = np.diff(sent)
    crit = KS_CRIT_0001 / math.sqrt(gaps.size)
    assert ks_exponential(gaps, rate) < crit
    assert ks_exponential(gaps, 0.6 * rate) > crit  # the same test rejects a wrong rate
    assert header["load"] == {"pattern": "open", "arrival": "poisson", "rate_req_s": rate,
                              "requests": n, "warmup_requests": 0, "workers": 1}
    assert header["has_scheduled_times"] is True


def test_gamma_burstiness_matches_its_cv(server: str, tmp_path: Path) -> None:
    n = 400
    _, _, recs, _ = run(server, tmp_path,
                        LoadSpec(None, parse_arrival("gamma:cv=2", 100.0), requests=n))
    recs.sort(key=lambda r: r["scheduled_s"])
    sent = np.array([r["sent_s"] for r in recs])
    sched = np.array([r["scheduled_s"] for r in recs])
    # The schedule is the seeded gamma process (seed 0's arrival stream, shared with
    # simulate): same times as drawn directly.
    direct = arrival_times_s(parse_arrival("gamma:cv=2", 100.0), n,
                             workload_streams(0).arrivals)
    assert np.allclose(np.sort(sched), direct, atol=2e-6)
    cv_realized = np.diff(sent).std() / np.diff(sent).mean()
    cv_scheduled = np.diff(sched).std() / np.diff(sched).mean()
    # Client lag (sub-ms to a few ms) barely moves the CV of gaps averaging 10 ms.
    assert cv_realized == pytest.approx(cv_scheduled, abs=0.1)
    # And the schedule's CV is the asked 2 within sampling error: for n = 400 gamma gaps
    # with shape 1/4 the sample CV has a standard error of about 0.2.
    assert cv_scheduled == pytest.approx(2.0, abs=0.5)


def test_closed_loop_holds_exactly_the_concurrency(server: str, tmp_path: Path) -> None:
    _, header, recs, _ = run(server, tmp_path, LoadSpec(4, None, requests=40),
                             extra={"ttft_s": 0.01, "itl_s": 0.01}, output="fixed:3")
    assert len(recs) == 40 and len({r["id"] for r in recs}) == 40
    assert max_in_flight(recs) == 4
    assert "scheduled_s" not in recs[0] and header["has_scheduled_times"] is False


def test_rate_with_concurrency_cap_waits_at_the_client(server: str, tmp_path: Path) -> None:
    _, header, recs, _ = run(server, tmp_path,
                             LoadSpec(2, parse_arrival("constant", 200.0), requests=12),
                             extra={"ttft_s": 0.05, "itl_s": 0.0})
    assert header["load"]["pattern"] == "open+cap"
    assert max_in_flight(recs) <= 2
    for r in recs:
        assert r["admitted_s"] >= r["scheduled_s"] - 1e-6
        assert r["sent_s"] >= r["admitted_s"]
    # arrivals every 5 ms, service ~50 ms, 2 slots: later requests wait far past schedule
    last = max(recs, key=lambda r: r["scheduled_s"])
    assert last["admitted_s"] - last["scheduled_s"] > 0.1


def test_duration_bound_cuts_off_requests_in_flight(server: str, tmp_path: Path) -> None:
    outcome, _, recs, footer = run(
        server, tmp_path, LoadSpec(3, None, duration_s=0.3), grace_s=0.1,
        extra={"ttft_s": 0.01, "itl_s": 0.05}, output="fixed:40")  # each request ~2 s
    assert len(recs) == 3
    for r in recs:
        assert r["status"] == "cutoff" and r["error_kind"] == "cutoff"
        assert 0.35 <= r["end_s"] < 1.0  # the 0.3 s limit plus the 0.1 s grace
        assert len(r["event_times_s"]) >= 5  # what arrived before the cut is kept
    assert outcome.failed  # nothing finished: no measurement, so the exit code says so
    assert footer["requests_written"] == 3


def test_warmup_is_sent_but_not_recorded(server: str, tmp_path: Path) -> None:
    _, header, recs, _ = run(server, tmp_path, LoadSpec(2, None, requests=5, warmup=3))
    seen = fetch_log(server)["arrivals"]
    assert {f"warmup-{i}" for i in range(3)} <= set(seen)
    assert sorted(r["id"] for r in recs) == [f"r{i}" for i in range(5)]
    # t = 0 is after the warm-up: every warm-up arrival precedes it
    assert all(seen[f"warmup-{i}"] < header["t0_perf_counter_s"] for i in range(3))


def test_max_error_rate_aborts_a_broken_endpoint(server: str, tmp_path: Path) -> None:
    outcome, _, recs, footer = run(server, tmp_path, LoadSpec(2, None, requests=500),
                                   model="http_500", max_error_rate=0.5)
    assert outcome.aborted and outcome.failed
    assert 20 <= len(recs) < 100
    assert footer["interrupted"] is True


def test_workers_share_one_schedule_and_one_clock(server: str, tmp_path: Path) -> None:
    load = LoadSpec(None, parse_arrival("poisson", 100.0), requests=60)
    _, _, single, _ = run(server, tmp_path, load, name="one")
    _, header, multi, _ = run(server, tmp_path, load, name="two", workers=2)
    assert header["load"]["workers"] == 2
    assert sorted(r["id"] for r in multi) == sorted(r["id"] for r in single)
    assert {r["worker"] for r in multi} == {0, 1}
    by_id = {r["id"]: r for r in single}
    for r in multi:
        assert r["scheduled_s"] == by_id[r["id"]]["scheduled_s"]  # the union is the schedule
        assert r["status"] == "ok"
        assert -1e-4 <= r["sent_s"] - r["scheduled_s"] < 0.05
    # Event times from both processes sit on the host clock: they match the server's log.
    log = fetch_log(server)["events"]
    for r in multi:
        client = [header["t0_perf_counter_s"] + t for t in r["event_times_s"]]
        diffs = [c - s for c, s in zip(client, log[r["id"]], strict=True)]
        assert all(-1e-4 <= d <= 0.025 for d in diffs), diffs


def test_workers_closed_loop_split() -> None:
    assert [split_concurrency(10, 3, k) for k in range(3)] == [4, 3, 3]
    assert split_concurrency(None, 3, 0) is None


def test_ramp_and_duration_bounds_plan() -> None:
    load = LoadSpec(None, parse_arrival("ramp:start=2,end=6"), duration_s=10.0)
    assert load.request_budget() == 40  # (2 + 6) / 2 req/s over 10 s
    load = LoadSpec(None, parse_arrival("poisson", 10.0), duration_s=5.0, requests=20)
    assert load.request_budget() == 20
    with pytest.raises(RidgelineError, match="--requests/--duration"):
        LoadSpec(4, None)
    with pytest.raises(RidgelineError, match="--concurrency"):
        LoadSpec(None, None, requests=3)


def test_knee_is_the_max_power_point() -> None:
    # throughput 100, 190, 260, 280 tok/s at mean E2E 1.0, 1.05, 1.3, 2.8 s: power
    # 100, 181, 200, 100 -> the third point
    assert knee_index([100.0, 190.0, 260.0, 280.0], [1.0, 1.05, 1.3, 2.8]) == 2
    assert knee_index([float("nan")], [1.0]) is None
    # The power still rising at the last point: the maximum may lie beyond the range.
    assert knee_index([100.0, 190.0, 260.0], [1.0, 1.05, 1.1]) is None
    # P99 TTFT within 3x of the lowest rate's up to the last rate: no knee claimed there.
    assert ttft_knee_index([1, 2, 4], [0.1, 0.2, 0.29]) is None
    assert ttft_knee_index([1, 2, 4, 8], [0.1, 0.2, 0.29, 0.31]) == 2


def test_synthetic_prompts_have_the_asked_lengths(server: str, tmp_path: Path) -> None:
    # The scripted server counts words; synthetic prompts are one word per token.
    config = BenchConfig(
        endpoint=EndpointConfig(server, "steady", extra_body={"ttft_s": 0, "itl_s": 0}),
        load=LoadSpec(4, None, requests=30), trace_path=tmp_path / "lens.jsonl",
        prompt=parse_lengths("uniform:min=5,max=60"), output=parse_lengths("fixed:2"), seed=3)
    run_bench(config, warn=lambda m: None)
    recs = [json.loads(x) for x in config.trace_path.read_text().splitlines()[1:-1]]
    expected = parse_lengths("uniform:min=5,max=60").sample(30, workload_streams(3).lengths)
    got = {r["id"]: r["prompt_tokens"] for r in recs}
    assert [got[f"r{i}"] for i in range(30)] == expected.tolist()


def test_dataset_files(tmp_path: Path) -> None:
    from ridgeline.bench.dataset import build_requests

    share = tmp_path / "sg.json"
    share.write_text(json.dumps([
        {"conversations": [{"from": "human", "value": "hello there"},
                           {"from": "gpt", "value": "x" * 40}]},
        {"conversations": [{"from": "human", "value": "second"}]},
    ]))
    reqs = build_requests(parse_dataset(f"sharegpt:path={share}"), 4, parse_lengths("8"), None,
                          np.random.default_rng(0))
    assert sorted({r.prompt for r in reqs}) == ["hello there", "second"]
    assert {r.max_tokens for r in reqs if r.prompt == "hello there"} == {10}  # 40 chars / 4
    jl = tmp_path / "p.jsonl"
    jl.write_text('{"prompt": "a b", "max_tokens": 5}\n"bare string"\n'
                  '{"messages": [{"role": "user", "content": "hi"}]}\n')
    reqs = build_requests(parse_dataset(f"jsonl:path={jl}"), 3, parse_lengths("8"),
                          parse_lengths("fixed:9"), np.random.default_rng(0))
    assert sorted(r.prompt for r in reqs) == ["a b", "bare string", "hi"]
    assert {r.max_tokens for r in reqs} == {9}
    # With no --output the file's own max_tokens is used, else 256 (vLLM's default).
    reqs = build_requests(parse_dataset(f"jsonl:path={jl}"), 3, parse_lengths("8"), None,
                          np.random.default_rng(0))
    assert {r.prompt: r.max_tokens for r in reqs} == {"a b": 5, "bare string": 256, "hi": 256}
    with pytest.raises(RidgelineError, match="--dataset"):
        parse_dataset("parquet:path=x")
    # The trace header says what was read; sonnet's sizes only for sonnet.
    assert parse_dataset(f"sharegpt:path={share}").describe() == {"kind": "sharegpt",
                                                                 "path": str(share)}
    assert parse_dataset(f"sonnet:path={jl},input=300,prefix=50").describe() == {
        "kind": "sonnet", "path": str(jl), "input_tokens": 300, "prefix_tokens": 50}
    # A ShareGPT file is read whole: past 1 GiB it is refused before reading (sparse file).
    big = tmp_path / "big.json"
    with big.open("wb") as fh:
        fh.truncate((1 << 30) + 1)
    with pytest.raises(RidgelineError, match="allowed: at most 1,024 MiB"):
        build_requests(parse_dataset(f"sharegpt:path={big}"), 1, parse_lengths("8"), None,
                       np.random.default_rng(0))


def test_shared_prefix_groups() -> None:
    from ridgeline.bench.dataset import build_requests

    reqs = build_requests(parse_dataset("synthetic"), 6, parse_lengths("fixed:4"),
                          parse_lengths("fixed:2"), np.random.default_rng(0), prefix_groups=2,
                          prefix_tokens=10)
    heads = [" ".join(r.prompt.split()[:10]) for r in reqs]
    assert heads[0] == heads[2] == heads[4] and heads[1] == heads[3] == heads[5]
    assert heads[0] != heads[1]
    assert all(r.prompt_tokens == 14 and len(r.prompt.split()) == 14 for r in reqs)


@pytest.mark.slow
def test_ray_workers_share_the_schedule_on_one_clock(server: str, tmp_path: Path) -> None:
    pytest.importorskip("ray")
    load = LoadSpec(None, parse_arrival("poisson", 50.0), requests=30)
    _, header, recs, footer = run(server, tmp_path, load, name="ray", workers=2,
                                  ray_address="local")
    assert header["load"]["ray"] == "local" and len(recs) == 30
    assert {r["worker"] for r in recs} == {0, 1}
    assert all(r["status"] == "ok" for r in recs)
    # one host: offsets ~0, so sends land on schedule and events match the server's log
    assert any("ray clock offsets" in n for n in footer["notes"])
    log = fetch_log(server)["events"]
    for r in recs:
        # bounds: a worker on its own clock origin is off by its start-up time (~1 s);
        # a loaded 2-core box delays a send or a chunk by tens of ms, not that
        assert -1e-3 <= r["sent_s"] - r["scheduled_s"] < 0.25
        client = [header["t0_perf_counter_s"] + t for t in r["event_times_s"]]
        diffs = [c - s for c, s in zip(client, log[r["id"]], strict=True)]
        assert all(-1e-3 <= d <= 0.15 for d in diffs), diffs


def test_live_progress_line() -> None:
    from ridgeline.bench.progress import LiveProgress

    p = LiveProgress(total=3, enabled=False)
    p.record({"status": "ok", "sent_s": 1.0, "event_times_s": [1.2, 1.3], "output_tokens": 2})
    p.record({"status": "ok", "sent_s": 2.0, "event_times_s": [2.4], "output_tokens": 1})
    p.record({"status": "error", "sent_s": 3.0, "event_times_s": [], "output_tokens": 0})
    p.in_flight = 5
    line = p.line()
    # median of TTFTs 200 ms and 400 ms is 300 ms
    assert "done 3/3" in line and "in flight 5" in line and "errors 1" in line
    assert "P50 TTFT 300 ms" in line

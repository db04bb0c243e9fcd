"""Fleet-scale simulation: selection instead of sorting, the sketch, streamed results,
sharding (processes, Ray), diurnal and replayed arrivals, the streamed CLI."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ridgeline.metrics import select
from ridgeline.metrics.distribution import sorted_finite, summarize_sorted
from ridgeline.metrics.sketch import LogSketch
from ridgeline.metrics.streaming import StreamingMetrics
from ridgeline.perf.step_time import LinearStepTime
from ridgeline.sim.cluster import ClusterConfig
from ridgeline.sim.engine import EngineConfig
from ridgeline.sim.event_loop import simulate
from ridgeline.sim.fleet import run_fleet, shard_blocker
from ridgeline.sim.workload import build_workload
from ridgeline.workload.arrivals import arrival_times_s, parse_arrival
from ridgeline.workload.timed_trace_reader import read_timed_trace

RIDGELINE = Path(sys.executable).parent / "ridgeline"
STEP = LinearStepTime(base_s=0.005, per_prefill_token_s=2e-5, per_decode_seq_s=1e-4)
CFG = EngineConfig(num_kv_blocks=4000, max_num_seqs=64)


def _wl(n: int = 1500, rate: float = 60.0, seed: int = 3):
    wl, _, _ = build_workload(n, "lognormal:mean=300,sigma=0.8,max=2000",
                              "lognormal:mean=60,sigma=0.8,max=400", rate_req_s=rate,
                              seed=seed)
    return wl


def _header():
    from ridgeline.trace.schema import TraceHeader

    return TraceHeader(source="simulate", clock="virtual", engine="ridgeline-sim")


# ---- selection instead of a sort ----------------------------------------------------------


def test_select_matches_sort_at_every_rank_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(select, "FULL_SORT_MAX", 1000)
    x = np.random.default_rng(1).lognormal(2.0, 1.0, 200_000)
    x[::97] = np.nan
    full = sorted_finite(x)
    part = select.select_finite(x)
    assert part.size == full.size
    for lo, hi in select.rank_windows(full.size):
        assert np.array_equal(part[lo:hi + 1], full[lo:hi + 1])
    a = summarize_sorted("x", "x", full, unit="ms", seed=4)
    b = summarize_sorted("x", "x", part, unit="ms", seed=4)
    for k, p in a.percentiles.items():   # values and bootstrap CIs: the same numbers
        q = b.percentiles[k]
        assert (p.value, p.ci_low, p.ci_high) == (q.value, q.ci_low, q.ci_high)
    assert a.min == b.min and a.max == b.max and a.count == b.count
    assert math.isclose(a.mean, b.mean, rel_tol=1e-12)


# ---- the sketch -----------------------------------------------------------------------------


@pytest.mark.parametrize("err", [0.01, 0.05])
def test_sketch_percentiles_within_stated_error(err: float) -> None:
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.lognormal(1.0, 1.5, 50_000), rng.exponential(300.0, 20_000)])
    s = LogSketch(err)
    for part in np.array_split(x, 7):
        s.add(part)
    for q in (1, 10, 50, 90, 99, 99.9):
        exact = float(np.percentile(x, q))
        assert abs(s.percentile(q) - exact) <= err * exact, q
    merged = LogSketch(err)
    halves = [LogSketch(err), LogSketch(err)]
    halves[0].add(x[:30_000])
    halves[1].add(x[30_000:])
    merged.merge(halves[0])
    merged.merge(halves[1])
    assert np.array_equal(merged.counts, s.counts) and merged.count == x.size


# ---- streamed results ---------------------------------------------------------------------


@pytest.mark.parametrize("router", ["round-robin", "least-outstanding"])
def test_streamed_chunks_equal_the_batch_run(router: str) -> None:
    wl = _wl()
    cl = ClusterConfig(replicas=3, router=router)
    ref = simulate(wl, CFG, STEP, cl)
    chunks = []
    summary = simulate(wl, CFG, STEP, cl, sink=chunks.append, chunk_requests=200)
    assert len(chunks) > 3
    seen = []
    for c in chunks:
        for j, i in enumerate(c.request_ids.tolist()):
            assert np.array_equal(c.events_s(j), ref.events_s(i))
            assert (c.sent_s[j], c.end_s[j], c.replica[j]) == (ref.sent_s[i], ref.end_s[i],
                                                               ref.replica[i])
            seen.append(i)
    assert sorted(seen) == list(range(len(wl)))
    st = summary.stream_stats
    assert st["finished"] == sum(s == "ok" for s in ref.status)
    assert st["preemptions"] == int(ref.preemptions.sum())
    assert st["engine_steps"] == ref.timeline["end_s"].size
    assert st["max_kv_blocks_used"] == ref.timeline["kv_blocks_used"].max()


def test_heap_loop_and_heap_router_equal_the_scans(monkeypatch: pytest.MonkeyPatch) -> None:
    from ridgeline.sim import cluster, event_loop

    monkeypatch.setenv("RIDGELINE_SIM_CORE", "python")   # the Python engine's loops
    wl = _wl(2500, rate=400.0)
    for router in ("least-outstanding", "round-robin"):
        cl = ClusterConfig(replicas=24, router=router)
        fast = simulate(wl, CFG, STEP, cl)
        with monkeypatch.context() as m:
            m.setattr(event_loop, "HEAP_MIN_REPLICAS", 10**9)
            m.setattr(cluster, "ROUTER_HEAP_MIN", 10**9)
            ref = simulate(wl, CFG, STEP, cl)
        assert np.array_equal(fast.replica, ref.replica)
        assert np.array_equal(fast.event_times_s, ref.event_times_s)
        assert np.array_equal(fast.event_offsets, ref.event_offsets)


def test_streaming_metrics_equal_analyze_of_the_whole_run() -> None:
    from ridgeline.metrics.analysis import analyze

    wl = _wl()
    cl = ClusterConfig(replicas=2)
    ref = simulate(wl, CFG, STEP, cl)
    batch = analyze(ref.to_trace(_header()), slos=["ttft_ms<=40"], window="all", seed=0)
    exact = StreamingMetrics(slos=("ttft_ms<=40",))
    sketch = StreamingMetrics(slos=("ttft_ms<=40",), exact_max=0, relative_error=0.01)
    simulate(wl, CFG, STEP, cl, sink=lambda c: (exact.add_trace(c.to_trace(_header())),
                                                sketch.add_trace(c.to_trace(_header()))),
             chunk_requests=300)
    r = exact.result(seed=0)
    rs = sketch.result(seed=0)
    assert r["requests"] == batch.counts["requests"]
    assert r["by_status"]["ok"] == batch.counts["successful"]
    assert r["goodput"]["good_requests"] == batch.goodput.good_requests
    assert math.isclose(r["throughput"]["requests_per_s"], batch.throughput.requests_s,
                        rel_tol=1e-12)
    assert math.isclose(r["throughput"]["output_tok_s"], batch.throughput.output_tok_s,
                        rel_tol=1e-12)
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        b, e, s = batch.latency[key], r["latency"][key], rs["latency"][key]
        assert e.count == b.count == s.count
        assert math.isclose(e.mean, b.mean, rel_tol=1e-12)
        assert math.isclose(s.mean, b.mean, rel_tol=1e-9)
        for k, p in b.percentiles.items():
            assert e.percentiles[k].value == p.value                     # exact: equal
            assert abs(s.percentiles[k].value - p.value) <= 0.01 * p.value + 1e-9   # sketch
            assert math.isnan(s.percentiles[k].ci_low)                   # no invented CI
    assert r["percentile_method"]["itl_ms"].startswith("exact")
    assert rs["percentile_method"]["itl_ms"].startswith("sketch")


# ---- sharding -------------------------------------------------------------------------------


def _summ(run) -> dict:
    s = run.summary(seed=0)
    return {"requests": s["requests"], "status": s["by_status"],
            "thr": s["throughput"], "lat": {k: (d["count"], d["percentiles"])
                                            for k, d in s["latency"].items()}}


def test_sharded_processes_equal_single_process(tmp_path: Path) -> None:
    wl = _wl(1200, rate=80.0)
    cl = ClusterConfig(replicas=4)
    one = run_fleet(wl, CFG, STEP, cl, _header(), trace_path=str(tmp_path / "a.jsonl"))
    two = run_fleet(wl, CFG, STEP, cl, _header(), workers=2,
                    trace_path=str(tmp_path / "b.jsonl"))
    assert two.backend == "2 worker processes" and two.shards == 2
    a, b = _summ(one), _summ(two)
    assert a["lat"] == b["lat"] and a["status"] == b["status"]
    assert a["thr"] == pytest.approx(b["thr"], rel=1e-12)
    # The merged trace holds every request once, with the single-process token times.
    recs = {}
    for line in (tmp_path / "b.jsonl").read_text().splitlines()[1:-1]:
        obj = json.loads(line)
        recs[obj["id"]] = obj
    assert len(recs) == len(wl)
    ref = {json.loads(x)["id"]: json.loads(x) for x in
           (tmp_path / "a.jsonl").read_text().splitlines()[1:-1]}
    assert recs == ref
    assert json.loads((tmp_path / "b.jsonl").read_text().splitlines()[-1])["type"] == "footer"


def test_global_state_routers_stay_in_one_process() -> None:
    wl = _wl(300)
    cl = ClusterConfig(replicas=2, router="least-outstanding")
    assert "least-outstanding" in shard_blocker(wl, cl)
    run = run_fleet(wl, CFG, STEP, cl, _header(), workers=2)
    assert run.shards == 1 and any("ignored" in n for n in run.notes)


def test_ray_local_equals_single_process() -> None:
    ray = pytest.importorskip("ray")
    wl = _wl(800, rate=80.0)
    cl = ClusterConfig(replicas=4)
    one = run_fleet(wl, CFG, STEP, cl, _header())
    try:
        viaray = run_fleet(wl, CFG, STEP, cl, _header(), workers=2, ray_address="local")
    finally:
        ray.shutdown()
    assert viaray.backend.startswith("ray")
    assert _summ(one)["lat"] == _summ(viaray)["lat"]


# ---- arrivals -------------------------------------------------------------------------------


def test_diurnal_realized_rate_follows_the_curve() -> None:
    proc = parse_arrival("diurnal:peak=40,trough=5,period=600")
    t = arrival_times_s(proc, 60_000, np.random.default_rng(11))
    assert np.all(np.diff(t) >= 0)
    span = float(t[-1])
    edges = np.linspace(0.0, math.floor(span / 600) * 600, 61)
    counts, _ = np.histogram(t, edges)
    # Expected count per bin: the integral of the asked rate (fine trapezoid).
    fine = np.linspace(edges[0], edges[-1], 60 * 200 + 1)
    rate = 5 + 35 * (1 - np.cos(2 * np.pi * fine / 600)) / 2
    cum = np.concatenate([[0], np.cumsum((rate[1:] + rate[:-1]) / 2 * np.diff(fine))])
    expected = np.diff(cum[::200])
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 60 + 5 * math.sqrt(2 * 60)   # dof 60: mean 60, sd 11
    assert counts.max() > 4 * counts.min()     # it does swing between trough and peak


def test_replay_burstgpt_and_mooncake_scaled(tmp_path: Path) -> None:
    ts = np.cumsum(np.random.default_rng(2).exponential(2.0, 50)) + 1000.0
    csv = tmp_path / "burst.csv"
    csv.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                   + "".join(f"{x:.3f},ChatGPT,{i + 10},{i + 1},{2 * i + 11},Conversation log\n"
                             for i, x in enumerate(ts)))
    tr = read_timed_trace(str(csv), speedup=4.0)
    assert tr.format == "burstgpt"
    assert np.allclose(np.diff(tr.times_s), np.diff(np.round(ts, 3)) / 4.0)
    assert tr.prompt_tokens[:3].tolist() == [10, 11, 12]
    proc = parse_arrival(f"replay:path={csv},speedup=4")
    got = arrival_times_s(proc, 50, np.random.default_rng(0))
    assert np.allclose(got, tr.times_s)
    jl = tmp_path / "mooncake.jsonl"
    jl.write_text("".join(json.dumps({"timestamp": int(x * 1000), "input_length": 5,
                                      "output_length": 7}) + "\n" for x in ts))
    mt = read_timed_trace(str(jl), speedup=0.5)
    assert mt.format == "mooncake"
    assert np.allclose(np.diff(mt.times_s), np.diff(np.floor(ts * 1000) / 1000) * 2.0)


# ---- the command ----------------------------------------------------------------------------


def _run(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(RIDGELINE), *args], capture_output=True, text=True,
                          timeout=300, **kw)


SMALL = ["simulate", "--model", "llama-3.1-8b", "--prompt", "fixed:200", "--output",
         "fixed:20"]


@pytest.mark.parametrize("extra, needle", [
    (["--requests", "50", "--rate", "1,2", "--workers", "2"], "--stream/--workers/--ray"),
    (["--requests", "50", "--rate", "5", "--stream", "--sketch-error", "0.7"],
     "--sketch-error"),
    (["--requests", "50", "--arrival", "diurnal:peak=1,trough=5"], "--arrival"),
    (["--requests", "50", "--arrival", "diurnal:peak=3,wobble=2"], "--arrival"),
    (["--requests", "50", "--rate", "5", "--stream", "--timeline", "t.csv"], "--timeline"),
])
def test_bad_input_exits_2_with_one_line(extra: list[str], needle: str) -> None:
    p = _run(*SMALL, *extra)
    assert p.returncode == 2, p.stderr
    errors = [x for x in p.stderr.splitlines() if x.startswith("error: ")]
    assert len(errors) == 1 and needle in errors[0], p.stderr
    assert "Traceback" not in p.stderr + p.stdout


def test_streamed_cli_json_and_diurnal(tmp_path: Path) -> None:
    p = _run(*SMALL, "--requests", "400", "--arrival", "diurnal:peak=20,trough=2,period=60",
             "--replicas", "2", "--stream", "--json", "--trace", str(tmp_path / "t.jsonl"))
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["requests"] == 400 and d["simulation"]["finished"] == 400
    assert d["percentile_method"]["ttft_ms"].startswith("exact")
    lines = (tmp_path / "t.jsonl").read_text().splitlines()
    assert len(lines) == 402 and json.loads(lines[-1])["interrupted"] is False


def test_ctrl_c_leaves_a_partial_trace_and_summary(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    proc = subprocess.Popen([str(RIDGELINE), *SMALL, "--requests", "2000000", "--rate",
                             "2000", "--replicas", "16", "--stream", "--trace", str(trace)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:   # wait for the first chunk on disk
            time.sleep(0.5)
            if trace.exists() and len(trace.read_text().splitlines()) > 2:
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "INTERRUPTED" in out and "Traceback" not in out + err
    lines = trace.read_text().splitlines()
    footer = json.loads(lines[-1])
    assert footer["type"] == "footer" and footer["interrupted"] is True
    assert footer["requests_written"] == len(lines) - 2 > 0


def _peak_rss_kb(n: int) -> int:
    code = ("import resource, subprocess, sys; "
            f"subprocess.run([{str(RIDGELINE)!r}, 'simulate', '--prompt', 'fixed:100', "
            f"'--output', 'fixed:100', '--requests', '{n}', '--rate', '100', '--replicas', "
            "'2', '--stream', '--exact-max', '20000', '--json'], stdout=subprocess.DEVNULL, "
            "check=True); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=600, env={**os.environ})
    return int(out.stdout.strip())


@pytest.mark.slow
def test_memory_stays_flat_as_requests_grow() -> None:
    # Past --exact-max every series is a fixed-size sketch; token times and outcomes leave
    # with their chunk, and the per-request inputs are read through windows over their
    # arrays: 10x the requests must stay within 20% peak RSS (the bar; measured
    # 1.09x, about 50 bytes a request: the workload's own arrays). Before the windows,
    # Python lists of inputs made it 1.20x, and the batch path holds about 13 KB a request.
    small, large = _peak_rss_kb(20_000), _peak_rss_kb(200_000)
    assert large <= 1.2 * small, (small, large)
    per_request_bytes = (large - small) * 1024 / 180_000
    assert per_request_bytes < 120, (small, large)


def _grouped_wl(n: int = 1200, groups: int = 9, rate: float = 80.0):
    # Request i is in group i mod 9; 9 and 4 replicas are coprime, so round-robin sends
    # every group to every replica.
    wl, _, _ = build_workload(n, "lognormal:mean=300,sigma=0.8,max=2000",
                              "lognormal:mean=60,sigma=0.8,max=400", rate_req_s=rate,
                              seed=5, prefix_groups=groups, prefix_tokens=256)
    return wl


def test_prefix_affinity_keeps_each_group_on_one_replica_and_hits_its_cache() -> None:
    # 9 groups over 4 replicas: group g on replica g mod 4. With prefix caching, each
    # group's 256-token prefix is cached on one replica instead of all four, so more of
    # the prompt tokens hit the cache than under round-robin.
    wl = _grouped_wl()
    cfg = EngineConfig(num_kv_blocks=4000, enable_prefix_caching=True)
    aff = simulate(wl, cfg, STEP, ClusterConfig(replicas=4, router="prefix-affinity"))
    rr = simulate(wl, cfg, STEP, ClusterConfig(replicas=4, router="round-robin"))
    assert wl.prefix_group is not None and len(set(wl.prefix_group.tolist())) == 9
    assert np.array_equal(aff.replica, wl.prefix_group % 4)

    def hits(res) -> int:
        return sum(s["prefix_cache_hits_tokens_total"] for s in res.engine_stats)

    # Each group misses once per replica it visits: 9 misses under affinity, 36 under
    # round-robin (27 more misses of 256 tokens each).
    assert hits(aff) - hits(rr) == 256 * 27


def test_prefix_affinity_shards_equal_the_shared_loop(tmp_path: Path) -> None:
    # Sharded over processes, one replica at a time, against the shared event loop of
    # the whole cluster: the same token times for every request.
    wl = _grouped_wl()
    cl = ClusterConfig(replicas=4, router="prefix-affinity")
    assert shard_blocker(wl, cl) is None
    shared = simulate(wl, CFG, STEP, cl)
    two = run_fleet(wl, CFG, STEP, cl, _header(), workers=2,
                    trace_path=str(tmp_path / "b.jsonl"))
    assert two.shards == 2
    seen = 0
    for line in (tmp_path / "b.jsonl").read_text().splitlines()[1:-1]:
        obj = json.loads(line)
        i = int(obj["id"])
        assert obj["event_times_s"] == np.round(shared.events_s(i), 6).tolist()  # 1 us
        seen += 1
    assert seen == len(wl)


def _write_parts(tmp_path, lines_per_part):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"type":"header"}\n')
    for k, n in enumerate(lines_per_part):
        (tmp_path / f"t.jsonl.part{k}").write_text(
            "".join(f'{{"type":"request","id":"{k}-{i}"}}\n' for i in range(n)))
    return trace


def test_append_parts_copies_every_line_and_removes_the_parts(tmp_path):
    from ridgeline.sim.fleet import _append_parts

    trace = _write_parts(tmp_path, [3, 5])
    appended, left = _append_parts(str(trace), 2)
    assert (appended, left) == (8, [])
    lines = trace.read_text().splitlines()
    assert len(lines) == 9 and lines[1].endswith('"0-0"}') and lines[-1].endswith('"1-4"}')
    assert not list(tmp_path.glob("t.jsonl.part*"))


def test_append_parts_drops_a_shard_whose_metrics_were_lost(tmp_path):
    from ridgeline.sim.fleet import _append_parts

    trace = _write_parts(tmp_path, [3, 5])
    assert _append_parts(str(trace), 2, keep={1}) == (5, [])
    assert len(trace.read_text().splitlines()) == 6
    assert not list(tmp_path.glob("t.jsonl.part*"))


def test_append_parts_stops_at_the_deadline_on_a_line_and_keeps_the_rest(tmp_path,
                                                                         monkeypatch):
    # After a Ctrl-C the copy must end within the 2 s budget: it stops at the deadline,
    # on a whole line, and what it did not copy stays on disk (named), nothing lost.
    import ridgeline.sim.fleet as fleet

    trace = _write_parts(tmp_path, [40, 7])
    line_bytes = len('{"type":"request","id":"0-00"}\n')
    monkeypatch.setattr(fleet, "COPY_CHUNK_BYTES", 10 * line_bytes + 3)  # mid-line reads
    clock = iter([0.0, 5.0, 5.0, 5.0])   # one read, then past the deadline
    monkeypatch.setattr(fleet.time, "monotonic", lambda: next(clock))
    appended, left = fleet._append_parts(str(trace), 2, deadline_s=1.0)
    copied = trace.read_text().splitlines()[1:]
    assert appended == len(copied) and 10 <= appended <= 11
    assert all(line.endswith("}") for line in copied)   # whole lines only
    part0 = tmp_path / "t.jsonl.part0"
    offset = int(left[0].split("from byte ")[1].split()[0])
    rest = part0.read_bytes()[offset:].decode().splitlines()
    assert len(rest) + appended == 40 and rest[0].endswith(f'"0-{appended}"}}')
    assert left[1] == str(tmp_path / "t.jsonl.part1") and (tmp_path / "t.jsonl.part1").exists()


@pytest.mark.parametrize("err", [0.0, 1.0, 1.5, -0.1])
def test_sketch_refuses_a_relative_error_outside_zero_one(err: float) -> None:
    # gamma = (1 + e)/(1 - e) is only a bucket ratio > 1 for 0 < e < 1.
    with pytest.raises(ValueError, match="relative_error"):
        LogSketch(err)

"""The C engine core (sim/_core.c) against the Python engine, the reference: the same step
times and the same traces, bit for bit, on seeded workloads that preempt, reject, chunk and
route; and the command says which engine ran."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ridgeline.perf.roofline_step import RooflineStepTime
from ridgeline.sim import core
from ridgeline.sim.cluster import ClusterConfig
from ridgeline.sim.engine import EngineConfig
from ridgeline.sim.event_loop import SimResult, Workload, simulate

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")
MODELS = {  # dense GQA, two MoE (expected unique experts), MLA + MoE
    "llama-3.1-8b": {"hardware": "h100-sxm"},
    "mixtral-8x7b": {"hardware": "h100-sxm", "tp": 2},
    "qwen3-30b-a3b": {"hardware": "h100-sxm"},
    "deepseek-v3": {"hardware": "h200", "tp": 8, "weights": "fp8"},
}


def test_the_core_is_built() -> None:
    """The install builds it (setup.py); without it every run silently takes the slow path."""
    assert core.available(), core._lib_error


def _python(monkeypatch: pytest.MonkeyPatch, *args: object, **kw: object) -> SimResult:
    monkeypatch.setenv("RIDGELINE_SIM_CORE", "python")
    try:
        return simulate(*args, **kw)  # type: ignore[arg-type]
    finally:
        monkeypatch.delenv("RIDGELINE_SIM_CORE")


def _same(a: SimResult, b: SimResult) -> list[str]:
    bad = [k for k in ("sent_s", "end_s", "replica", "preemptions", "event_offsets",
                       "event_times_s") if not np.array_equal(getattr(a, k), getattr(b, k),
                                                              equal_nan=True)]
    bad += ["status"] if a.status != b.status else []
    bad += [f"timeline.{k}" for k in a.timeline
            if not np.array_equal(a.timeline[k], b.timeline[k])]
    bad += ["engine_stats"] if a.engine_stats != b.engine_stats else []
    return bad


@pytest.mark.parametrize("name", list(MODELS))
def test_step_seconds_bit_for_bit(name: str) -> None:
    """The C step time equals CompiledStep's Python evaluation exactly, prefill and decode."""
    model = RooflineStepTime.from_names(model=name, **MODELS[name])  # type: ignore[arg-type]
    c = core.Core(EngineConfig(max_num_seqs=256), model, 1, "round-robin", False)
    compiled = model._fast
    rng = np.random.default_rng(1)
    for _ in range(400):
        pt = int(rng.choice([0, rng.integers(1, 8192)]))
        pairs = pt * int(rng.integers(1, 4000)) if pt else 0
        pc = int(rng.integers(0, 50_000)) if pt else 0
        ps = int(rng.integers(1, 8)) if pt else 0
        nd = int(rng.integers(0 if pt else 1, 257))
        dc = nd * int(rng.integers(1, 20_000))
        want = compiled.scalar(float(pt), float(pairs), float(pc), float(ps), float(nd),
                               float(dc))
        assert c.step_seconds(pt, pairs, pc, ps, nd, dc) == want


CASES = [  # (replicas, router, max_num_seqs, max_num_batched_tokens, chunked, block, blocks)
    (1, "round-robin", 256, 8192, True, 16, 100_000),     # roomy: no preemption
    (1, "round-robin", 32, 2048, True, 16, 3_000),        # KV-bound: preempts
    (1, "round-robin", 256, 8192, False, 16, 3_000),      # no chunked prefill
    (1, "round-robin", 4, 2048, True, 1, 300),            # block of 1 token, rejections
    (3, "round-robin", 32, 8192, True, 16, 3_000),
    (3, "least-outstanding", 256, 2048, True, 16, 300),   # heavy preemption, rejections
    (20, "least-outstanding", 32, 8192, False, 16, 3_000),
    (20, "prefix-affinity", 256, 8192, True, 16, 100_000),
    (7, "least-kv", 64, 2048, True, 16, 1_000),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}x{c[1]}-{c[6]}" for c in CASES])
def test_trace_equals_the_python_engine(case: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    replicas, router, seqs, budget, chunked, block, blocks = case
    rng = np.random.default_rng(replicas * 7 + blocks)
    n = 3000
    rate = float(rng.choice([20.0, 200.0]))
    wl = Workload(prompt_tokens=rng.integers(1, 3000, n), output_tokens=rng.integers(1, 400, n),
                  arrival_s=np.cumsum(rng.exponential(1 / rate, n)))
    cfg = EngineConfig(max_num_seqs=seqs, max_num_batched_tokens=budget,
                       chunked_prefill=chunked, block_size_tokens=block, num_kv_blocks=blocks)
    cluster = ClusterConfig(replicas=replicas, router=router)
    model = RooflineStepTime.from_names(model="llama-3.1-8b", hardware="h100-sxm")
    ref = _python(monkeypatch, wl, cfg, model, cluster)
    got = simulate(wl, cfg, model, cluster)
    assert (ref.core, got.core) == ("python", "c")
    assert _same(ref, got) == []
    if blocks <= 3_000 and chunked and seqs > 4:
        assert ref.preemptions.sum() > 0      # the case exercises preemption


def test_moe_and_mla_traces_equal(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(5)
    n = 1500
    wl = Workload(prompt_tokens=rng.integers(1, 4000, n), output_tokens=rng.integers(1, 300, n),
                  arrival_s=np.cumsum(rng.exponential(1 / 50, n)))
    cfg = EngineConfig(num_kv_blocks=2_000)
    for name in ("mixtral-8x7b", "deepseek-v3"):
        model = RooflineStepTime.from_names(model=name, **MODELS[name])  # type: ignore[arg-type]
        cluster = ClusterConfig(replicas=2, router="least-outstanding")
        ref = _python(monkeypatch, wl, cfg, model, cluster)
        got = simulate(wl, cfg, model, cluster)
        assert got.core == "c" and _same(ref, got) == [], name


def test_streamed_chunks_equal_the_batch_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks from the C core: each request once, its outcome as in the Python engine's batch
    run; the streamed totals as the Python engine's stream."""
    rng = np.random.default_rng(9)
    n = 4000
    wl = Workload(prompt_tokens=rng.integers(1, 2000, n), output_tokens=rng.integers(1, 300, n),
                  arrival_s=np.cumsum(rng.exponential(1 / 100, n)))
    cfg = EngineConfig(max_num_seqs=64, num_kv_blocks=2_500)
    model = RooflineStepTime.from_names(model="llama-3.1-8b", hardware="h100-sxm")
    cluster = ClusterConfig(replicas=4, router="least-outstanding")
    ref = _python(monkeypatch, wl, cfg, model, cluster)
    chunks: list[SimResult] = []
    summary = simulate(wl, cfg, model, cluster, sink=chunks.append, chunk_requests=700)
    assert summary.core == "c" and len(chunks) >= 5
    ids = np.concatenate([c.request_ids for c in chunks])  # type: ignore[misc]
    assert np.array_equal(np.sort(ids), np.arange(n))
    for c in chunks:
        idx = c.request_ids
        assert np.array_equal(c.end_s, ref.end_s[idx])
        assert np.array_equal(c.preemptions, ref.preemptions[idx])
        for k, i in enumerate(idx.tolist()):  # type: ignore[union-attr]
            assert np.array_equal(c.events_s(k), ref.events_s(i))
    py_chunks: list[SimResult] = []
    py_summary = _python(monkeypatch, wl, cfg, model, cluster, sink=py_chunks.append,
                         chunk_requests=700)
    st, py = dict(summary.stream_stats or {}), dict(py_summary.stream_stats or {})
    st.pop("chunks"), py.pop("chunks")
    assert st == py
    assert summary.engine_stats == py_summary.engine_stats


def _direct_run(wl: Workload, slots: np.ndarray) -> tuple[core.Core, np.ndarray]:
    model = RooflineStepTime.from_names(model="llama-3.1-8b", hardware="h100-sxm")
    c = core.Core(EngineConfig(num_kv_blocks=5_000), model, 1, "round-robin", True)
    events = np.full(int(slots[-1]) + 8, -1.0)   # 8 guard values past the last slot
    c.set_direct(events, slots)
    while c.run(wl.arrival_s, wl.prompt_tokens, wl.output_tokens, None, None, None,
                1 << 14, 1 << 62) != 0:
        pass
    return c, events


def test_direct_token_times_fill_each_request_slot_and_never_overflow_one() -> None:
    """A batch run writes each request's token times straight to its slot (by id): the same
    times as the finish-order buffer the stream drains; a slot one token short stops the run
    with an error instead of writing past it."""
    rng = np.random.default_rng(4)
    n = 300
    wl = Workload(prompt_tokens=rng.integers(1, 500, n), output_tokens=rng.integers(1, 50, n),
                  arrival_s=np.cumsum(rng.exponential(1 / 50, n)))
    slots = np.concatenate(([0], np.cumsum(wl.output_tokens)))
    c, events = _direct_run(wl, slots)
    part = c.drain()
    assert part["events"].size == 0 and np.array_equal(np.sort(part["id"]), np.arange(n))
    assert (events[-8:] == -1.0).all() and (events[:-8] >= 0).all()
    # the streamed run (the core's finish-order buffer, drained in chunks): the same times
    chunks: list[SimResult] = []
    model = RooflineStepTime.from_names(model="llama-3.1-8b", hardware="h100-sxm")
    simulate(wl, EngineConfig(num_kv_blocks=5_000), model, sink=chunks.append,
             chunk_requests=50)
    assert sum(len(ch) for ch in chunks) == n
    for ch in chunks:
        for k, i in enumerate(ch.request_ids.tolist()):  # type: ignore[union-attr]
            assert np.array_equal(ch.events_s(k), events[slots[i]:slots[i + 1]])
    short = slots.copy()
    short[8:] -= 1   # request 7's slot one token short (the later ones keep their sizes)
    with pytest.raises(RuntimeError, match="more tokens than it asked for"):
        _direct_run(wl, short)


def _cli_json(args: list[str], env_core: str | None) -> dict:
    env = dict(os.environ)
    env.pop("RIDGELINE_SIM_CORE", None)
    if env_core:
        env["RIDGELINE_SIM_CORE"] = env_core
    run = subprocess.run([RIDGELINE, *args, "--json"], capture_output=True, text=True,
                         timeout=300, env=env)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


@pytest.mark.parametrize("extra", [[], ["--replicas", "50", "--router", "least-outstanding",
                                        "--stream"]])
def test_command_reports_its_engine_and_both_agree(extra: list[str]) -> None:
    args = ["simulate", "--requests", "3000", "--rate", "40", "--prompt",
            "lognormal:mean=800,sigma=0.8", "--output", "lognormal:mean=250,sigma=0.8", *extra]
    fast = _cli_json(args, None)
    slow = _cli_json(args, "python")
    assert fast["simulation"]["engine_core"] == "c"
    assert slow["simulation"]["engine_core"] == "python"
    for doc in (fast, slow):
        for k in ("wall_s", "simulated_requests_per_wall_s", "engine_core"):
            doc["simulation"].pop(k)
    assert fast == slow


def test_random_edge_configurations_equal_the_python_engine(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Seeded fuzz over the corners: one-slot engines, 1-token budgets and blocks, a single
    KV block (everything rejected), simultaneous arrivals, outputs of one token, prompts
    past the budget without chunked prefill, prefix groups with and without the prefix cache,
    closed loops, P/D pools with transfer delays, 1-50 replicas on every router."""
    model = RooflineStepTime.from_names(model="qwen2.5-0.5b", hardware="h100-sxm")
    rng = np.random.default_rng(20261201)
    for case in range(120):
        n = int(rng.integers(1, 400))
        max_prompt = int(rng.choice([2, 50, 2000, 20000]))
        max_output = int(rng.choice([1, 2, 30, 600]))
        shape = rng.choice(["zero", "burst", "poisson"])
        if shape == "zero":
            arrival = np.zeros(n)
        elif shape == "burst":
            arrival = np.sort(rng.choice([0.0, 0.5, 1.0], n))
        else:
            arrival = np.cumsum(rng.exponential(1 / float(rng.choice([1, 100, 10_000])), n))
        prompt = rng.integers(1, max_prompt, n)
        groups = prefix = None
        if rng.random() < 0.5:   # shared prefixes: some requests in a few groups
            groups = np.where(rng.random(n) < 0.7, rng.integers(0, 6, n), -1)
            prefix = (prompt * rng.random(n)).astype(np.int64)
        output = rng.integers(1, max_output + 1, n)
        if rng.random() < 0.3:   # closed loop: users, with or without think time
            think = rng.exponential(float(rng.choice([1e-4, 0.5])), n)
            wl = Workload(prompt_tokens=prompt, output_tokens=output,
                          concurrency=int(rng.choice([1, 4, 64])),
                          think_s=think if rng.random() < 0.7 else None,
                          prefix_group=groups, prefix_tokens=prefix)
        else:
            wl = Workload(prompt_tokens=prompt, output_tokens=output, arrival_s=arrival,
                          prefix_group=groups, prefix_tokens=prefix)
        seqs = int(rng.choice([1, 2, 8, 64]))
        cfg = EngineConfig(
            max_num_seqs=seqs,
            max_num_batched_tokens=int(max(seqs, rng.choice([1, 16, 512, 8192]))),
            chunked_prefill=bool(rng.integers(0, 2)),
            block_size_tokens=int(rng.choice([1, 3, 16])),
            num_kv_blocks=int(rng.choice([1, 5, 40, 400, 100_000])),
            enable_prefix_caching=bool(rng.integers(0, 2)))
        router = str(rng.choice(["round-robin", "least-outstanding", "least-kv",
                                 "prefix-affinity"]))
        if rng.random() < 0.3:   # P/D: prefill and decode pools, KV transfer delays
            cluster = ClusterConfig(
                router=router, pd=(int(rng.integers(1, 4)), int(rng.integers(1, 4))),
                kv_bytes_per_token=float(rng.choice([0.0, 131072.0])),
                link_bandwidth_bytes_s=float(rng.choice([1e9, 4.5e11])),
                kv_transfer_latency_s=float(rng.choice([0.0, 1e-3])))
        else:
            cluster = ClusterConfig(replicas=int(rng.choice([1, 2, 7, 50])), router=router)
        ref = _python(monkeypatch, wl, cfg, model, cluster)
        got = simulate(wl, cfg, model, cluster)
        assert got.core == "c"
        assert _same(ref, got) == [], (case, cfg, cluster, shape)


def test_prefix_cache_under_kv_pressure_equals_the_python_engine(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Sessions sharing long prefixes on few KV blocks: hits, LRU evictions of cached blocks,
    preemptions; prefix-affinity and least-outstanding, the cache counters included."""
    rng = np.random.default_rng(3)
    n = 3000
    prompt = rng.integers(600, 3000, n)
    wl = Workload(prompt_tokens=prompt, output_tokens=rng.integers(1, 200, n),
                  arrival_s=np.cumsum(rng.exponential(1 / 60, n)),
                  prefix_group=rng.integers(0, 40, n), prefix_tokens=np.minimum(prompt, 512))
    model = RooflineStepTime.from_names(model="llama-3.1-8b", hardware="h100-sxm")
    cfg = EngineConfig(max_num_seqs=64, max_num_batched_tokens=2048, num_kv_blocks=1_500,
                       enable_prefix_caching=True)
    for router in ("prefix-affinity", "least-outstanding", "least-kv"):
        cluster = ClusterConfig(replicas=4, router=router)
        ref = _python(monkeypatch, wl, cfg, model, cluster)
        got = simulate(wl, cfg, model, cluster)
        assert got.core == "c" and _same(ref, got) == [], router
        hits = sum(s["prefix_cache_hits_tokens_total"] for s in got.engine_stats)
        assert hits > 0 and ref.preemptions.sum() > 0, router


@pytest.mark.parametrize("router", ["least-outstanding", "round-robin"])
def test_pd_and_closed_loop_equal_the_python_engine(router: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Hand-offs from 2 prefill to 3 decode instances with a KV transfer delay (first token
    on one replica, the rest on another), KV-bound decode pools; and 48 closed-loop users."""
    rng = np.random.default_rng(17)
    n = 2500
    prompt = rng.integers(100, 3000, n)
    output = rng.integers(1, 300, n)
    model = RooflineStepTime.from_names(model="llama-3.1-8b", hardware="h100-sxm")
    cfg = EngineConfig(max_num_seqs=64, max_num_batched_tokens=4096, num_kv_blocks=2_000)
    pd = ClusterConfig(router=router, pd=(2, 3), kv_bytes_per_token=131072.0,
                       link_bandwidth_bytes_s=5e10, kv_transfer_latency_s=2e-4)
    open_loop = Workload(prompt_tokens=prompt, output_tokens=output,
                         arrival_s=np.cumsum(rng.exponential(1 / 40, n)))
    users = Workload(prompt_tokens=prompt, output_tokens=output, concurrency=48,
                     think_s=rng.exponential(0.2, n))
    preemptions = []
    for wl, cluster in ((open_loop, pd), (users, ClusterConfig(replicas=3, router=router)),
                        (users, pd)):
        ref = _python(monkeypatch, wl, cfg, model, cluster)
        got = simulate(wl, cfg, model, cluster)
        assert got.core == "c" and _same(ref, got) == [], cluster
        preemptions.append(int(ref.preemptions.sum()))
    assert max(preemptions) > 0, preemptions
    # Replies longer than one token finish on a decode instance (2, 3 or 4).
    assert set(ref.replica[output > 1].tolist()) <= {2, 3, 4}
    assert set(ref.replica[output == 1].tolist()) <= {0, 1}


def test_pd_streams_on_the_c_core(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Python engine cannot stream P/D (a request's tokens come from two replicas); the
    C core carries the first token across the hand-off. Chunks equal the batch run."""
    rng = np.random.default_rng(23)
    n = 3000
    wl = Workload(prompt_tokens=rng.integers(100, 2000, n),
                  output_tokens=rng.integers(1, 200, n),
                  arrival_s=np.cumsum(rng.exponential(1 / 50, n)))
    model = RooflineStepTime.from_names(model="llama-3.1-8b", hardware="h100-sxm")
    cfg = EngineConfig(num_kv_blocks=4_000)
    cluster = ClusterConfig(router="least-outstanding", pd=(1, 2),
                            kv_bytes_per_token=131072.0, link_bandwidth_bytes_s=5e10)
    ref = _python(monkeypatch, wl, cfg, model, cluster)
    chunks: list[SimResult] = []
    summary = simulate(wl, cfg, model, cluster, sink=chunks.append, chunk_requests=400)
    assert summary.core == "c" and len(chunks) >= 5
    seen = []
    for c in chunks:
        for k, i in enumerate(c.request_ids.tolist()):  # type: ignore[union-attr]
            assert np.array_equal(c.events_s(k), ref.events_s(i))
            assert (c.sent_s[k], c.end_s[k], c.replica[k]) == (
                ref.sent_s[i], ref.end_s[i], ref.replica[i])
            seen.append(i)
    assert sorted(seen) == list(range(n))
    monkeypatch.setenv("RIDGELINE_SIM_CORE", "python")
    with pytest.raises(ValueError, match="P/D"):
        simulate(wl, cfg, model, cluster, sink=chunks.append)


def test_pd_stream_command(tmp_path: Path) -> None:
    args = ["simulate", "--requests", "4000", "--rate", "30", "--pd", "1:2", "--stream",
            "--trace", str(tmp_path / "t.jsonl")]
    doc = _cli_json(args, None)
    assert doc["simulation"]["engine_core"] == "c"
    assert doc["simulation"]["finished"] == 4000
    lines = (tmp_path / "t.jsonl").read_text().splitlines()
    assert len(lines) == 4002 and json.loads(lines[-1])["requests_written"] == 4000
    env = {**os.environ, "RIDGELINE_SIM_CORE": "python"}
    run = subprocess.run([RIDGELINE, *args], capture_output=True, text=True, timeout=120,
                         env=env)
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1 and "--pd" in run.stderr and "C engine core" in \
        run.stderr


@pytest.mark.parametrize("block, chunked, blocks, pd", [
    (16, True, 100_000, None),       # whole prompt cached but its last block: 16 to compute
    (1, True, 100_000, None),        # 1-token blocks: the one token left to sample from
    (16, True, 150, None),           # KV-bound: preempted recomputes hit the whole prompt
    (16, False, 100_000, None),
    (16, True, 100_000, (1, 1)),     # P/D: transferred KV, prefix registered on both sides
])
def test_prefix_covering_the_whole_prompt_equals_the_python_engine(
        block: int, chunked: bool, blocks: int, pd: tuple[int, int] | None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """prefix_tokens == prompt_tokens: the lookup is capped at (prompt - 1) // block blocks
    (a token must be computed to sample from), the branch a shorter prefix never reaches.
    Prompts are whole blocks for most requests (where the cap binds) and odd for the rest."""
    rng = np.random.default_rng(block * 7 + blocks)
    n = 400
    prompt = rng.integers(1, 60, n) * block
    prompt[::5] += 1                                 # some prompts end in a partial block
    wl = Workload(prompt_tokens=prompt, output_tokens=rng.integers(1, 120, n),
                  arrival_s=np.cumsum(rng.exponential(1 / 400, n)),
                  prefix_group=rng.integers(0, 4, n), prefix_tokens=prompt.copy())
    model = RooflineStepTime.from_names(model="qwen2.5-0.5b", hardware="h100-sxm")
    cfg = EngineConfig(max_num_seqs=32, max_num_batched_tokens=1024, chunked_prefill=chunked,
                       block_size_tokens=block, num_kv_blocks=blocks,
                       enable_prefix_caching=True)
    cluster = ClusterConfig(router="round-robin", pd=pd) if pd else ClusterConfig(
        replicas=2, router="prefix-affinity")
    ref = _python(monkeypatch, wl, cfg, model, cluster)
    got = simulate(wl, cfg, model, cluster)
    assert got.core == "c" and _same(ref, got) == []
    hits = sum(s["prefix_cache_hits_tokens_total"] for s in ref.engine_stats)
    assert hits > 0
    if blocks < 1000:
        assert ref.preemptions.sum() > 0

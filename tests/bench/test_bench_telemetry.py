"""Bench against servers that describe themselves: telemetry, self-description, prompt cache.

A scripted server speaks either vLLM's or llama.cpp's dialect: its /metrics uses that
engine's metric names, its usage reports cached prompt tokens the way that engine does
(`usage.prompt_tokens_details.cached_tokens` / `timings.cache_n`, computed as the longest
common word prefix with any earlier prompt, like llama.cpp's slot cache), and it has that
engine's self-description endpoints (vLLM /version; llama.cpp /props, no /version).
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from ridgeline.bench.client import EndpointConfig
from ridgeline.bench.load import LoadSpec
from ridgeline.bench.single_run import BenchConfig, run_bench
from ridgeline.bench.telemetry import (
    TelemetryConfig,
    detect_engine,
    gpu_sample,
    parse_prometheus,
    sample_loop,
    server_sample,
)
from ridgeline.metrics.telemetry import summarize_samples, telemetry_lines, trace_file_telemetry

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")

VLLM_PAGE = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{model_name="m",engine="0"}} {running}
vllm:num_requests_waiting{{model_name="m",engine="0"}} {waiting}
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{model_name="m",engine="0"}} {kv}
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{{model_name="m",engine="0"}} {preempt}
vllm:e2e_request_latency_seconds_bucket{{le="0.3",model_name="m"}} 4.0
"""
LLAMA_PAGE = """# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing {running}
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred {waiting}
# TYPE llamacpp:kv_cache_usage_ratio gauge
llamacpp:kv_cache_usage_ratio {kv}
llamacpp:prompt_tokens_total 100
"""


class EngineLikeServer:
    """vLLM- or llama.cpp-flavoured scripted server on 127.0.0.1 (a thread)."""

    def __init__(self, flavor: str) -> None:
        self.flavor = flavor
        self.bodies: list[dict[str, Any]] = []
        self.hits: Counter[str] = Counter()
        self.prompts: list[list[str]] = []
        self.running = 0
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/completions", self.complete)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/version", self.version)
        app.router.add_get("/props", self.props)
        return app

    def start(self) -> str:
        ready = threading.Event()

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            runner = web.AppRunner(self.app(), handle_signals=False)
            loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, "127.0.0.1", 0)
            loop.run_until_complete(site.start())
            self.port = runner.addresses[0][1]
            ready.set()
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())

        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        ready.wait(10)
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def models(self, request: web.Request) -> web.Response:
        self.hits["/v1/models"] += 1
        return web.json_response({"data": [{"id": "m", "max_model_len": 4096}]})

    async def version(self, request: web.Request) -> web.Response:
        self.hits["/version"] += 1
        if self.flavor == "llamacpp":
            raise web.HTTPNotFound()
        return web.json_response({"version": "0.9.1"})

    async def props(self, request: web.Request) -> web.Response:
        self.hits["/props"] += 1
        if self.flavor != "llamacpp":
            raise web.HTTPNotFound()
        return web.json_response({"default_generation_settings": {"n_ctx": 4096},
                                  "total_slots": 4, "chat_template": "x" * 5000})

    async def metrics(self, request: web.Request) -> web.Response:
        self.hits["/metrics"] += 1
        page = VLLM_PAGE if self.flavor == "vllm" else LLAMA_PAGE
        return web.Response(text=page.format(running=self.running, waiting=0,
                                             kv=0.1 * self.running, preempt=3),
                            content_type="text/plain")

    async def complete(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        words = str(body["prompt"]).split()
        cached = max((_common(words, p) for p in self.prompts), default=0)
        self.prompts.append(words)
        self.running += 1
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        n = int(body.get("max_tokens") or 4)
        for i in range(n):
            await asyncio.sleep(0.01)
            chunk: dict[str, Any] = {"choices": [{"index": 0, "text": " the",
                                                  "finish_reason": "length" if i == n - 1
                                                  else None}]}
            if i == n - 1 and self.flavor == "llamacpp":
                chunk["timings"] = {"cache_n": cached, "prompt_n": len(words) - cached}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        usage: dict[str, Any] = {"prompt_tokens": len(words), "completion_tokens": n}
        if self.flavor == "vllm":
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
        await resp.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        self.running -= 1
        return resp


def _common(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@pytest.fixture(params=["vllm", "llamacpp"])
def engine_server(request: pytest.FixtureRequest) -> Iterator[EngineLikeServer]:
    srv = EngineLikeServer(request.param)
    srv.start()
    yield srv
    srv.stop()


def _run(srv: EngineLikeServer, tmp: Path, name: str, *, nonce: int | None = None,
         telemetry: bool = True, prefix_groups: int = 0, extra_body: dict | None = None,
         requests: int = 12, point: int = 0) -> tuple[Any, dict, list[dict]]:
    from ridgeline.workload.lengths import parse_lengths

    ep = EndpointConfig(f"http://127.0.0.1:{srv.port}", "m", extra_body=extra_body or {})
    cfg = BenchConfig(endpoint=ep, load=LoadSpec(concurrency=3, arrival=None,
                                                 requests=requests),
                      trace_path=tmp / f"{name}.jsonl", prompt=parse_lengths("fixed:64"),
                      output=parse_lengths("fixed:4"), prompt_nonce=nonce, point_index=point,
                      prefix_groups=prefix_groups, prefix_tokens=32 if prefix_groups else 0,
                      telemetry=TelemetryConfig(enabled=telemetry, interval_s=0.02))
    warnings: list[str] = []
    outcome = run_bench(cfg, warn=warnings.append)
    lines = [json.loads(x) for x in (tmp / f"{name}.jsonl").read_text().splitlines()]
    return outcome, {"warnings": warnings, "header": lines[0]}, [
        x for x in lines if x.get("type") == "request"]


def test_prompts_are_unique_and_repeats_are_warned(engine_server: EngineLikeServer,
                                                   tmp_path: Path) -> None:
    _, first, recs = _run(engine_server, tmp_path, "a", nonce=5, telemetry=False)
    prompts = [b["prompt"] for b in engine_server.bodies]
    assert len(set(prompts)) == len(prompts) == 12
    assert not any("prefix cache" in w for w in first["warnings"])
    assert first["header"]["dataset"]["prompt_reuse"] == "none"
    assert first["header"]["dataset"]["prompt_nonce"] == 5
    # Another point of the same run: new texts, same lengths.
    _run(engine_server, tmp_path, "b", nonce=5, point=1, telemetry=False)
    assert not set(prompts) & {b["prompt"] for b in engine_server.bodies[12:]}
    # The same nonce and point again: the server answers from its cache, bench says so.
    _, again, recs = _run(engine_server, tmp_path, "c", nonce=5, telemetry=False)
    assert sorted(b["prompt"] for b in engine_server.bodies[24:]) == sorted(prompts)
    assert all(r["cached_prompt_tokens"] == 64 for r in recs)
    assert any("prefix cache" in w and "did not ask" in w for w in again["warnings"])


def test_prefix_groups_share_exactly_their_prefix(engine_server: EngineLikeServer,
                                                  tmp_path: Path) -> None:
    _, out, _recs = _run(engine_server, tmp_path, "g", nonce=9, telemetry=False,
                        prefix_groups=2)
    words = [b["prompt"].split() for b in engine_server.bodies]
    assert all(len(w) == 96 for w in words)
    groups = {tuple(w[:32]) for w in words}
    assert len(groups) == 2
    # Beyond the prefix, no two prompts share their next words (the per-request part).
    assert len({tuple(w[32:36]) for w in words}) == len(words)
    assert out["header"]["dataset"]["prompt_reuse"] == "prefix-groups"
    assert not any("prefix cache" in w for w in out["warnings"])  # asked for: no warning


def test_extra_body_is_merged_into_every_request(engine_server: EngineLikeServer,
                                                 tmp_path: Path) -> None:
    _run(engine_server, tmp_path, "x", telemetry=False, requests=3,
         extra_body={"top_k": 20, "chat_template_kwargs": {"enable_thinking": False}})
    assert len(engine_server.bodies) == 3
    for b in engine_server.bodies:
        assert b["top_k"] == 20 and b["chat_template_kwargs"] == {"enable_thinking": False}
        assert b["stream"] is True and b["max_tokens"] == 4


def test_telemetry_and_self_description(engine_server: EngineLikeServer,
                                        tmp_path: Path) -> None:
    from ridgeline.bench import selfdesc

    selfdesc.MISSING.clear()
    _, out, _ = _run(engine_server, tmp_path, "t", requests=30)
    header = out["header"]
    tel = header["telemetry"]
    flavor = engine_server.flavor
    assert tel["engine"] == flavor and tel["file"] == "t.telemetry.jsonl"
    desc = header["engine_self_description"]
    assert desc["models"][0]["max_model_len"] == 4096
    if flavor == "vllm":
        assert header["engine_version"] == "0.9.1" and "props" not in desc
    else:
        assert desc["props"]["total_slots"] == 4
        assert len(desc["props"]["chat_template"]) < 400  # long strings are cut
        assert header["engine"].startswith("llama.cpp")
    summary = trace_file_telemetry(tmp_path / "t.jsonl")
    assert summary is not None
    srv = summary["server"]
    assert srv["samples"] >= 2
    assert 1 <= srv["peak_running"] <= 3  # at most 3 in flight
    assert srv["peak_kv_usage"] == pytest.approx(0.1 * srv["peak_running"])
    if flavor == "vllm":
        assert srv["preemptions"] == 0  # the counter stood at 3 throughout
    # The 404'd endpoint is not probed again by the next run (a sweep's next point).
    missing = "/props" if flavor == "vllm" else "/version"
    before = engine_server.hits[missing]
    _run(engine_server, tmp_path, "t2", telemetry=False, requests=2)
    assert engine_server.hits[missing] == before == 1


def test_parse_pages_of_four_engines() -> None:
    vllm = VLLM_PAGE.format(running=5, waiting=2, kv=0.25, preempt=7)
    assert detect_engine(vllm) == "vllm"
    assert server_sample("vllm", parse_prometheus(vllm)) == {
        "running": 5.0, "waiting": 2.0, "kv_usage": 0.25, "preemptions_total": 7.0}
    llama = LLAMA_PAGE.format(running=1, waiting=0, kv=0.5)
    assert detect_engine(llama) == "llamacpp"
    assert server_sample("llamacpp", parse_prometheus(llama)) == {
        "running": 1.0, "waiting": 0.0, "kv_usage": 0.5, "prompt_tokens_total": 100.0}
    sglang = "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{a=\"b\"} 4\n" \
             "sglang:num_queue_reqs 1\nsglang:token_usage 0.3\n"
    assert detect_engine(sglang) == "sglang"
    assert server_sample("sglang", parse_prometheus(sglang)) == {
        "running": 4.0, "waiting": 1.0, "kv_usage": 0.3}
    tgi = "tgi_batch_current_size 8\ntgi_queue_size 3\n"
    assert detect_engine(tgi) == "tgi"
    assert server_sample("tgi", parse_prometheus(tgi)) == {"running": 8.0, "waiting": 3.0}
    # Two data-parallel engines: requests add up, KV usage is the fuller one.
    two = ('vllm:num_requests_running{engine="0"} 2\nvllm:num_requests_running{engine="1"} 3'
           '\nvllm:kv_cache_usage_perc{engine="0"} 0.2\nvllm:kv_cache_usage_perc{engine="1"}'
           ' 0.6\n')
    assert server_sample("vllm", parse_prometheus(two)) == {"running": 5.0, "kv_usage": 0.6}
    assert detect_engine("# HELP x\nfoo 1\n") is None


class FakeNVML:
    """pynvml's surface, two GPUs with fixed readings."""

    class _Util:
        def __init__(self, gpu: int) -> None:
            self.gpu = gpu

    class _Mem:
        def __init__(self, used: int) -> None:
            self.used = used

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        return self._Util(40 + 20 * h)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return self._Mem((h + 1) * 2**30)

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return 300_000 + h * 50_000  # milliwatts


def test_gpu_sampling_with_a_fake_nvml() -> None:
    nv = FakeNVML()
    recs = gpu_sample(nv, [0, 1])
    assert recs == [{"gpu": 0, "util_pct": 40.0, "mem_used_bytes": 2.0**30, "power_w": 300.0},
                    {"gpu": 1, "util_pct": 60.0, "mem_used_bytes": 2.0**31, "power_w": 350.0}]
    samples = [{"source": "gpu", "t_perf_s": 1.0 + 0.1 * k, **r}
               for k in range(5) for r in recs]
    summary = summarize_samples(samples, t0_perf_s=1.0, end_s=1.0)
    assert summary["gpus"][1] == {"gpu": 1, "samples": 5, "mean_util_pct": 60.0,
                                  "peak_mem_used_bytes": 2.0**31, "mean_power_w": 350.0}
    assert any("GPU 1" in x and "2.00 GiB" in x for x in telemetry_lines(summary))


def test_sampler_process_uses_pynvml_when_it_imports(tmp_path: Path) -> None:
    """The sampler process with a fake `pynvml` module first on its path."""
    (tmp_path / "pynvml.py").write_text(textwrap.dedent("""
        class _U: gpu = 55
        class _M: used = 3 * 2**30
        def nvmlInit(): pass
        def nvmlShutdown(): pass
        def nvmlDeviceGetCount(): return 1
        def nvmlDeviceGetHandleByIndex(i): return i
        def nvmlDeviceGetUtilizationRates(h): return _U()
        def nvmlDeviceGetMemoryInfo(h): return _M()
        def nvmlDeviceGetPowerUsage(h): return 123000
    """))
    out = tmp_path / "s.jsonl"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen([sys.executable, "-m", "ridgeline.bench.telemetry", "--out",
                             str(out), "--interval-ms", "20", "--gpu"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None and proc.stdin is not None
    status = json.loads(proc.stdout.readline())
    assert status["gpus"] == 1 and "1 GPU" in status["gpu"]
    time.sleep(0.3)
    proc.stdin.close()  # the parent going away stops it
    assert proc.wait(10) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    gpu = [r for r in rows if r.get("source") == "gpu"]
    assert len(gpu) >= 3 and gpu[0]["util_pct"] == 55 and gpu[0]["power_w"] == 123.0
    assert rows[-1]["final"] is True and rows[-1]["samples"] == len(gpu)


def test_without_pynvml_the_sampler_says_so_and_goes_on() -> None:
    stop = threading.Event()
    stop.set()
    buf, status = io.StringIO(), io.StringIO()
    import builtins

    real_import = builtins.__import__

    def no_pynvml(name: str, *a: Any, **k: Any) -> Any:
        if name == "pynvml":
            raise ImportError(name)
        return real_import(name, *a, **k)

    builtins.__import__ = no_pynvml
    try:
        final = sample_loop(None, buf, 0.05, True, stop, status=status)
    finally:
        builtins.__import__ = real_import
    assert "pynvml is not installed" in final["gpu"] and final["samples"] == 0


def test_emulator_metrics_are_scraped(tmp_path: Path) -> None:
    """`ridgeline serve` exposes vLLM-named /metrics; bench finds and summarises them."""
    out = subprocess.run(
        [RIDGELINE, "bench", "--target", "emulator", "--model", "llama-3.1-8b",
         "--concurrency", "8", "--requests", "40", "--prompt", "fixed:256", "--output",
         "fixed:64", "--telemetry-interval-ms", "50", "--trace", str(tmp_path / "e.jsonl"),
         "--json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    obj = json.loads(out.stdout)
    srv = obj["telemetry"]["server"]
    # Closed loop at 8: never more than 8 in the server (waiting ones are those that arrived
    # since the last step was scheduled).
    assert 1 <= srv["peak_running"] <= 8 and srv["peak_waiting"] <= 8
    samples = [json.loads(x) for x in (tmp_path / "e.telemetry.jsonl").read_text().splitlines()]
    assert all(s["running"] + s["waiting"] <= 8 for s in samples if s.get("source") == "server")
    assert 0 < srv["peak_kv_usage"] < 0.05
    assert srv["preemptions"] == 0
    header = json.loads((tmp_path / "e.jsonl").read_text().splitlines()[0])
    assert header["telemetry"]["engine"] == "vllm"
    analyze = subprocess.run([RIDGELINE, "analyze", str(tmp_path / "e.jsonl")],
                             capture_output=True, text=True, timeout=120)
    assert analyze.returncode == 0 and f"peak running {srv['peak_running']:g}" in analyze.stdout
    valid = subprocess.run([RIDGELINE, "validate", str(tmp_path / "e.jsonl")],
                           capture_output=True, text=True, timeout=120)
    assert valid.returncode == 0, valid.stdout + valid.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--extra-body", "{bad"], "--extra-body: not JSON"),
    (["--extra-body", "[1, 2]"], "--extra-body: got"),
    (["--extra-body", '{"stream": false}'], "--extra-body: stream is set by"),
    (["--save-result", "csv"], "--save-result: got 'csv'; allowed: vllm, aiperf-csv"),
    (["--telemetry-interval-ms", "1"], "--telemetry-interval-ms: got 1"),
    (["--server-metrics", "localhost:9/metrics"], "--server-metrics: got"),
    (["--metric-percentiles", "50,101"], "--metric-percentiles: got '101'"),
    (["--metric-percentiles", "p99"], "--metric-percentiles: got 'p99'"),
    (["--prompt-nonce", "-1"], "--prompt-nonce: got -1"),
])
def test_new_options_fail_in_one_line(args: list[str], message: str) -> None:
    out = subprocess.run([RIDGELINE, "bench", "--base-url", "http://127.0.0.1:9", *args],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    errors = [x for x in out.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], out.stderr


def test_server_samples_count_from_the_start_through_the_end_of_the_run() -> None:
    """Samples at 0.5 (before the first send), 1.0, 1.5, 2.0 (the run's end, included) and
    2.5 s (after it). A run of 1 s from t0 = 1.0 keeps the three inside; the preemption counter
    counts from the last sample before the start (2 -> 6). With no end every later one counts."""
    samples = [{"source": "server", "t_perf_s": t, "running": r, "preemptions_total": p}
               for t, r, p in ((0.5, 1, 2), (1.0, 3, 3), (1.5, 5, 4), (2.0, 7, 6), (2.5, 9, 10))]
    srv = summarize_samples(samples, t0_perf_s=1.0, end_s=1.0)["server"]
    assert (srv["samples"], srv["peak_running"], srv["preemptions"]) == (3, 7.0, 4.0)
    srv = summarize_samples(samples, t0_perf_s=1.0, end_s=None)["server"]
    assert (srv["samples"], srv["peak_running"], srv["preemptions"]) == (4, 9.0, 8.0)


def test_only_a_loopback_server_gets_this_machines_gpu_telemetry() -> None:
    """nvidia-smi here says nothing of a remote server's GPUs: the sampler asks it only when
    the target is this machine."""
    from ridgeline.bench.telemetry import is_local

    local = ["http://127.0.0.1:8000", "http://localhost:8000/v1", "http://[::1]:80",
             "http://127.8.0.1:9", "http://0.0.0.0:8000", "http://LOCALHOST:1"]
    remote = ["http://10.0.0.5:8000", "https://api.example.com/v1", "http://128.0.0.1:80",
              "http://localhost.example.com:80"]
    assert [is_local(u) for u in local] == [True] * len(local)
    assert [is_local(u) for u in remote] == [False] * len(remote)


def test_a_target_without_metrics_is_said_once(tmp_path: Path, monkeypatch) -> None:
    """A server with no /metrics (here: nothing listens) is one warning, said once even when
    a sweep starts a sampler per point."""
    import ridgeline.bench.telemetry as telemetry

    monkeypatch.setattr(telemetry, "_SAID", set())
    said: list[str] = []
    for point in range(2):
        s = telemetry.TelemetrySampler(telemetry.TelemetryConfig(interval_s=0.05),
                                       "http://127.0.0.1:9", tmp_path / f"t{point}.jsonl",
                                       warn=said.append)
        s.start()
        s.stop()
    server_lines = [w for w in said if w.startswith("no server metrics")]
    assert len(server_lines) == 1, said

"""LoRA adapters on the installed `ridgeline serve`: --lora-modules, --max-loras, vLLM's
load/unload endpoints, /v1/models, 404 for unknown models, and the adapters' timing cost."""

from __future__ import annotations

import dataclasses
import json
import statistics
import time

import httpx
import pytest

from tests.serve_emulator_helpers import emulator, one_error_line, serve_refuses

BASE = "llama-3.1-8b"


def _ids(url: str) -> dict[str, dict]:
    return {m["id"]: m for m in httpx.get(url + "/v1/models").json()["data"]}


def test_adapters_are_served_model_names() -> None:
    # vLLM's shape: several adapters after one flag
    with emulator("--lora-modules", "sql=/adapters/sql",
                  '{"name": "chat", "path": "/adapters/chat"}', "--max-loras", "3",
                  "--time-to-first-token", "0", "--inter-token-latency", "0") as emu:
        url = emu.base_url
        models = _ids(url)
        assert set(models) == {BASE, "sql", "chat"}
        assert models["sql"]["root"] == "/adapters/sql" and models["sql"]["parent"] == BASE
        stats = httpx.get(url + "/ridgeline/stats").json()
        assert stats["lora_adapters"] == {"sql": "/adapters/sql", "chat": "/adapters/chat"}
        assert stats["fixed_timing"]["inter_token_latency_ms"] == 0.0
        r = httpx.post(url + "/v1/completions", json={"model": "sql", "prompt": "hi",
                                                      "max_tokens": 2})
        assert r.status_code == 200 and r.json()["model"] == "sql"
        # vLLM's 404 for a model it does not serve
        r = httpx.post(url + "/v1/completions", json={"model": "nope", "prompt": "hi"})
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"

        # load: a third adapter fits --max-loras 3, a fourth does not; a duplicate is a 400
        r = httpx.post(url + "/v1/load_lora_adapter", json={"lora_name": "math",
                                                            "lora_path": "/adapters/math"})
        assert r.status_code == 200 and r.text.startswith("Success")
        assert "math" in _ids(url)
        r = httpx.post(url + "/v1/load_lora_adapter", json={"lora_name": "more",
                                                            "lora_path": "/x"})
        assert r.status_code == 400
        r = httpx.post(url + "/v1/load_lora_adapter", json={"lora_name": "math",
                                                            "lora_path": "/x"})
        assert r.status_code == 400 and "already been loaded" in r.json()["error"]["message"]
        r = httpx.post(url + "/v1/load_lora_adapter", json={"lora_name": "x"})
        assert r.status_code == 400
        # unload: gone from /v1/models, its requests 404 again; unknown adapter 404
        r = httpx.post(url + "/v1/unload_lora_adapter", json={"lora_name": "sql"})
        assert r.status_code == 200 and "sql" not in _ids(url)
        r = httpx.post(url + "/v1/completions", json={"model": "sql", "prompt": "hi"})
        assert r.status_code == 404
        r = httpx.post(url + "/v1/unload_lora_adapter", json={"lora_name": "sql"})
        assert r.status_code == 404


def _ttft_itl_ms(client: httpx.Client, url: str, model: str) -> tuple[float, float]:
    times = []
    t0 = time.perf_counter()
    with client.stream("POST", url, json={"model": model, "prompt": "hi", "max_tokens": 21,
                                          "ignore_eos": True, "stream": True}) as resp:
        for line in resp.iter_lines():
            if line.startswith("data: {") and json.loads(line[6:])["choices"]:
                times.append(time.perf_counter())
    return (times[0] - t0) * 1000, (times[-1] - times[0]) / 20 * 1000


def test_adapter_requests_cost_ten_percent_more_with_fixed_latencies() -> None:
    """TTFT 200 ms and ITL 20 ms for the base model; an adapter's x 1.10: 220 and 22 ms."""
    with emulator("--lora-modules", "sql=/a/sql", "--time-to-first-token", "200",
                  "--inter-token-latency", "20") as emu, httpx.Client(timeout=30) as client:
        url = emu.base_url + "/v1/completions"
        assert client.get(emu.base_url + "/v1/models").status_code == 200
        for model, ttft, itl in ((BASE, 200.0, 20.0), ("sql", 220.0, 22.0)):
            runs = [_ttft_itl_ms(client, url, model) for _ in range(3)]
            assert statistics.median(r[0] for r in runs) == pytest.approx(ttft, rel=0.03)
            assert statistics.median(r[1] for r in runs) == pytest.approx(itl, rel=0.03)


def test_engine_steps_holding_an_adapter_take_ten_percent_longer() -> None:
    """The engine-timed path: a step is 1.10 x the wrapped engine's when it holds an
    adapter's request, and unchanged otherwise (a stand-in engine with 10 ms steps)."""
    from ridgeline.serve.lora import LoraRegistry, LoraTimedEngine

    @dataclasses.dataclass
    class Result:
        duration_s: float
        emitted: list
        finished: list

    class TenMs:
        def step(self, now_s: float) -> Result:
            return Result(0.010, [("base-1", 1), ("lora-1", 1)], ["lora-1"])

    registry = LoraRegistry(BASE, 1, (("sql", "/a"),))
    engine = LoraTimedEngine(TenMs(), registry)
    assert engine.step(0.0).duration_s == 0.010          # no adapter request in flight
    registry.in_flight.add("lora-1")
    assert engine.step(0.0).duration_s == pytest.approx(0.011)
    assert registry.in_flight == set()                    # it finished in that step
    assert engine.step(0.0).duration_s == 0.010


def test_bad_lora_options_are_one_line_errors() -> None:
    assert one_error_line(serve_refuses("--lora-modules", "no-path"), "--lora-modules")
    assert one_error_line(serve_refuses("--lora-modules", "a=/x", "--lora-modules", "b=/y"),
                          "--lora-modules")    # 2 adapters, --max-loras 1
    assert one_error_line(serve_refuses("--lora-modules", "a=/x", "--lora-modules", "a=/y",
                                        "--max-loras", "4"), "--lora-modules")
    assert one_error_line(serve_refuses("--max-loras", "0"), "--max-loras")

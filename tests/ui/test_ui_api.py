"""The UI's JSON API (no browser): the numbers are those of `ridgeline estimate --json`;
bad input is a 400 with a one-line error; the page references nothing outside the server."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from ridgeline.ui.app import create_app

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app())


def cli_estimate(*args: str) -> dict:
    out = subprocess.run([RIDGELINE, "estimate", *args, "--ops", "--json"],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_estimate_matches_the_cli(client):
    body = {"model": "qwen2.5-72b", "hardware": "h100-sxm", "weights": "fp8", "tp": 4,
            "batch": 24, "prompt": 2048, "output": 300}
    r = client.post("/api/estimate", json=body)
    assert r.status_code == 200, r.text
    got = r.json()
    cli = cli_estimate("--model", "qwen2.5-72b", "--hardware", "h100-sxm", "--weights", "fp8",
                       "--tp", "4", "--batch", "24", "--prompt", "2048", "--output", "300")
    assert got["summary"]["tpot_ms"] == pytest.approx(cli["result"]["tpot_s"] * 1e3,
                                                      rel=1e-12)
    assert got["summary"]["ttft_ms"] == pytest.approx(cli["result"]["ttft_s"] * 1e3,
                                                      rel=1e-12)
    assert got["result"]["kv_capacity_tokens"] == cli["result"]["kv_capacity_tokens"]
    assert got["ops"] == cli["ops"]
    # fp8 weights on H100 run W8A8 (as vLLM does): the GEMMs run at the fp8 peak, hence
    # its ridge (1,978.9 TFLOP/s over 3.35 TB/s)
    assert got["roofline"]["ridge_point_flop_per_byte"] == pytest.approx(
        cli["constants"]["ridge_point_flop_per_byte"])
    assert got["roofline"]["ridge_point_flop_per_byte"] == pytest.approx(1978.9e12 / 3.35e12)
    assert got["roofline"]["compute_dtype"] == "fp8"


def test_uploaded_config_gives_the_catalog_numbers(client):
    cfg = json.loads(resources.files("ridgeline.specs").joinpath(
        "data", "models", "llama-3.1-8b.json").read_text())
    a = client.post("/api/estimate", json={"config": cfg, "batch": 8}).json()
    b = client.post("/api/estimate", json={"model": "llama-3.1-8b", "batch": 8}).json()
    assert a["summary"]["tpot_ms"] == b["summary"]["tpot_ms"]


@pytest.mark.parametrize("body,field", [
    ({"batch": 0}, "batch"), ({"batch": "many"}, "batch"), ({"hardware": "gpu9000"}, "hardware"),
    ({"model": "nope"}, "model"), ({"model": "/etc/passwd"}, "model"), ({"tp": 3}, "tp"),
    ({"config": {"model_type": "bert"}}, "config"), ({"weights": "fp3"}, "weights"),
])
def test_bad_estimate_input_is_a_400_with_one_line(client, body, field):
    r = client.post("/api/estimate", json=body)
    assert r.status_code == 400
    msg = r.json()["error"]
    assert "\n" not in msg and field.split("_")[0] in msg.lower()


def test_malformed_body_is_a_400(client):
    r = client.post("/api/estimate", content=b"{not json", headers={"content-type":
                                                                    "application/json"})
    assert r.status_code == 400 and "JSON" in r.json()["error"]
    assert client.post("/api/simulate", json={"rates": "fast"}).status_code == 400
    assert client.post("/api/simulate", json={"requests": 10**6}).status_code == 400


def test_simulate_returns_latency_vs_load_with_cis(client):
    r = client.post("/api/simulate", json={"rates": [2, 8], "requests": 100,
                                           "prompt": "fixed:256", "output": "fixed:32"})
    assert r.status_code == 200, r.text
    pts = r.json()["points"]
    assert [p["rate_req_s"] for p in pts] == [2, 8]
    for p in pts:
        lo, hi = p["ttft_p50_ci"]
        assert lo <= p["ttft_p50_ms"] <= hi
        assert p["throughput_req_s"] > 0


def _cli_latency(*args: str) -> dict:
    out = subprocess.run([RIDGELINE, "simulate", "-n", "100", "--rate", "2", "--prompt",
                          "fixed:256", "--output", "fixed:32", "--seed", "3", *args, "--json"],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["analysis"]["latency"]


def _same_point(pt: dict, lat: dict) -> None:
    assert pt["ttft_p50_ms"] == pytest.approx(lat["ttft_ms"]["percentiles"]["p50"]["value"],
                                              rel=1e-9)
    assert pt["tpot_p50_ms"] == pytest.approx(lat["tpot_ms"]["percentiles"]["p50"]["value"],
                                              rel=1e-9)
    assert pt["tpot_p99_ms"] == pytest.approx(lat["tpot_ms"]["percentiles"]["p99"]["value"],
                                              rel=1e-9)


SIM_BODY = {"rates": [2], "requests": 100, "prompt": "fixed:256", "output": "fixed:32",
            "seed": 3}


def test_simulate_is_the_cli_simulate_with_its_engine_costs(client):
    """The UI's sweep point is `ridgeline simulate` at that rate, engine costs on by default,
    and `engine_costs: false` is `--no-engine-costs`."""
    for ui_costs, flag in ((True, "--engine-costs"), (False, "--no-engine-costs")):
        r = client.post("/api/simulate", json={**SIM_BODY, "engine_costs": ui_costs})
        assert r.status_code == 200, r.text
        _same_point(r.json()["points"][0], _cli_latency(flag))
    r = client.post("/api/simulate", json={**SIM_BODY, "engine_costs": "yes"})
    assert r.status_code == 400 and "engine_costs" in r.json()["error"]


def test_simulate_takes_rates_below_one_request_per_second(client):
    r = client.post("/api/simulate", json={**SIM_BODY, "rates": [0.5, 2], "requests": 40})
    assert r.status_code == 200, r.text
    assert [p["rate_req_s"] for p in r.json()["points"]] == [0.5, 2]


def test_simulate_applies_a_per_step_and_a_per_request_cost(client, tmp_path, monkeypatch):
    """The shipped vLLM file fits 0 s per step, which would hide a sweep that drops the
    per-step terms. With a costs file of 0.4 ms per step and 5 ms + 1 step per request, the UI
    (its vLLM costs pointed at that file) equals `ridgeline simulate --engine FILE`; against
    `--no-engine-costs` its TPOT moves by the per-step cost and its TTFT by 5 ms + a step."""
    import ridgeline.sim.engine_costs as engine_costs

    path = tmp_path / "engine.json"
    path.write_text(json.dumps({"engine": "mine", "costs": {
        "request_overhead_s": {"value": 0.005, "unit": "s"},
        "request_overhead_steps": {"value": 1.0, "unit": "steps"},
        "step_overhead_s": {"value": 0.0004, "unit": "s"}}}))
    import ridgeline.sim.scenario as scenario

    real = engine_costs.load_engine_costs
    # patched where the UI's runs look it up: the scenario module binds it at import
    monkeypatch.setattr(scenario, "load_engine_costs",
                        lambda engine="vllm": real(str(path) if engine == "vllm" else engine))
    r = client.post("/api/simulate", json=SIM_BODY)
    assert r.status_code == 200, r.text
    pt = r.json()["points"][0]
    _same_point(pt, _cli_latency("--engine", str(path)))
    bare = _cli_latency("--no-engine-costs")
    assert pt["tpot_p50_ms"] > bare["tpot_ms"]["percentiles"]["p50"]["value"] + 0.3
    # 5 ms + one decode step (about the TPOT) per request, on top of the GPU-only TTFT
    assert pt["ttft_p50_ms"] > bare["ttft_ms"]["percentiles"]["p50"]["value"] + 5.0 \
        + 0.5 * pt["tpot_p50_ms"]


def test_catalog_and_page_are_self_contained(client):
    cat = client.get("/api/catalog").json()
    assert {m["name"] for m in cat["models"]} >= {"llama-3.1-8b", "mixtral-8x7b"}
    assert "h100-sxm" in {h["name"] for h in cat["hardware"]}
    for path in ("/", "/static/app.js", "/static/style.css"):
        r = client.get(path)
        assert r.status_code == 200
        assert "default-src 'self'" in r.headers["content-security-policy"]
        text = r.text.replace("http://www.w3.org/2000/svg", "")  # a namespace, not a URL
        assert not re.search(r"https?://", text), path  # no CDN, no external request
    assert client.get("/static/../app.py").status_code == 404

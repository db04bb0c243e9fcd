"""The UI's simulation tab is `ridgeline simulate --rate a,b`: the same Scenario, the same run.

Each point of `POST /api/simulate` is compared, to the last bit, with the point of the installed
`ridgeline simulate --rate r1,r2 --json` for the same model, hardware, engine, lengths, requests
and seed. The TensorRT-LLM case is one where a hand-built vLLM engine config would differ: its
preset has 32-token KV blocks, no chunked prefill, admission that reserves each request's whole
KV, overlap scheduling and its own KV memory rule.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from ridgeline.ui.app import create_app

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")
FIELDS = ("rate_req_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms",
          "throughput_req_s", "output_tok_s")
# long prompts at a rate past what the KV holds comfortably: the engines' admission and
# block rules decide who waits
BODY = {"rates": [3, 40], "requests": 150, "prompt": "lognormal:mean=1500,sigma=0.6,max=6000",
        "output": "fixed:48", "seed": 7}


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app())


def cli_sweep(*args: str, body: dict = BODY) -> list[dict]:
    rates = ",".join(f"{r:g}" for r in body["rates"])
    out = subprocess.run(
        [RIDGELINE, "simulate", "--rate", rates, "--requests", str(body["requests"]),
         "--prompt", body["prompt"], "--output", body["output"], "--seed", str(body["seed"]),
         *args, "--json"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["sweep"]


def ui_sweep(client: TestClient, **extra: object) -> list[dict]:
    r = client.post("/api/simulate", json={**BODY, **extra})
    assert r.status_code == 200, r.text
    return r.json()["points"]


def same(ui: list[dict], cli: list[dict]) -> None:
    assert [{k: p[k] for k in FIELDS} for p in ui] == [{k: p[k] for k in FIELDS} for p in cli]


def test_trtllm_preset_matches_simulate_to_the_bit(client):
    ui = ui_sweep(client, engine="trtllm")
    same(ui, cli_sweep("--engine", "trtllm"))
    # the preset is what moved the numbers: vLLM's loop on the same requests gives others
    vllm = ui_sweep(client)
    same(vllm, cli_sweep())
    assert [p["ttft_p99_ms"] for p in ui] != [p["ttft_p99_ms"] for p in vllm]


def test_sglang_without_engine_costs_matches_simulate(client):
    same(ui_sweep(client, engine="sglang", engine_costs=False),
         cli_sweep("--engine", "sglang", "--no-engine-costs"))


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_uploaded_config_is_simulate_with_that_config_file(client, tmp_path, engine):
    """An uploaded config.json (a parsed spec, no name to load) runs as `--model FILE`;
    SGLang's automatic limits read the model's context length from it."""
    text = resources.files("ridgeline.specs").joinpath(
        "data", "models", "qwen2.5-7b.json").read_text()
    path = tmp_path / "config.json"
    path.write_text(text)
    ui = ui_sweep(client, config=json.loads(text), hardware="l40s", weights="fp8",
                  engine=engine)
    same(ui, cli_sweep("--model", str(path), "--hardware", "l40s", "--weights", "fp8",
                       "--engine", engine))


@pytest.mark.parametrize("engine", ["tensorrt", "../engine.json"])
def test_unknown_engine_is_a_400_naming_the_field(client, engine):
    r = client.post("/api/simulate", json={**BODY, "engine": engine})
    assert r.status_code == 400
    assert r.json()["error"].startswith("engine: got ")
    assert "allowed: vllm, trtllm, sglang" in r.json()["error"]

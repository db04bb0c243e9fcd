"""`ridgeline ui` in headless Chromium: the batch slider changes the displayed TPOT to the
value `ridgeline estimate --json` gives for that batch (a screenshot is kept as an artifact).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.browser import chromium, console_errors

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")
ARTIFACTS = Path(os.environ.get("RIDGELINE_TEST_ARTIFACTS", "out/test-artifacts"))


@pytest.fixture
def ui_server():
    proc = subprocess.Popen([RIDGELINE, "ui", "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert "http://127.0.0.1:" in line, (line, proc.poll())
        url = line.split()[2]
        deadline = time.time() + 30
        while True:
            try:
                urllib.request.urlopen(url + "api/catalog", timeout=5).read()
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.2)
        yield url
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def estimate_tpot_ms(batch: int, prompt: int = 1024, output: int = 256) -> float:
    out = subprocess.run([RIDGELINE, "estimate", "--batch", str(batch), "--prompt",
                          str(prompt), "--output", str(output), "--json"],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["result"]["tpot_s"] * 1e3


def _wait(driver, script: str, timeout_s: float = 20.0):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for: {script}")


def test_batch_slider_moves_tpot_to_the_estimate_of_that_batch(ui_server, tmp_path):
    driver = chromium(tmp_path)
    try:
        driver.get(ui_server)
        _wait(driver, "return document.getElementById('tpot').dataset.batch === '32'")
        tpot32 = float(driver.find_element("id", "tpot").get_attribute("data-value"))
        # Slider position 600 -> batch 2^(600/100) = 64 (the page's log mapping).
        driver.execute_script("const s = document.getElementById('batch'); s.value = 600;"
                              "s.dispatchEvent(new Event('input'));")
        _wait(driver, "return document.getElementById('tpot').dataset.batch === '64'")
        assert driver.find_element("id", "batch-value").text == "64"
        assert driver.find_element("id", "prompt-value").text == "1024"
        el = driver.find_element("id", "tpot")
        shown_value = float(el.get_attribute("data-value"))
        shown_text = el.text
        expected = estimate_tpot_ms(64)
        assert shown_value == pytest.approx(expected, rel=1e-12)
        assert shown_text.endswith(" ms")
        assert float(shown_text[:-3]) == pytest.approx(expected, rel=5e-4)  # 4 digits shown
        assert tpot32 == pytest.approx(estimate_tpot_ms(32), rel=1e-12)
        assert shown_value != pytest.approx(tpot32, rel=1e-3)
        # The roofline shows one marker per operator point of the estimate.
        points = driver.execute_script(
            "return document.querySelectorAll('#roofline g.op').length")
        assert points > 10
        assert driver.execute_script("return !!document.getElementById('ridge')")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / "ui-model.png"))
        # Upload a config.json (a smaller model than the catalog default): the page now
        # shows the estimate `ridgeline estimate --model FILE` gives at batch 64.
        cfg = tmp_path / "my-model" / "config.json"
        cfg.parent.mkdir()
        cfg.write_text(json.dumps({
            "model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 16,
            "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 8192,
            "vocab_size": 128256, "tie_word_embeddings": True}))
        driver.find_element("id", "config-file").send_keys(str(cfg))
        _wait(driver, "return document.getElementById('config-note').textContent"
                      ".includes('config.json')")
        want = json.loads(subprocess.run(
            [RIDGELINE, "estimate", "--model", str(cfg), "--batch", "64", "--json"],
            capture_output=True, text=True, check=True).stdout)["result"]["tpot_s"] * 1e3
        _wait(driver, "return Math.abs(Number(document.getElementById('tpot').dataset.value) - "
                      f"{want}) < 1e-9 * {want}")
        # The simulation tab: a small sweep draws latency vs load and marks the knee.
        driver.execute_script("document.getElementById('tab-sim').click();"
                              "document.getElementById('sim-rates').value = '4,16,32';"
                              "document.getElementById('sim-requests').value = '120';"
                              "document.getElementById('sim-run').click();")
        _wait(driver, "return document.querySelector('#sim-ttft .ttft-p99') !== null", 120)
        assert "req/s" in driver.find_element("id", "sim-status").text
        driver.save_screenshot(str(ARTIFACTS / "ui-simulation.png"))
        assert console_errors(driver) == []
    finally:
        driver.quit()

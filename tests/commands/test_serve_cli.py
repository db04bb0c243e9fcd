"""`ridgeline serve` as a command: start, serve, SIGTERM, bad flags."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time

import httpx

from ridgeline.serve.launcher import EmulatorProcess


def _run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ridgeline.cli", "serve", *args],
                          capture_output=True, text=True, timeout=60)


def test_bad_flags_are_one_line_errors() -> None:
    r = _run_cli("--overload-status", "500", "--port", "0")
    assert r.returncode == 2 and r.stderr.startswith("error: --overload-status")
    assert "Traceback" not in r.stderr
    r = _run_cli("--max-model-len", "100000000", "--port", "0")
    assert r.returncode == 2 and r.stderr.startswith("error: --max-model-len")
    r = _run_cli("--model", "no-such-model", "--port", "0")
    assert r.returncode == 2 and r.stderr.startswith("error:")
    assert "Traceback" not in r.stderr


def test_port_in_use_is_an_error() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        r = _run_cli("--port", str(port))
    assert r.returncode == 2 and "--port" in r.stderr and "Traceback" not in r.stderr


def test_process_serves_and_sigterm_ends_streams_cleanly() -> None:
    with EmulatorProcess(model="llama-3.1-8b", hardware="h100-sxm", speed=1.0,
                         extra_args=["--shutdown-grace", "0.5"]) as emu:
        assert emu.base_url.startswith("http://127.0.0.1:")
        models = httpx.get(emu.base_url + "/v1/models").json()
        assert models["data"][0]["id"] == "llama-3.1-8b"
        assert models["data"][0]["max_model_len"] == 131072  # Llama 3.1's context
        metrics = httpx.get(emu.base_url + "/metrics").text
        for name in ("vllm:num_requests_running", "vllm:num_requests_waiting",
                     "vllm:kv_cache_usage_perc", "vllm:num_preemptions_total",
                     "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                     "vllm:time_to_first_token_seconds_bucket",
                     "vllm:inter_token_latency_seconds_bucket",
                     "vllm:e2e_request_latency_seconds_bucket"):
            assert name in metrics

        # A 20,000-token output (~2 minutes emulated at 1x) is in flight at SIGTERM.
        lines: list[str] = []
        first_token = threading.Event()

        def reader() -> None:
            body = {"prompt": "hi", "max_tokens": 20000, "ignore_eos": True, "stream": True}
            with httpx.stream("POST", emu.base_url + "/v1/completions", json=body,
                              timeout=30) as resp:
                for line in resp.iter_lines():
                    if line:
                        lines.append(line)
                        first_token.set()

        thread = threading.Thread(target=reader)
        thread.start()
        assert first_token.wait(20)
        assert emu.proc is not None
        t0 = time.monotonic()
        emu.proc.send_signal(signal.SIGTERM)
        # uvicorn re-raises the signal once shut down, so the exit is "killed by SIGTERM"
        # (what service managers expect), after a clean shutdown.
        assert emu.proc.wait(20) in (0, -signal.SIGTERM)
        thread.join(10)
        assert time.monotonic() - t0 < 10
    assert lines[-1] == "data: [DONE]"
    assert "shutting down" in lines[-2]

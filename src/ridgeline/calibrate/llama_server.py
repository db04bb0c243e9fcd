"""Start and stop a local llama.cpp `llama-server` (project tooling for tests, benchmarks, demo).

The binary comes from `tools/llama_server/build.sh` (built from the llama-cpp-python sdist,
cached outside the checkout) and is found through `$RIDGELINE_LLAMA_SERVER` or that cache.
The server listens on 127.0.0.1 on a free port and is always stopped by its PID (terminate,
wait, kill), also when the body of the `with` block raises:

    from ridgeline.calibrate.gguf_model import ensure_model
    with LlamaServer(find_llama_server(), ensure_model("tiny").gguf_path, n_parallel=4) as srv:
        ...  # srv.base_url, e.g. http://127.0.0.1:41235

Flags chosen for measurement: `-np N` slots sharing `-c N*ctx_per_slot` tokens of KV,
`-t` compute threads (`-tb` the same), `--metrics`, `--no-webui`, prompt-cache RAM off
(`--cache-ram 0`), no KV reuse by shifting (`--cache-reuse 0`), slot choice by prompt
similarity off (`-sps 0`), so unique prompts do no hidden work sharing.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ridgeline.errors import RidgelineError

DEFAULT_VERSION = "0.3.36"  # llama-cpp-python sdist whose vendored llama.cpp is built
ENV_BINARY = "RIDGELINE_LLAMA_SERVER"


def default_binary_path(version: str = DEFAULT_VERSION) -> Path:
    """Where tools/llama_server/build.sh puts the binary."""
    root = Path(os.environ.get("RIDGELINE_CACHE") or Path.home() / ".cache" / "ridgeline")
    return root / "llama.cpp" / version / "build" / "bin" / "llama-server"


def find_llama_server() -> Path | None:
    """`$RIDGELINE_LLAMA_SERVER`, else the build script's cache path; None when neither
    names an executable file."""
    env = os.environ.get(ENV_BINARY)
    for candidate in ([Path(env)] if env else []) + [default_binary_path()]:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class LlamaServer:
    """A llama-server child process; a context manager that always stops it."""

    binary: Path
    model_path: Path
    n_parallel: int = 4
    threads: int = 2
    ctx_per_slot: int = 1024
    alias: str = "ridgeline-llama"
    host: str = "127.0.0.1"
    port: int | None = None
    extra_args: Sequence[str] = ()
    startup_timeout_s: float = 120.0
    log_path: Path | None = None  # server output goes here (default: a file beside the model)
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    log_file: Path | None = field(default=None, init=False)  # the log of the last start

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        return [
            str(self.binary), "-m", str(self.model_path), "--host", self.host,
            "--port", str(self.port), "-np", str(self.n_parallel),
            "-c", str(self.n_parallel * self.ctx_per_slot),
            "-t", str(self.threads), "-tb", str(self.threads),
            "--alias", self.alias, "--metrics", "--no-webui",
            "--cache-ram", "0", "--cache-reuse", "0", "-sps", "0",
            *self.extra_args,
        ]

    def start(self) -> LlamaServer:
        if not Path(self.binary).is_file():
            raise RidgelineError(f"llama-server: binary {str(self.binary)!r} not found (build it "
                                 "with tools/llama_server/build.sh)")
        if not Path(self.model_path).is_file():
            raise RidgelineError(f"llama-server: model {str(self.model_path)!r} not found")
        last = ""
        for _ in range(3):  # a free port can be taken between probing and binding
            if self.port is None or last:
                self.port = free_port(self.host)
            last = self._launch_and_wait()
            if not last:
                return self
        raise RidgelineError(f"llama-server: did not start: {last}")

    def _launch_and_wait(self) -> str:
        log = self.log_path or Path(self.model_path).with_name(
            f"llama-server-{os.getpid()}-{self.port}.log")
        self.log_file = log
        with open(log, "wb") as out:
            # Own session: a stop signal reaches the server and nothing else of ours.
            self.proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = log.read_text(errors="replace").strip().splitlines()[-3:]
                self.stop()
                return f"exited with {self.proc.returncode}: {' | '.join(tail)}"
            if self.health() == 200:
                return ""
            time.sleep(0.1)
        self.stop()
        return f"not healthy after {self.startup_timeout_s:.0f} s (log: {log})"

    def health(self) -> int | None:
        """HTTP status of GET /health (503 while loading), None when nothing answers."""
        try:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=2.0)
            conn.request("GET", "/health")
            status = conn.getresponse().status
            conn.close()
            return status
        except OSError:
            return None

    def stop(self, timeout_s: float = 10.0) -> None:
        """Terminate by PID, wait, then kill; safe to call twice."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(timeout=timeout_s)

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class StreamedCompletion:
    """One streamed /v1/completions request, timed on the client, plus the server's timings."""

    sent_s: float
    event_times_s: list[float]  # perf_counter time of each chunk that carried text
    texts: list[str]
    timings: dict[str, Any]  # llama.cpp `timings` of the final chunk (prompt_ms, predicted_ms…)
    usage: dict[str, Any]
    finish_reason: str | None

    @property
    def ttft_s(self) -> float:
        return self.event_times_s[0] - self.sent_s

    @property
    def decode_s(self) -> float:
        """First to last token on the client: the span llama.cpp's predicted_ms covers, less
        the first token (which the server counts in its prompt phase)."""
        return self.event_times_s[-1] - self.event_times_s[0]


def stream_completion(base_url: str, prompt: str, max_tokens: int, *,
                      model: str = "ridgeline-llama", timeout_s: float = 120.0,
                      extra: dict[str, Any] | None = None) -> StreamedCompletion:
    """POST a streamed completion with ignore_eos and read it chunk by chunk (stdlib only)."""
    host_port = base_url.split("://", 1)[-1].rstrip("/")
    host, _, port = host_port.partition(":")
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}, **(extra or {})}
    conn = http.client.HTTPConnection(host, int(port or 80), timeout=timeout_s)
    sent = time.perf_counter()
    conn.request("POST", "/v1/completions", body=json.dumps(body),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RidgelineError(f"llama-server: HTTP {resp.status}: {resp.read()[:300]!r}")
    times: list[float] = []
    texts: list[str] = []
    timings: dict[str, Any] = {}
    usage: dict[str, Any] = {}
    finish: str | None = None
    for raw in resp:
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            break
        now = time.perf_counter()
        chunk = json.loads(payload)
        for choice in chunk.get("choices") or []:
            if choice.get("text"):
                times.append(now)
                texts.append(choice["text"])
            finish = choice.get("finish_reason") or finish
        timings = chunk.get("timings") or timings
        usage = chunk.get("usage") or usage
    conn.close()
    return StreamedCompletion(sent, times, texts, timings, usage, finish)


@contextlib.contextmanager
def llama_server(model_path: Path, binary: Path | None = None,
                 **kwargs: Any) -> Iterator[LlamaServer]:
    """`with llama_server(path, n_parallel=8) as srv:` -- finds the binary, starts, stops."""
    exe = binary or find_llama_server()
    if exe is None:
        raise RidgelineError(f"llama-server: not found; build it with tools/llama_server/build.sh "
                             f"and set {ENV_BINARY}")
    with LlamaServer(exe, model_path, **kwargs) as srv:
        yield srv


__all__ = ["LlamaServer", "StreamedCompletion", "default_binary_path", "find_llama_server",
           "free_port", "llama_server", "stream_completion"]

"""Server and GPU telemetry during a bench run, sampled by a separate process.

What is sampled, every `--telemetry-interval-ms` (default 500 ms):

* the server's Prometheus `/metrics` (or `--server-metrics URL`): the engine is recognised
  by its metric names (vLLM `vllm:*`, SGLang `sglang:*`, TGI `tgi_*`, llama.cpp
  `llamacpp:*` with `--metrics`), and a few gauges and counters are kept under common names:
  `running`, `waiting`, `kv_usage` (fraction of the KV cache in use), `preemptions_total`,
  `prefix_hits_tokens_total`, `prefix_queries_tokens_total`;
* the local NVIDIA GPUs through NVML (`pynvml`, from `nvidia-ml-py`, extra `gpu`):
  utilization %, memory used, power. Only when the target is on this host (a remote
  server's GPUs are not this machine's); without pynvml or a GPU that is said once.

Why a process: the sampler never runs on the client's event loop or under its GIL, so
scraping and parsing cannot delay the receive path (the output-event timestamps); it costs
the client nothing but a CPU share that it reports itself (`cpu_s` in its last line).
It uses only the standard library, so it starts in tens of milliseconds.

Clock: every sample carries `t_perf_s`, the raw `time.perf_counter()` (CLOCK_MONOTONIC,
shared by every process on the host); the trace header's `t0_perf_counter_s` maps it onto
the trace's timeline. Samples go to a sidecar file next to the trace,
`<trace stem>.telemetry.jsonl`, named in the header's `telemetry.file` (docs/trace.md).

Run by hand: `python -m ridgeline.bench.telemetry --url URL --out FILE --interval-ms 500`
(stops on SIGTERM/SIGINT or when its stdin closes).
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlparse

# engine -> common field -> (metric names, first present wins; how several series combine)
SERVER_METRICS: dict[str, dict[str, tuple[tuple[str, ...], str]]] = {
    "vllm": {
        "running": (("vllm:num_requests_running",), "sum"),
        "waiting": (("vllm:num_requests_waiting",), "sum"),
        "kv_usage": (("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"), "max"),
        "preemptions_total": (("vllm:num_preemptions_total",), "sum"),
        "prefix_hits_tokens_total": (("vllm:prefix_cache_hits_total",), "sum"),
        "prefix_queries_tokens_total": (("vllm:prefix_cache_queries_total",), "sum"),
        # The request-phase histograms' sums and counts: their increase over a run gives
        # the mean queueing, prefill and decode time of its requests (`verify`).
        **{f"{key}_{part}": ((f"vllm:{name}_{part}",), "sum")
           for key, name in (("queue_time_s", "request_queue_time_seconds"),
                             ("prefill_time_s", "request_prefill_time_seconds"),
                             ("decode_time_s", "request_decode_time_seconds"),
                             ("tpot_s", "request_time_per_output_token_seconds"),
                             ("tpot_v0_s", "time_per_output_token_seconds"),
                             ("ttft_s", "time_to_first_token_seconds"),
                             ("e2e_s", "e2e_request_latency_seconds"))
           for part in ("sum", "count")},
    },
    "sglang": {
        "running": (("sglang:num_running_reqs",), "sum"),
        "waiting": (("sglang:num_queue_reqs",), "sum"),
        "kv_usage": (("sglang:token_usage",), "max"),
        "prefix_hit_rate": (("sglang:cache_hit_rate",), "max"),
    },
    "tgi": {
        "running": (("tgi_batch_current_size",), "sum"),
        "waiting": (("tgi_queue_size",), "sum"),
    },
    "llamacpp": {
        "running": (("llamacpp:requests_processing",), "sum"),
        "waiting": (("llamacpp:requests_deferred",), "sum"),
        "kv_usage": (("llamacpp:kv_cache_usage_ratio",), "max"),
        "kv_tokens": (("llamacpp:kv_cache_tokens",), "sum"),
        "prompt_tokens_total": (("llamacpp:prompt_tokens_total",), "sum"),
        "generation_tokens_total": (("llamacpp:tokens_predicted_total",), "sum"),
    },
}
_PREFIXES = (("vllm:", "vllm"), ("sglang:", "sglang"), ("llamacpp:", "llamacpp"),
             ("tgi_", "tgi"))
_WANTED = {name for fields in SERVER_METRICS.values() for names, _ in fields.values()
           for name in names}


@dataclass(frozen=True)
class TelemetryConfig:
    """`enabled` False: `--no-server-metrics`. `url` None: the target's /metrics."""

    enabled: bool = True
    url: str | None = None
    interval_s: float = 0.5
    # Sample this host's GPUs: None = when the target is on this host; False for the
    # emulator, which runs on no GPU (so no "pynvml is not installed" line against it).
    gpu: bool | None = None


def parse_prometheus(text: str) -> dict[str, list[float]]:
    """The samples of the metrics we keep: name -> values of its series (labels dropped).

    Cheap on purpose: a line is split only if its name is one we want, so the histogram
    buckets that make up most of a vLLM page cost a prefix check each.
    """
    out: dict[str, list[float]] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        brace = line.find("{")
        space = line.find(" ")
        end = brace if brace >= 0 and (space < 0 or brace < space) else space
        if end <= 0:
            continue
        name = line[:end]
        if name not in _WANTED:
            continue
        rest = line[line.rindex("}") + 1:] if brace >= 0 and "}" in line else line[end:]
        parts = rest.split()
        if not parts:
            continue
        try:
            value = float(parts[0])
        except ValueError:
            continue
        out.setdefault(name, []).append(value)
    return out


def detect_engine(text: str) -> str | None:
    """Which engine's metric names the page uses (None: none we know)."""
    for line in text.splitlines():
        if line.startswith("# TYPE ") or (line and line[0] != "#"):
            name = line[7:] if line.startswith("# TYPE ") else line
            for prefix, engine in _PREFIXES:
                if name.startswith(prefix):
                    return engine
    return None


def server_sample(engine: str, samples: dict[str, list[float]]) -> dict[str, float]:
    """Common fields from one parsed page."""
    out: dict[str, float] = {}
    for field_name, (names, how) in SERVER_METRICS[engine].items():
        for name in names:
            values = samples.get(name)
            if values:
                out[field_name] = max(values) if how == "max" else sum(values)
                break
    return out


def gpu_sample(nvml: Any, handles: list[Any]) -> list[dict[str, float]]:
    """Utilization %, memory used (bytes) and power (W) of each GPU."""
    out = []
    for i, h in enumerate(handles):
        rec: dict[str, float] = {"gpu": i}
        with contextlib.suppress(Exception):
            rec["util_pct"] = float(nvml.nvmlDeviceGetUtilizationRates(h).gpu)
        with contextlib.suppress(Exception):
            rec["mem_used_bytes"] = float(nvml.nvmlDeviceGetMemoryInfo(h).used)
        with contextlib.suppress(Exception):
            rec["power_w"] = nvml.nvmlDeviceGetPowerUsage(h) / 1000.0
        out.append(rec)
    return out


def open_nvml() -> tuple[Any, list[Any], str]:
    """(pynvml module, device handles, status line); no handles when unavailable."""
    try:
        import pynvml
    except ImportError:
        return None, [], "no GPU telemetry: pynvml is not installed (pip install 'ridgeline[gpu]')"
    try:
        pynvml.nvmlInit()
        n = int(pynvml.nvmlDeviceGetCount())
    except Exception as exc:  # NVMLError_LibraryNotFound, driver not loaded, ...
        return None, [], f"no GPU telemetry: NVML did not start ({type(exc).__name__})"
    if n == 0:
        return None, [], "no GPU telemetry: NVML sees no GPU"
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
    return pynvml, handles, f"GPU telemetry: {n} GPU(s) through NVML"


def _fetch(url: str, timeout_s: float) -> tuple[int, str]:
    """GET url -> (status, body). Plain http is one HTTP/1.0 exchange on a socket (the
    server closes the connection and may not use chunked encoding), which keeps the
    sampler free of urllib's imports (~40 ms of CPU at start-up); https goes through
    urllib."""
    u = urlparse(url)
    if u.scheme != "http":
        import urllib.error
        import urllib.request

        req = urllib.request.Request(url, headers={"Accept": "text/plain"})
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                return resp.status, resp.read().decode("utf-8", errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.code, ""
    path = (u.path or "/") + (f"?{u.query}" if u.query else "")
    host = u.hostname or "127.0.0.1"
    with socket.create_connection((host, u.port or 80), timeout=timeout_s) as sock:
        sock.sendall(f"GET {path} HTTP/1.0\r\nHost: {u.netloc}\r\nAccept: text/plain\r\n"
                     "Connection: close\r\n\r\n".encode())
        chunks = []
        while True:
            data = sock.recv(1 << 16)
            if not data:
                break
            chunks.append(data)
    raw = b"".join(chunks)
    head, _, body = raw.partition(b"\r\n\r\n")
    try:
        status = int(head.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return 0, ""
    return status, body.decode("utf-8", errors="replace")


def is_local(url: str) -> bool:
    host = (urlparse(url).hostname or "").lower()
    return host in ("localhost", "127.0.0.1", "::1", "0.0.0.0") or host.startswith("127.")


def sample_loop(url: str | None, out: TextIO, interval_s: float, gpu: bool,
                stop: threading.Event, status: TextIO | None = None) -> dict[str, Any]:
    """Sample until `stop` is set; returns the final status (also written as the last line).

    The first status (engine detected, GPU state) is written to `status` once known.
    """
    engine: str | None = None
    state: dict[str, Any] = {"type": "telemetry_status", "metrics_url": url}
    if url is not None:
        try:
            code, text = _fetch(url, max(interval_s, 2.0))
        except Exception as exc:  # unreachable: run on without server metrics
            code, text = 0, ""
            state["server"] = f"no server metrics: {url} unreachable ({type(exc).__name__})"
        if code == 200:
            engine = detect_engine(text)
            state["server"] = (f"server metrics: {engine} names at {url}" if engine else
                               f"no server metrics: {url} has no vLLM/SGLang/TGI/llama.cpp "
                               "metric names")
        elif code:
            state["server"] = f"no server metrics: {url} answered HTTP {code}"
    else:
        state["server"] = "no server metrics: off"
    state["engine"] = engine
    nvml, handles, gpu_state = open_nvml() if gpu else (None, [], "no GPU telemetry: the "
                                                          "target uses no GPU of this host")
    state["gpu"] = gpu_state
    state["gpus"] = len(handles)
    if status is not None:
        status.write(json.dumps(state) + "\n")
        status.flush()
    samples = 0
    state["startup_cpu_s"] = round(time.process_time(), 4)
    perf = time.perf_counter
    next_t = perf()

    def scrape(t: float) -> None:
        try:
            code, text = _fetch(url, max(interval_s, 1.0))  # type: ignore[arg-type]
            if code == 200:
                rec = {"type": "telemetry", "source": "server", "t_perf_s": round(t, 6),
                       **server_sample(engine, parse_prometheus(text))}  # type: ignore[arg-type]
                out.write(json.dumps(rec, separators=(",", ":")) + "\n")
        except Exception:  # a missed scrape is a gap in the series, not a failure
            pass

    while not stop.is_set() and (engine or handles):
        t = perf()
        if engine is not None:
            scrape(t)
        for rec in gpu_sample(nvml, handles):
            out.write(json.dumps({"type": "telemetry", "source": "gpu",
                                  "t_perf_s": round(t, 6), **rec}, separators=(",", ":"))
                      + "\n")
        out.flush()
        samples += 1
        next_t += interval_s
        stop.wait(max(next_t - perf(), 0.0))
    if engine is not None:
        # One scrape after the run: counters and histograms then hold every request of it.
        scrape(perf())
        out.flush()
    if nvml is not None:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
    state["samples"] = samples
    state["cpu_s"] = round(time.process_time(), 4)
    state["final"] = True
    out.write(json.dumps(state) + "\n")
    out.flush()
    return state


def _args(argv: list[str]) -> dict[str, Any]:
    """--url URL --out FILE --interval-ms N --gpu (no argparse: start-up cost)."""
    out: dict[str, Any] = {"url": None, "out": None, "interval_ms": 500.0, "gpu": False}
    it = iter(argv)
    for a in it:
        if a == "--gpu":
            out["gpu"] = True
        elif a in ("--url", "--out", "--interval-ms"):
            out[a[2:].replace("-", "_")] = next(it, None)
        else:
            raise SystemExit(f"python -m ridgeline.bench.telemetry: unknown argument {a!r}")
    if not out["out"]:
        raise SystemExit("python -m ridgeline.bench.telemetry: --out FILE is required")
    out["interval_ms"] = float(out["interval_ms"])
    return out


def main(argv: list[str] | None = None) -> int:
    args = _args(sys.argv[1:] if argv is None else argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    def watch_stdin() -> None:  # the parent closing our stdin (or dying) stops us too
        with contextlib.suppress(Exception):
            sys.stdin.read()
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    with open(args["out"], "w", encoding="utf-8") as out:
        sample_loop(args["url"], out, args["interval_ms"] / 1e3, args["gpu"], stop,
                    status=sys.stdout)
    return 0


def sidecar_path(trace_path: str | Path) -> Path:
    """`run.jsonl` -> `run.telemetry.jsonl` (also for `.jsonl.gz`)."""
    p = Path(trace_path)
    name = p.name
    for ext in (".jsonl.gz", ".jsonl", ".json"):
        if name.endswith(ext):
            return p.with_name(name[: -len(ext)] + ".telemetry.jsonl")
    return p.with_name(name + ".telemetry.jsonl")


_SAID: set[str] = set()  # "say so once": a sweep starts a sampler per point


class TelemetrySampler:
    """Starts the sampler process for one run and stops it; `header()` goes in the trace."""

    def __init__(self, cfg: TelemetryConfig, root_url: str, trace_path: str | Path,
                 warn: Any = None) -> None:
        self.cfg = cfg
        self.url = cfg.url or root_url.rstrip("/") + "/metrics"
        self.path = sidecar_path(trace_path)
        self.gpu = is_local(root_url) if cfg.gpu is None else cfg.gpu
        self.warn = warn
        self.proc: Any = None
        self.status: dict[str, Any] = {}
        self.final: dict[str, Any] = {}

    def start(self, timeout_s: float = 5.0) -> None:
        import subprocess

        if not self.cfg.enabled:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "ridgeline.bench.telemetry", "--url", self.url,
               "--out", str(self.path), "--interval-ms", f"{self.cfg.interval_s * 1e3:g}"]
        if self.gpu:
            cmd.append("--gpu")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        line = _readline(self.proc, timeout_s)
        try:
            self.status = json.loads(line) if line else {}
        except json.JSONDecodeError:
            self.status = {}
        if not self.status:
            self.status = {"server": "no server metrics: the sampler did not start",
                           "gpu": "no GPU telemetry: the sampler did not start"}
        for key in ("server", "gpu") if self.gpu else ("server",):
            msg = str(self.status.get(key) or "")
            if msg.startswith("no ") and msg not in _SAID and self.warn is not None:
                _SAID.add(msg)
                self.warn(msg)

    def active(self) -> bool:
        return bool(self.status.get("engine") or self.status.get("gpus"))

    def stop(self) -> None:
        import subprocess

        proc = self.proc
        if proc is None:
            return
        self.proc = None
        with contextlib.suppress(Exception):
            assert proc.stdin is not None
            proc.stdin.close()
        try:
            proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        self.final = read_final_status(self.path)

    def header(self) -> dict[str, Any] | None:
        if not self.cfg.enabled:
            return {"enabled": False}
        return {"file": self.path.name, "interval_ms": self.cfg.interval_s * 1e3,
                "metrics_url": self.url, "engine": self.status.get("engine"),
                "server": self.status.get("server"), "gpu": self.status.get("gpu"),
                "clock": "t_perf_s is raw perf_counter; subtract t0_perf_counter_s"}

    def note(self) -> str | None:
        if not self.final:
            return None
        return (f"telemetry: {self.final.get('samples', 0)} samples, sampler CPU "
                f"{self.final.get('cpu_s', 0.0):.3f} s of which start-up "
                f"{self.final.get('startup_cpu_s', 0.0):.3f} s ({self.path.name})")


def _readline(proc: Any, timeout_s: float) -> str:
    box: list[str] = []

    def read() -> None:
        with contextlib.suppress(Exception):
            assert proc.stdout is not None
            box.append(proc.stdout.readline())

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(timeout_s)
    return box[0] if box else ""


def read_final_status(path: str | Path) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            last = None
            for line in fh:
                if '"telemetry_status"' in line:
                    last = line
        return json.loads(last) if last else {}
    except (OSError, json.JSONDecodeError):
        return {}


if __name__ == "__main__":
    sys.exit(main())

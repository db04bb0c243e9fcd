"""ridgeline bench vs AIPerf on the same server, same load, same run: timestamp error.

AIPerf (PyPI `aiperf`, no torch needed) is installed into a throwaway virtualenv under
/tmp by this script. It needs a tokenizer; `--tokenizer builtin` is tiktoken's
o200k_base, which tiktoken downloads on first use, so the script seeds tiktoken's cache
from the encoding files shipped in the `bpe-openai` wheel (no network beyond PyPI).
`vllm bench serve` is not compared: it needs vllm, whose wheel pulls torch (and CUDA).

Both tools stream C concurrent completions (40 tokens, 50 ms apart) from the scripted test
server, which stamps each chunk with time.perf_counter just before writing it. Both tools
record per-chunk host-clock times (ridgeline: trace event times + t0; AIPerf: the raw
export's `perf_ns`, time.perf_counter_ns), and both send the request id in X-Request-ID,
so each tool's per-chunk error against the server's stamp is computed the same way.

Run: .venv/bin/python benchmarks/speed/bench_client_peer.py
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "bench"))

from test_bench_server import fetch_log, start_subprocess_server  # noqa: E402

from ridgeline.bench.client import EndpointConfig  # noqa: E402
from ridgeline.bench.load import LoadSpec  # noqa: E402
from ridgeline.bench.single_run import BenchConfig, run_bench  # noqa: E402
from ridgeline.workload.lengths import parse_lengths  # noqa: E402

VENV = Path("/tmp/ridgeline-peer-aiperf")
CACHE = Path("/tmp/ridgeline-peer-tiktoken")
TOKENS, ITL_S = 40, 0.05


def ensure_aiperf() -> Path:
    exe = VENV / "bin" / "aiperf"
    if not exe.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(VENV / "bin" / "pip"), "install", "-q", "aiperf"], check=True)
    return exe


def seed_tiktoken_cache() -> None:
    import bpe_openai

    CACHE.mkdir(exist_ok=True)
    data_dir = Path(bpe_openai.__file__).parent / "data"
    for name in ("o200k_base", "cl100k_base"):
        url = f"https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
        key = hashlib.sha1(url.encode()).hexdigest()
        with gzip.open(data_dir / f"{name}.tiktoken.gz") as fh:
            (CACHE / key).write_bytes(fh.read())


def errors_ms(client: dict[str, list[float]], log: dict[str, list[float]]) -> np.ndarray:
    errs = []
    for rid, times in client.items():
        server = log.get(rid, [])
        errs.extend(c - s for c, s in zip(times, server, strict=False))
    return np.asarray(errs) * 1e3


def ridgeline_point(url: str, streams: int, tmp: Path) -> dict[str, list[float]]:
    out = tmp / f"ridgeline-{streams}.jsonl"
    cfg = BenchConfig(
        endpoint=EndpointConfig(url, "steady", extra_body={"ttft_s": 0.01, "itl_s": ITL_S}),
        load=LoadSpec(streams, None, requests=streams), trace_path=out,
        prompt=parse_lengths("fixed:8"), output=parse_lengths(f"fixed:{TOKENS}"))
    run_bench(cfg, warn=lambda m: None)
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    t0 = lines[0]["t0_perf_counter_s"]
    return {r["id"]: [t0 + t for t in r["event_times_s"]] for r in lines
            if r["type"] == "request"}


def aiperf_point(exe: Path, url: str, streams: int, tmp: Path) -> tuple[dict, float]:
    art = tmp / f"aiperf-{streams}"
    shutil.rmtree(art, ignore_errors=True)
    t = time.perf_counter()
    subprocess.run([str(exe), "profile", "--model", "steady", "--url", url,
                    "--endpoint-type", "completions", "--streaming",
                    "--concurrency", str(streams), "--request-count", str(streams),
                    "--synthetic-input-tokens-mean", "8",
                    "--output-tokens-mean", str(TOKENS), "--output-tokens-stddev", "0",
                    "--extra-inputs", "ttft_s:0.01", "--extra-inputs", f"itl_s:{ITL_S}",
                    "--tokenizer", "builtin", "--artifact-dir", str(art),
                    "--export-level", "raw", "--ui-type", "none"],
                   check=True, capture_output=True, env={**os.environ,
                                                         "TIKTOKEN_CACHE_DIR": str(CACHE)})
    wall = time.perf_counter() - t
    out: dict[str, list[float]] = {}
    for line in (art / "profile_export_raw.jsonl").read_text().splitlines():
        rec = json.loads(line)
        rid = rec["metadata"]["x_request_id"]
        times = out[rid] = []
        for resp in rec.get("responses", []):
            for pkt in resp.get("packets", []):
                try:
                    obj = json.loads(pkt.get("value", ""))
                except json.JSONDecodeError:
                    continue
                ch = obj.get("choices") or []
                if ch and ch[0].get("text"):
                    times.append(resp["perf_ns"] / 1e9)
    return out, wall


def main() -> None:
    exe = ensure_aiperf()
    version = subprocess.run([str(VENV / "bin" / "pip"), "show", "aiperf"], capture_output=True,
                             text=True).stdout.split("Version: ")[1].split()[0]
    seed_tiktoken_cache()
    tmp = Path("/tmp/ridgeline-peer")
    tmp.mkdir(exist_ok=True)
    proc, url = start_subprocess_server()
    print(f"AIPerf {version}; {os.cpu_count()} CPUs; {TOKENS} chunks per stream, "
          f"{ITL_S * 1e3:.0f} ms apart")
    print(f"{'streams':>7} {'tool':>9} {'chunks':>7} {'P50 ms':>7} {'P99 ms':>7}")
    try:
        for streams in (1, 64, 256):
            res = {}
            for tool in ("ridgeline", "aiperf"):
                if tool == "ridgeline":
                    client = ridgeline_point(url, streams, tmp)
                else:
                    client, _ = aiperf_point(exe, url, streams, tmp)
                e = errors_ms(client, fetch_log(url)["events"])
                res[tool] = (np.percentile(e, 50), np.percentile(e, 99))
                print(f"{streams:>7} {tool:>9} {e.size:>7} {res[tool][0]:>7.3f} "
                      f"{res[tool][1]:>7.3f}")
            print(f"{'':>7} {'ratio':>9} {'':>7} "
                  f"{res['aiperf'][0] / res['ridgeline'][0]:>7.2f} "
                  f"{res['aiperf'][1] / res['ridgeline'][1]:>7.2f}   (AIPerf / ridgeline)")
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()

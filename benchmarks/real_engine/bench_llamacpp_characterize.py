"""Characterize the memory-bound random Llama on a real llama-server.

    .venv/bin/python benchmarks/real_engine/bench_llamacpp_characterize.py    # 2 fresh starts
    .venv/bin/python benchmarks/real_engine/bench_llamacpp_characterize.py --starts 1 --requests 8

For each fresh server start (`-np 8 -t 2`, the ~400 MB F32 model of
`ridgeline.calibrate.gguf_model.MEMBOUND`): a closed-loop sweep C = 1, 2, 4, 8 through the
installed `ridgeline bench` (fixed prompt and output lengths, --ignore-eos), reading TTFT,
TPOT and E2E P50 from its JSON; then single streamed requests comparing the client's
first-to-last-token time with the server's own `timings.predicted_ms`. Prints one markdown
table per start and the run-to-run difference between starts (the noise floor of any
prediction). Needs llama-server (tools/llama_server/build.sh or $RIDGELINE_LLAMA_SERVER).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ridgeline.bench.dataset import WORDS
from ridgeline.calibrate.gguf_model import ensure_model
from ridgeline.calibrate.llama_server import LlamaServer, find_llama_server, stream_completion

KEYS = ("tpot_p50_ms", "ttft_p50_ms", "e2e_p50_ms", "output_tok_s")


def sweep(base_url: str, model: str, conc: str, args: argparse.Namespace,
          trace: Path) -> list[dict[str, Any]]:
    exe = Path(sys.executable).parent / "ridgeline"
    cmd = [str(exe), "bench", "--base-url", base_url, "--model", model, "--concurrency", conc,
           "--requests", str(args.requests), "--warmup", "1", "--prompt",
           f"fixed:{args.prompt}", "--output", f"fixed:{args.output}", "--ignore-eos",
           "--no-progress", "--json", "--trace", str(trace), "--seed", "0"]
    run = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise SystemExit(f"ridgeline bench failed ({run.returncode}): {run.stderr[-800:]}")
    out = json.loads(run.stdout)
    return out["sweep"] if "sweep" in out else [_row(out)]


def _row(point: dict[str, Any]) -> dict[str, Any]:
    lat = point["analysis"]["latency"]
    row = {f"{k[:-3]}_p50_ms": lat[k]["percentiles"]["p50"]["value"]
           for k in ("ttft_ms", "tpot_ms", "e2e_ms")}
    row["output_tok_s"] = point["analysis"]["throughput"]["output_tok_s"]
    return row


def timings_check(base_url: str, model: str, n: int, prompt_words: int) -> dict[str, float]:
    """Client decode span vs the server's predicted_ms over 3 single requests (medians)."""
    client, server, prompt_ms, ttft = [], [], [], []
    for i in range(3):
        text = " ".join(WORDS[(7 * j + i) % len(WORDS)] for j in range(prompt_words))
        r = stream_completion(base_url, f"{i} {text}", n, model=model)
        assert len(r.texts) == n, (len(r.texts), n)
        client.append(r.decode_s * 1e3)
        # predicted_ms covers n tokens, the client's span n - 1 intervals.
        server.append(r.timings["predicted_ms"] * (n - 1) / n)
        prompt_ms.append(r.timings["prompt_ms"])
        ttft.append(r.ttft_s * 1e3)
    return {"client_decode_ms": statistics.median(client),
            "server_decode_ms": statistics.median(server),
            "server_prompt_ms": statistics.median(prompt_ms),
            "client_ttft_ms": statistics.median(ttft)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--starts", type=int, default=2)
    ap.add_argument("--concurrency", default="1,2,4,8")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--output", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--server-arg", action="append", default=[],
                    help="one more llama-server argument (repeatable), e.g. --server-arg=--poll")
    ap.add_argument("--json-out", default=None)
    args = ap.parse_args()
    exe = find_llama_server()
    if exe is None:
        raise SystemExit("llama-server not found: run tools/llama_server/build.sh and set "
                         "RIDGELINE_LLAMA_SERVER")
    model = ensure_model("membound")
    results: list[dict[str, Any]] = []
    load_before = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() \
        else []
    with tempfile.TemporaryDirectory() as tmp:
        for start in range(args.starts):
            t0 = time.perf_counter()
            with LlamaServer(exe, model.gguf_path, n_parallel=args.parallel,
                             threads=args.threads, ctx_per_slot=args.prompt + args.output + 64,
                             extra_args=args.server_arg) as srv:
                rows = sweep(srv.base_url, srv.alias, args.concurrency, args,
                             Path(tmp) / f"start{start}.jsonl")
                check = timings_check(srv.base_url, srv.alias, args.output, args.prompt)
            results.append({"rows": rows, "timings": check,
                            "wall_s": time.perf_counter() - t0})
    concs = args.concurrency.split(",")
    print(f"model {model.gguf_path.name} ({model.shape.total_params / 1e6:.1f} M params, "
          f"{model.gguf_path.stat().st_size / 1e6:.0f} MB), llama-server {exe}, -np "
          f"{args.parallel} -t {args.threads}; prompt {args.prompt}, output {args.output}, "
          f"{args.requests} requests per point; load average before {' '.join(load_before)}")
    for i, res in enumerate(results):
        print(f"\nstart {i + 1} ({res['wall_s']:.0f} s)\n| C | TPOT P50 ms | TTFT P50 ms | "
              "E2E P50 ms | out tok/s |\n|---|---|---|---|---|")
        for c, row in zip(concs, res["rows"], strict=True):
            print(f"| {c} | {row['tpot_p50_ms']:.1f} | {row['ttft_p50_ms']:.0f} | "
                  f"{row['e2e_p50_ms']:.0f} | {row['output_tok_s']:.1f} |")
        t = res["timings"]
        print(f"single request, medians of 3: client decode {t['client_decode_ms']:.1f} ms vs "
              f"server predicted {t['server_decode_ms']:.1f} ms "
              f"({t['client_decode_ms'] - t['server_decode_ms']:+.1f} ms); client TTFT "
              f"{t['client_ttft_ms']:.1f} ms vs server prompt_ms {t['server_prompt_ms']:.1f}")
    if len(results) >= 2:
        a, b = results[0]["rows"], results[1]["rows"]
        print("\nrun-to-run |difference| between starts 1 and 2\n| C | TPOT | TTFT | E2E |"
              "\n|---|---|---|---|")
        for c, x, y in zip(concs, a, b, strict=True):
            cells = [abs(x[k] - y[k]) / ((x[k] + y[k]) / 2) * 100 for k in KEYS[:3]]
            print(f"| {c} | " + " | ".join(f"{v:.1f}%" for v in cells) + " |")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The whole user flow against a real llama-server, scored against its bars.

    .venv/bin/python benchmarks/real_engine/llamacpp_open_loop_flow.py --runs 2 --out /tmp/i19
    .venv/bin/python benchmarks/real_engine/llamacpp_open_loop_flow.py --runs 3 --chrt --results \
        benchmarks/results/llamacpp_open_loop_flow.json

Each run is what the issue's user did, on a **fresh** server:
1. start `llama-server -m <unseen12> -c 16384 -np 8 -t 1 --metrics --slots` (the user's
   command: the server's own defaults otherwise, e.g. `-sps 0.1`);
2. `ridgeline calibrate engine --base-url ... --config ... --slots 8 --out profile.json`
   with its defaults;
3. the independent client `benchmarks/real_engine/openloop_client.py` (stdlib; 128-token prompts
   with
   BOS, 128 out, 40 requests per point) at closed C = 3, then Poisson at 35% and 80% of the
   profile's capacity (`ridgeline.calibrate.real_loop.capacity_req_s`);
4. `ridgeline verify --calibration profile.json pt-*.jsonl --closed-loop --json` (no
   `--slot-order`: the order calibrate recorded, chained across the points).

The model is `ridgeline-unseen12` (768 hidden, 12 layers, 12 query / 4 KV heads, FFN 2,048,
vocab 1,000, F32, 308 MB): a shape no test or shipped profile uses, kept here on purpose.
Bars: |error| <= 10% on TPOT P50 and E2E P50, <= 20% on TTFT P50, or the
prediction inside the measurement's 95% CI; every row of every run. `--chrt` runs server,
calibrate and client under `chrt -f 1` (the earlier runs on the shared box did).
`--probe-again` reruns calibrate's probes on the same server after the three points and prices
every pure-decode step of each point with both profiles (`llamacpp_step_pricing.price_point`):
if the later probes price the load as well as the earlier ones misprice it, the host drifted
between the probe phase and the points; if both misprice it alike, probes and load differ.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llamacpp_step_pricing import price_point, priced_error  # type: ignore[import-not-found]
from llamacpp_steps import launched_slots  # type: ignore[import-not-found]
from ridgeline.calibrate.llama_server import LlamaServer

ROOT = Path(__file__).resolve().parents[2]
BARS = {"ttft_p50": 0.20, "tpot_p50": 0.10, "e2e_p50": 0.10}
SLOTS = 8
PROMPT_WORDS = 127  # + BOS = 128 prompt tokens with the project's random GGUF vocabulary
OUTPUT_TOKENS = 128
REQUESTS = 40


def row_met(metric: str, error: float, in_ci: bool) -> bool:
    """One verify row against the bar: within its bound, or inside the CI."""
    return abs(error) <= BARS[metric] or in_ci


def unseen_model() -> tuple[Path, Path]:
    from ridgeline.calibrate.gguf_model import GgufShape, ensure_model

    shape = GgufShape("ridgeline-unseen12", hidden_size=768, num_layers=12, num_heads=12,
                      num_kv_heads=4, intermediate_size=2048, vocab_size=1000)
    m = ensure_model(shape)
    return m.gguf_path, m.config_path


@dataclass
class UserServer(LlamaServer):
    """llama-server as the issue's user started it (`-c`, `-np`, `-t`, `--metrics --slots`,
    the server's defaults otherwise: LlamaServer's own command pins `-sps 0` and more),
    optionally under a scheduling prefix (`chrt -f 1`); LlamaServer starts, waits for
    /health and stops it by PID."""

    prefix: tuple[str, ...] = ()

    def command(self) -> list[str]:
        return [*self.prefix, str(self.binary), "-m", str(self.model_path), "--host",
                self.host, "--port", str(self.port), "-c",
                str(self.n_parallel * self.ctx_per_slot), "-np", str(self.n_parallel),
                "-t", str(self.threads), "--metrics", "--slots"]


def run(cmd: list[str], prio: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*prio, *cmd], check=True, text=True, capture_output=True, **kw)


def one_run(k: int, out: Path, binary: Path, prio: list[str], probe_again: bool = False
            ) -> dict[str, Any]:
    from ridgeline.calibrate.real_loop import capacity_req_s
    from ridgeline.sim.calibrated_profile import CalibrationProfile

    gguf, config = unseen_model()
    d = out / f"run{k}"
    d.mkdir(parents=True, exist_ok=True)
    ridgeline = str(Path(sys.executable).with_name("ridgeline"))
    started = time.time()
    with UserServer(binary, gguf, n_parallel=SLOTS, threads=1, ctx_per_slot=2048,
                    log_path=d / "server.log", prefix=tuple(prio)) as srv:
        base = srv.base_url
        t0 = time.monotonic()
        run([ridgeline, "calibrate", "engine", "--base-url", base, "--config", str(config),
             "--slots", str(SLOTS), "--out", str(d / "profile.json")], prio)
        calib_s = time.monotonic() - t0
        prof = CalibrationProfile.load(d / "profile.json")
        cap = capacity_req_s(prof, SLOTS, PROMPT_WORDS + 1, OUTPUT_TOKENS)
        rates = (round(0.35 * cap, 3), round(0.80 * cap, 3))
        client = [sys.executable, str(ROOT / "benchmarks" / "real_engine" / "openloop_client.py"),
                  "--base-url", base, "--requests", str(REQUESTS),
                  "--prompt-words", str(PROMPT_WORDS), "--output", str(OUTPUT_TOKENS)]
        traces = [d / "pt-1-closed3.jsonl", d / f"pt-2-rate{rates[0]}.jsonl",
                  d / f"pt-3-rate{rates[1]}.jsonl"]
        point_args = (["--closed", "3", "--seed", "1"], ["--rate", str(rates[0]), "--seed", "2"],
                      ["--rate", str(rates[1]), "--seed", "3"])
        skips = []  # tasks the server launched before each point (its steps' slot ids)
        for args, trace in zip(point_args, traces, strict=True):
            skips.append(len(launched_slots(d / "server.log")))
            run([*client, *args, "--out", str(trace)], prio)
        again = None
        if probe_again:
            # the same probes on the same server after the load: tells a probe-vs-load cost
            # from a drift of the host between the probe phase and the points
            run([ridgeline, "calibrate", "engine", "--base-url", base, "--config", str(config),
                 "--slots", str(SLOTS), "--out", str(d / "profile-after.json")], prio)
            again = CalibrationProfile.load(d / "profile-after.json")
    res = subprocess.run([ridgeline, "verify", "--calibration", str(d / "profile.json"),
                          *map(str, traces), "--closed-loop", "--json"],
                         text=True, capture_output=True, check=False)
    if res.returncode not in (0, 1):
        raise RuntimeError(f"verify failed: {res.stderr.strip()}")
    report = json.loads(res.stdout)
    rows = []
    for r in report["rows"]:
        if r["metric"] not in BARS:
            continue
        met = row_met(r["metric"], r["error"], bool(r["in_ci"]))
        rows.append({k: r[k] for k in ("point", "metric", "predicted", "measured", "ci_low",
                                       "ci_high", "error", "in_ci")} | {"met": met})
    load = os.getloadavg()
    pricing = {}
    for name, p in (("before", prof), ("after", again)):
        if p is not None:
            pricing[name] = {"decode_step_ms": [round(1e3 * x, 2) for x in p.step_s[:SLOTS]],
                             "steps_priced_error": [
                                 round(priced_error(price_point(t, d / "server.log", p, k)), 4)
                                 for t, k in zip(traces, skips, strict=True)]}
    return {"run": k, "started_unix": started, "calibrate_s": round(calib_s, 1),
            "capacity_req_s": cap, "rates_req_s": rates, "rows": rows,
            "rows_met": sum(r["met"] for r in rows), "loads": report["loads"],
            "load_average_after": load, "dir": str(d),
            "pricing": pricing}


def table(run_result: dict[str, Any]) -> str:
    lines = [f"run {run_result['run']}: capacity {run_result['capacity_req_s']:.3f} req/s -> "
             f"{run_result['rates_req_s']}, calibrate {run_result['calibrate_s']} s, rows met "
             f"{run_result['rows_met']} of {len(run_result['rows'])}",
             "| point | metric | predicted | measured | 95% CI | error | in CI | bar |",
             "|---|---|---:|---:|---|---:|---|---|"]
    for r in run_result["rows"]:
        lines.append(f"| {r['point']} | {r['metric']} | {r['predicted']:.3f} | "
                     f"{r['measured']:.3f} | [{r['ci_low']:.3f}, {r['ci_high']:.3f}] | "
                     f"{r['error']:+.1%} | {'yes' if r['in_ci'] else 'no'} | "
                     f"{'met' if r['met'] else 'NOT met'} |")
    for name, pr in run_result.get("pricing", {}).items():
        lines.append(f"  probes {name} the points: T(1..{SLOTS}) ms {pr['decode_step_ms']}; "
                     "pure-decode steps priced " +
                     " / ".join(f"{e:+.1%}" for e in pr["steps_priced_error"]))
    for x in run_result["loads"]:
        lines.append(f"  {x['point']}: in flight {x['in_flight_predicted']:.2f} predicted vs "
                     f"{x['in_flight_measured']:.2f} measured; decoding "
                     f"{x['decoding_predicted']:.2f} vs {x['decoding_measured']:.2f}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=2, help="fresh server starts, one after another")
    ap.add_argument("--out", default="/tmp/ridgeline-i19-flow", help="work folder")
    ap.add_argument("--chrt", action="store_true", help="run everything under chrt -f 1")
    ap.add_argument("--results", help="append the runs to this JSON file")
    ap.add_argument("--probe-again", action="store_true",
                    help="rerun calibrate's probes after the points, on the same server, and "
                    "price the points' steps with both profiles")
    a = ap.parse_args()
    from ridgeline.calibrate.llama_server import find_llama_server

    binary = find_llama_server()
    if binary is None:
        sys.exit("llama-server not found: run tools/llama_server/build.sh")
    prio = ["chrt", "-f", "1"] if a.chrt and shutil.which("chrt") else []
    out = Path(a.out)
    results = []
    for k in range(1, a.runs + 1):
        r = one_run(k, out, binary, prio, a.probe_again)
        print(table(r), flush=True)
        results.append(r)
    passed = all(r["rows_met"] == len(r["rows"]) for r in results)
    print(f"bar ({a.runs} fresh starts, every row): {'met' if passed else 'NOT met'}")
    if a.results:
        path = Path(a.results)
        old = json.loads(path.read_text()) if path.is_file() else []
        path.write_text(json.dumps(old + results, indent=1) + "\n")
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())

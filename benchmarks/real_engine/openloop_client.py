"""An independent load client for llama-server (Python stdlib only; not ridgeline's bench).

    python benchmarks/real_engine/openloop_client.py --base-url http://127.0.0.1:8080 --closed 3 \
        --requests 40 --out closed3.jsonl
    python benchmarks/real_engine/openloop_client.py --base-url ... --rate 0.4 --requests 40 \
        --out p04.jsonl

One thread and one HTTP connection per request (what a naive user's script does), prompts of
`--prompt-words` words from ridgeline's bench vocabulary (one token each with the project's
random GGUF models, plus BOS), `max_tokens` = `--output`, `ignore_eos`, `cache_prompt: false`,
streamed. Writes a ridgeline JSONL trace (header + one record per request, with llama.cpp's
own `timings` as `engine_timings`), so `ridgeline verify` reads it, and polls llama-server's
`/metrics` before and after the run (llama_decode calls, busy slots per decode, generation
seconds). Used for the independent measurements.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import threading
import time
import urllib.request
from typing import Any

WORDS_FALLBACK = ("the of and to in is was for on that with as by at from his her an were "
                  "are which this be or has had not first one their its new after who they "
                  "two she been other all also time into year only over city some world "
                  "would where later up such used many can state about national out known")


def words() -> list[str]:
    try:
        from ridgeline.bench.dataset import WORDS
        return list(WORDS)
    except ImportError:
        return WORDS_FALLBACK.split()


def metrics(base: str) -> dict[str, float]:
    out: dict[str, float] = {}
    with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("llamacpp:"):
                k, v = line.split()
                out[k.removeprefix("llamacpp:")] = float(v)
    return out


def one_request(host: str, port: int, rid: str, prompt: str, n_out: int, t0: float,
                rec: dict[str, Any]) -> None:
    body = json.dumps({"model": "m", "prompt": prompt, "max_tokens": n_out, "stream": True,
                       "ignore_eos": True, "cache_prompt": False, "temperature": 0.0,
                       "stream_options": {"include_usage": True}})
    rec.update(type="request", id=rid, status="ok", event_times_s=[])
    rec["sent_s"] = time.perf_counter() - t0
    try:
        conn = http.client.HTTPConnection(host, port, timeout=600)
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}")
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            now = time.perf_counter() - t0
            if data == b"[DONE]":
                break
            obj = json.loads(data)
            ch = obj.get("choices") or []
            if ch and ch[0].get("text"):
                rec["event_times_s"].append(now)
            if obj.get("usage"):
                rec["prompt_tokens"] = obj["usage"].get("prompt_tokens")
                rec["output_tokens"] = obj["usage"].get("completion_tokens")
                rec["token_count_source"] = "usage"
            if obj.get("timings"):
                rec["engine_timings"] = obj["timings"]
        conn.close()
    except Exception as exc:  # recorded, not raised: the run goes on
        rec.update(status="error", error_kind=type(exc).__name__, error=str(exc))
    rec["end_s"] = time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--closed", type=int, help="closed loop: this many users")
    g.add_argument("--rate", type=float, help="Poisson arrivals, req/s")
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--prompt-words", type=int, default=127)
    ap.add_argument("--output", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    base = a.base_url.rstrip("/")
    hp = base.split("//", 1)[1]
    host, port = hp.split(":")[0], int(hp.split(":")[1])
    rng = random.Random(a.seed)
    vocab = words()
    prompts = [f"{i} " + " ".join(rng.choice(vocab) for _ in range(a.prompt_words - 1))
               for i in range(a.requests)]
    recs: list[dict[str, Any]] = [{} for _ in prompts]
    m0 = metrics(base)
    t0 = time.perf_counter()
    start_unix = time.time()
    threads: list[threading.Thread] = []
    if a.rate:
        t = 0.0
        for i, p in enumerate(prompts):
            t += rng.expovariate(a.rate)
            delay = t - (time.perf_counter() - t0)
            if delay > 0:
                time.sleep(delay)
            recs[i]["scheduled_s"] = t
            th = threading.Thread(target=one_request, args=(host, port, f"r{i}", p, a.output,
                                                            t0, recs[i]))
            th.start()
            threads.append(th)
        load = {"pattern": "poisson", "arrival": "poisson", "rate_req_s": a.rate}
    else:
        lock = threading.Lock()
        nxt = [0]

        def user() -> None:
            while True:
                with lock:
                    i = nxt[0]
                    nxt[0] += 1
                if i >= len(prompts):
                    return
                one_request(host, port, f"r{i}", prompts[i], a.output, t0, recs[i])

        threads = [threading.Thread(target=user) for _ in range(a.closed)]
        for th in threads:
            th.start()
        load = {"pattern": "closed", "concurrency": a.closed}
    for th in threads:
        th.join()
    m1 = metrics(base)
    d = {k: m1.get(k, 0) - m0.get(k, 0) for k in ("n_decode_total", "tokens_predicted_total",
                                                   "tokens_predicted_seconds_total",
                                                   "prompt_tokens_total",
                                                   "prompt_seconds_total")}
    header = {"type": "header", "schema_version": 1, "tool": "openloop_client",
              "source": "bench", "clock": "perf_counter", "start_time_unix_s": start_unix,
              "engine": "llama.cpp", "load": load,
              "dataset": {"prompt_words": a.prompt_words, "output_tokens": a.output},
              "seed": a.seed, "engine_metrics_delta": d,
              "engine_busy_slots_per_decode": m1.get("n_busy_slots_per_decode")}
    with open(a.out, "w") as fh:
        fh.write(json.dumps(header) + "\n")
        for r in sorted(recs, key=lambda r: r["sent_s"]):
            fh.write(json.dumps(r) + "\n")
    ok = [r for r in recs if r["status"] == "ok"]
    print(json.dumps({"out": a.out, "ok": len(ok), "failed": len(recs) - len(ok),
                      "metrics_delta": d}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

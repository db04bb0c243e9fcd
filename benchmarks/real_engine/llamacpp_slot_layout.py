"""Does a step's cost depend on which llama-server slots its sequences sit in?

    python benchmarks/real_engine/llamacpp_slot_layout.py --base-url http://127.0.0.1:8080 \
        --layouts 0 0,1 0,2 0,1,2 0,2,4 0,1,2,3 0,2,4,6 --reps 2

For each layout: one streamed request per listed slot (pinned with llama-server's `id_slot`),
all sent together (same prompt length, so they decode in lockstep), `max_tokens` = --output;
the decode step is the median gap between a stream's chunks, over all streams (Python stdlib
client, one thread and connection per request). With a per-slot KV cache llama.cpp splits a
batch into one ubatch (one pass over the weights) per run of consecutive slot ids, so on a
memory-bound model 0,2,4 costs about three times 0,1,2. Prints one line per layout and rep.
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import statistics
import threading
import time


def stream(host: str, port: int, slot: int, words: int, n_out: int, out: list) -> None:
    prompt = f"{slot} {time.time_ns()} " + " ".join(["the"] * (words - 2))
    body = json.dumps({"prompt": prompt, "max_tokens": n_out, "stream": True,
                       "ignore_eos": True, "cache_prompt": False, "id_slot": slot,
                       "temperature": 0.0})
    conn = http.client.HTTPConnection(host, port, timeout=600)
    conn.request("POST", "/completion", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    times = []
    while True:
        line = resp.readline()
        if not line:
            break
        if line.startswith(b"data:"):
            obj = json.loads(line[5:])
            if obj.get("content"):
                times.append(time.perf_counter())
            if obj.get("stop"):
                break
    conn.close()
    out.append(times)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--layouts", nargs="+", required=True)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--prompt-words", type=int, default=32)
    ap.add_argument("--output", type=int, default=48)
    a = ap.parse_args()
    hp = a.base_url.split("//", 1)[1].rstrip("/")
    host, port = hp.split(":")[0], int(hp.split(":")[1])
    rows = []
    for rep in range(a.reps):
        for lay in a.layouts:
            slots = [int(x) for x in lay.split(",")]
            res: list = []
            th = [threading.Thread(target=stream, args=(host, port, s, a.prompt_words,
                                                         a.output, res)) for s in slots]
            for t in th:
                t.start()
            for t in th:
                t.join()
            # skip the first gaps (the lockstep forms after the joint prefill)
            gaps = [b - x for t in res for x, b in itertools.pairwise(t[3:])]
            ms = statistics.median(gaps) * 1e3
            runs = sum(1 for i, x in enumerate(sorted(slots))
                       if i == 0 or x != sorted(slots)[i - 1] + 1)
            rows.append({"rep": rep, "slots": slots, "B": len(slots), "runs": runs,
                         "step_ms": ms})
            print(f"rep {rep} slots {lay:>16}: B={len(slots)} runs={runs} step {ms:6.1f} ms",
                  flush=True)
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

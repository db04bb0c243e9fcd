"""Reconstruct llama-server's engine steps under load from client chunk times + server log.

    python benchmarks/real_engine/llamacpp_steps.py TRACE.jsonl SERVER.log [--profile profile.json]

Every streamed chunk is the end of one engine step (llama.cpp sends each slot's token right
after the `llama_decode` that made it), so the pooled chunk times of all streams, clustered
within a few ms, are the step boundaries; a step's duration is the gap to the previous
boundary (only while some stream was already decoding, so no idle time is counted). At each
step: the decoding streams (an event here and an earlier one), the prefills that completed
(first event here: a prompt of P tokens joined this step). The server log (`launch_slot_` /
`release` lines, in task order) gives each request's slot id, so each step's slot set is
known, and with it how llama.cpp splits the step into ubatches: with a per-slot (non-unified)
KV cache, `llama_batch_allocr::split_equal(sequential=true)` puts only *consecutive* slot ids
with equal token counts into one ubatch, so a step of B decodes in r runs of consecutive slots
is r graphs. Prints step time by (B, runs) for pure-decode steps, and for steps with a prefill.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import statistics
from collections import defaultdict
from pathlib import Path

LAUNCH = re.compile(r"launch_slot_: id\s+(\d+) \| task (\d+)")


def launched_slots(log: Path) -> list[int]:
    """Slot of every task the server's log shows launched, in launch (= arrival) order."""
    return [int(m.group(1)) for m in map(LAUNCH.search, log.read_text(errors="replace")
                                         .splitlines()) if m]


def slot_ids(log: Path, n: int, skip: int | None = None) -> list[int]:
    """Slot of each of the last `n` tasks launched, or of the `n` after the first `skip`."""
    ids = launched_slots(log)
    return ids[-n:] if skip is None else ids[skip:skip + n]


def runs_of(slots: list[int]) -> int:
    s = sorted(slots)
    return sum(1 for i, x in enumerate(s) if i == 0 or x != s[i - 1] + 1)


def steps(trace: Path, log: Path | None, tol_s: float = 0.012, skip: int | None = None
          ) -> list[dict]:
    recs = [json.loads(x) for x in trace.read_text().splitlines()]
    reqs = sorted((r for r in recs if r.get("type") == "request" and r.get("status") == "ok"
                   and r.get("event_times_s")), key=lambda r: r["sent_s"])
    slot = slot_ids(log, len(reqs), skip) if log else [-1] * len(reqs)
    ev = sorted((t, i, k) for i, r in enumerate(reqs) for k, t in enumerate(r["event_times_s"]))
    bounds: list[list[tuple[float, int, int]]] = []
    for e in ev:
        if bounds and e[0] - bounds[-1][-1][0] < tol_s:
            bounds[-1].append(e)
        else:
            bounds.append([e])
    out = []
    for prev, cur in itertools.pairwise(bounds):
        dec = [i for _, i, k in cur if k > 0]
        new = [i for _, i, k in cur if k == 0]
        if not dec:
            continue
        t0, t1 = max(t for t, _, _ in prev), min(t for t, _, _ in cur)
        out.append({"t_s": t1, "dt_s": t1 - t0, "B": len(dec), "new": len(new),
                    "prefill_tokens": sum(int(reqs[i].get("prompt_tokens") or 0) for i in new),
                    "runs": runs_of([slot[i] for i in dec + new]) if log else None,
                    "runs_decode": runs_of([slot[i] for i in dec]) if log else None,
                    "ctx_max": max(int(reqs[i].get("prompt_tokens") or 0) + k
                                   for _, i, k in cur),
                    # per decoding stream: its slot and its context (prompt + tokens so far)
                    "decode_slots": [slot[i] for _, i, k in cur if k > 0],
                    "decode_contexts": [int(reqs[i].get("prompt_tokens") or 0) + k
                                        for _, i, k in cur if k > 0]})
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("log", nargs="?")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--skip", type=int, default=None, help="the trace's requests are the "
                    "tasks after the first SKIP in the log (default: the last ones)")
    a = ap.parse_args()
    st = steps(Path(a.trace), Path(a.log) if a.log else None, skip=a.skip)
    if a.json:
        print(json.dumps(st))
        return 0
    pure = defaultdict(list)
    mixed = defaultdict(list)
    for s in st:
        key = (s["B"], s["runs"])
        (mixed if s["new"] else pure)[key].append(s["dt_s"] * 1e3)
    print(f"{a.trace}: {len(st)} steps")
    print("pure decode steps: B, ubatch runs -> n, median ms, IQR ms")
    for k in sorted(pure, key=lambda k: (k[0], k[1] or 0)):
        v = sorted(pure[k])
        q = statistics.quantiles(v, n=4) if len(v) >= 4 else [v[0], 0, v[-1]]
        print(f"  B={k[0]} runs={k[1]}: n={len(v)} median {statistics.median(v):.1f} "
              f"IQR [{q[0]:.1f}, {q[2]:.1f}]")
    print("steps where a prefill completed (B decoding + new prompts): B, runs -> n, median ms")
    for k in sorted(mixed, key=lambda k: (k[0], k[1] or 0)):
        v = mixed[k]
        print(f"  B={k[0]} runs={k[1]}: n={len(v)} median {statistics.median(v):.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

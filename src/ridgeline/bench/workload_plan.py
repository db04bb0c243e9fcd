"""`bench --workload`: the very requests `simulate --workload` simulates, sent to a server.

One conversion: the workload's settings (`workload_settings`) go through the simulator's own
workload builder (`sim.workload.build_workload`, same seed), and its requests become bench's
request plan, in order: the same prompt and output lengths (the output as max_tokens), the
same send times (open loop) or the same closed loop of users, the same shared-prefix groups
(each group one shared text, so a repeated inference-perf prompt is the same text each time
it comes round; a Mooncake or session trace's blocks as its hash_ids say). Nothing about a
workload's format is read here.

>>> from ridgeline.workload.load_test_configs import read_workload
>>> w = read_workload("vllm bench serve --random-input-len 64 --random-output-len 8 "
...                   "--num-prompts 3 --request-rate 4 --burstiness 1e6", seed=0)
>>> r = workload_replay(w, seed=0)
>>> r.prompt_tokens, r.output_tokens, r.users, len(r.times_s)
((64, 64, 64), (8, 8, 8), None, 3)
"""

from __future__ import annotations

import numpy as np

from ridgeline.bench.replay import MOONCAKE_BLOCK_TOKENS, ReplayTrace
from ridgeline.sim.event_loop import Workload
from ridgeline.sim.scenario import DEFAULT_OUTPUT, DEFAULT_PROMPT
from ridgeline.sim.workload import build_workload
from ridgeline.workload.load_test_configs import LoadTestWorkload, workload_settings
from ridgeline.workload.timed_trace_reader import read_timed_trace


def workload_plan(w: LoadTestWorkload, seed: int, requests: int | None = None) -> Workload:
    """The simulator's workload (`sim.event_loop.Workload`) for the first `requests` requests of
    `w`: exactly what `simulate --workload` runs with the same seed."""
    s = workload_settings(w, requests)
    wl, _load, _dataset = build_workload(
        s["requests"], s["prompt"] or DEFAULT_PROMPT, s["output"] or DEFAULT_OUTPUT,
        rate_req_s=None if s["rate"] is None or s["concurrency"] is not None
        else float(s["rate"]), arrival=s["arrival"], concurrency=s["concurrency"],
        prefix_groups=s["prefix_groups"], prefix_tokens=s["prefix_tokens"], seed=seed,
        prompt_from_replay=s["prompt_from_replay"], output_from_replay=s["output_from_replay"])
    return wl


def workload_replay(w: LoadTestWorkload, seed: int, requests: int | None = None,
                    ) -> ReplayTrace:
    """bench's request plan of `w` (see the module docstring)."""
    wl = workload_plan(w, seed, requests)
    n = len(wl)
    times = wl.arrival_s if wl.arrival_s is not None else np.zeros(n)
    group = wl.prefix_group
    ptoks = wl.prefix_tokens
    hashes, block_tokens = None, MOONCAKE_BLOCK_TOKENS
    fmt = w.described.get("format")
    if fmt in ("mooncake", "session"):
        # the file's own blocks: the server's cache sees what the trace says is shared
        tr = read_timed_trace(str(w.described["path"]), field="--workload", fmt=str(fmt))
        hashes = tuple(tr.hash_ids[:n]) if tr.hash_ids is not None else None
        block_tokens = tr.block_tokens
    return ReplayTrace(
        str(w.described.get("path") or w.described.get("origin") or w.source), w.source, 1.0,
        tuple(float(x) for x in times), tuple(int(x) for x in wl.prompt_tokens),
        tuple(int(x) for x in wl.output_tokens), hashes,
        prefix_group=None if group is None else tuple(int(x) for x in group),
        prefix_tokens=None if ptoks is None else tuple(int(x) for x in ptoks),
        users=wl.concurrency, block_tokens=block_tokens,
        workload={**w.described, "summary": w.summary, "requests_sent": n,
                  "max_in_flight": w.max_in_flight})


__all__ = ["workload_plan", "workload_replay"]

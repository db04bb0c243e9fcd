"""Build a simulated workload from the shared length/arrival syntax, reproducibly.

Lengths, arrival gaps and think times draw from separate seeded streams, so the requests of
a rate sweep are the same at every rate (only their spacing changes).

Shared prefixes (`prefix_groups=G, prefix_tokens=P`, as `ridgeline bench`): request i belongs
to group i mod G and its prompt is the P-token group prefix followed by its own sampled
prompt, so it holds P + sample tokens.

>>> wl, load, data = build_workload(3, "fixed:100", "fixed:10", rate_req_s=2.0,
...                                 arrival="constant", seed=0)
>>> wl.arrival_s.tolist(), wl.prompt_tokens.tolist(), load["arrival"]
([0.0, 0.5, 1.0], [100, 100, 100], 'constant')
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ridgeline.errors import RidgelineError
from ridgeline.sim.event_loop import Workload
from ridgeline.workload.arrivals import arrival_times_s, parse_arrival
from ridgeline.workload.lengths import parse_lengths
from ridgeline.workload.streams import workload_streams
from ridgeline.workload.think import parse_think_time


def build_workload(
    n: int,
    prompt: str,
    output: str,
    *,
    rate_req_s: float | None = None,
    arrival: str = "poisson",
    concurrency: int | None = None,
    think_time: str = "0",
    prefix_groups: int = 0,
    prefix_tokens: int = 0,
    seed: int = 0,
    prompt_from_replay: bool = False,
    output_from_replay: bool = False,
) -> tuple[Workload, dict[str, Any], dict[str, Any]]:
    """(workload, header `load` dict, header `dataset` dict).

    `prompt_from_replay` / `output_from_replay`: with a `replay:` arrival of a file that has
    them (BurstGPT, Mooncake), each request's own prompt / output length from the file, in
    its time order, in place of draws from `prompt` / `output` (a zero-token response, a
    failed request in BurstGPT, is asked as one token)."""
    if n < 1:
        raise RidgelineError(f"--requests: got {n}; allowed: >= 1")
    if prefix_groups < 0 or prefix_tokens < 0:
        raise RidgelineError("--prefix-groups/--prefix-tokens: allowed: >= 0")
    if bool(prefix_groups) != bool(prefix_tokens):
        raise RidgelineError("--prefix-groups and --prefix-tokens go together (both > 0)")
    streams = workload_streams(seed)
    s_len, s_arr, s_think = streams.lengths, streams.arrivals, streams.think
    p_dist = parse_lengths(prompt, "--prompt")
    o_dist = parse_lengths(output, "--output")
    prompt_tokens = p_dist.sample(n, s_len)
    output_tokens = o_dist.sample(n, s_len)
    dataset: dict[str, Any] = {"kind": "synthetic", "prompt": p_dist.spec,
                               "output": o_dist.spec}
    group = ptoks = None
    if prefix_groups:
        group = np.arange(n, dtype=np.int64) % prefix_groups
        ptoks = np.full(n, prefix_tokens, dtype=np.int64)
        prompt_tokens = prompt_tokens + prefix_tokens
        dataset.update(prefix_groups=prefix_groups, prefix_tokens=prefix_tokens)
    if concurrency is not None:
        if concurrency < 1:
            raise RidgelineError(f"--concurrency: got {concurrency}; allowed: >= 1")
        think = parse_think_time(think_time)
        if prompt_from_replay or output_from_replay:
            # a closed loop of a load test whose lengths come from a file (`--workload`):
            # the replay spec gives the lengths only
            prompt_tokens, output_tokens = _replay_lengths(
                parse_arrival(arrival, rate_req_s), n, prompt_tokens, output_tokens,
                prompt_from_replay, output_from_replay, prefix_tokens if prefix_groups else 0,
                dataset)
        wl = Workload(prompt_tokens, output_tokens, concurrency=concurrency,
                      think_s=think.sample(n, s_think), prefix_group=group,
                      prefix_tokens=ptoks)
        load: dict[str, Any] = {"pattern": "closed-loop", "concurrency": concurrency,
                                "think_time": think.spec, "requests": n}
        return wl, load, dataset
    proc = parse_arrival(arrival, rate_req_s)
    times = arrival_times_s(proc, n, s_arr)
    if prompt_from_replay or output_from_replay:
        prompt_tokens, output_tokens = _replay_lengths(
            proc, n, prompt_tokens, output_tokens, prompt_from_replay, output_from_replay,
            prefix_tokens if prefix_groups else 0, dataset)
        if prompt_from_replay and not prefix_groups and proc.replay_prefix_group is not None \
                and proc.replay_prefix_tokens is not None:  # both set together, or neither
            # the file's own shared prefixes (Mooncake hash_ids, a load-test config's groups)
            group = np.asarray(proc.replay_prefix_group[:n], dtype=np.int64)
            ptoks = np.minimum(np.asarray(proc.replay_prefix_tokens[:n], dtype=np.int64),
                               prompt_tokens)
            dataset.update(prefix_groups=int(np.unique(group[group >= 0]).size),
                           prefix_source=f"the trace's own ({proc.replay_format})")
    wl = Workload(prompt_tokens, output_tokens, arrival_s=times, prefix_group=group,
                  prefix_tokens=ptoks)
    load = {"pattern": "open-loop", **proc.describe(), "requests": n}
    return wl, load, dataset


def check_context(wl: Workload, step_model: Any) -> None:
    """Refuse a workload with requests longer than the model's context window.

    vLLM rejects a request whose prompt + max_tokens exceeds max_model_len (HTTP 400,
    as `ridgeline serve` does); a simulation that served it would report a run the real
    engine cannot have. Step-time models without a model spec (or a spec without
    max_position_embeddings) are not checked.
    """
    spec = getattr(step_model, "model", None)
    window = int(getattr(spec, "max_position_embeddings", 0) or 0)
    if not window:
        return
    total = np.asarray(wl.prompt_tokens, dtype=np.int64) + np.asarray(wl.output_tokens,
                                                                       dtype=np.int64)
    over = int(np.count_nonzero(total > window))
    if over:
        raise RidgelineError(
            f"--prompt/--output: {over} of {total.size} requests have prompt + output tokens "
            f"above {getattr(spec, 'name', 'the model')}'s context window of {window:,} "
            f"(max_position_embeddings; longest {int(total.max()):,}); allowed: prompt + "
            "output <= the context window (vLLM rejects longer requests)")


def _replay_lengths(proc: Any, n: int, prompt_tokens: np.ndarray, output_tokens: np.ndarray,
                    use_prompt: bool, use_output: bool, prefix: int,
                    dataset: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """The first n requests' own lengths from a replay file (see `build_workload`)."""
    if proc.kind != "replay" or proc.replay_prompt_tokens is None:
        what = ("a replay file with lengths (BurstGPT CSV, Mooncake JSONL)"
                if proc.kind == "replay" else "a replay: arrival")
        raise RidgelineError(f"--prompt/--output: lengths from the trace need {what}; give "
                             "--prompt and --output")
    if len(proc.replay_prompt_tokens) < n:
        raise RidgelineError(f"--requests: {n} asked but the replay file holds "
                             f"{len(proc.replay_prompt_tokens)} requests")
    dataset.update(kind="replay", replay_format=proc.replay_format)
    if use_prompt:
        own = np.maximum(np.asarray(proc.replay_prompt_tokens[:n], dtype=np.int64), 1)
        prompt_tokens = own + prefix
        dataset["prompt"] = f"the trace's own ({proc.replay_format})"
    if use_output:
        raw = np.asarray(proc.replay_output_tokens[:n], dtype=np.int64)
        output_tokens = np.maximum(raw, 1)
        dataset["output"] = f"the trace's own ({proc.replay_format})"
        dataset["zero_output_as_one"] = int(np.count_nonzero(raw == 0))
    return prompt_tokens, output_tokens

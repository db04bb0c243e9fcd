"""`bench --workload FILE|"vllm bench serve ..."`: send the workload `simulate --workload`
simulates (same file, same seed: the same requests, lengths, times and prefix groups).

The option is declared here, apart from bench's other options; the conversion from the
workload to bench's request plan is ridgeline.bench.workload_plan.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from ridgeline.commands.workload_option import flags_given
from ridgeline.errors import RidgelineError

WorkloadOpt = Annotated[
    str | None,
    typer.Option(
        "--workload",
        help="Send a load test's own workload, exactly as `simulate --workload` simulates "
        "it (same --seed): an inference-perf config (or its run folder), a `vllm bench "
        "serve` command line (quoted) or result JSON, a GuideLLM benchmarks file, an AIPerf "
        "profile export, or a timed trace (BurstGPT, Mooncake, Azure, Vidur). Sets the "
        "arrival times, lengths (output as max_tokens, with ignore_eos) and prefix groups; "
        "--requests sends its first N.",
    ),
]

# bench's options that the workload sets (a flag given beside it would silently lose)
REPLACED = ("rate", "concurrency", "arrival", "prompt", "output", "dataset", "prefix_groups",
            "prefix_tokens", "replay", "replay_speed", "multi_turn", "think_time",
            "dataset_name", "dataset_path", "input_len", "output_len", "random_input_len",
            "random_output_len", "random_prefix_len", "random_range_ratio",
            "sharegpt_output_len", "burstiness", "isl_mean", "osl_mean", "data",
            "ramp_up_strategy", "guidellm_profile")


def apply_bench_workload(a: Any) -> None:
    """Read `a.workload` into bench's request plan (`a.workload_trace`), say which workload
    it is on stderr, and set what the run needs: max_tokens honoured (ignore_eos), the
    closed loop's users or vLLM's cap on requests in flight."""
    from ridgeline.bench.workload_plan import workload_replay
    from ridgeline.workload.workload_file import read_workload_file

    if a.workload is None:
        return
    given = flags_given(REPLACED)
    if given:
        raise RidgelineError(f"--workload: sets the load itself; allowed: without "
                             f"{', '.join(given)}")
    w = read_workload_file(a.workload, a.seed)
    trace = workload_replay(w, a.seed, a.requests)
    n = len(trace.times_s)
    typer.echo(w.summary + (f" (the first {n:,} sent: --requests)" if n < w.requests
                            else ""), err=True)
    if not a.ignore_eos:
        a.ignore_eos = True
        typer.echo("workload: output lengths sent as max_tokens with ignore_eos=true, so the "
                   "server generates each request's own length", err=True)
    users = trace.users or w.max_in_flight
    a.concurrency = str(users) if users else None
    if w.max_in_flight and not trace.users:
        typer.echo(f"workload: at most {w.max_in_flight} requests in flight "
                   "(--max-concurrency), as vLLM's benchmark sends them", err=True)
    a.workload_trace = trace


__all__ = ["WorkloadOpt", "apply_bench_workload"]

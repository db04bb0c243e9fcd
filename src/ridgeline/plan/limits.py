"""Refuse a plan whose simulations cannot fit in memory, before any of them starts.

Each worker holds one whole simulation at a time: per request its columns, every output
token's event time, the trace built from them and the metrics' per-request and per-event
arrays. Measured on llama-3.1-8b runs (fixed 1,200-token prompts; 20,000-40,000 requests,
20-1,000 output tokens; peak RSS by `resource.getrusage`): about 500 bytes per request plus
34 bytes per output token. The estimate below adds 40% to both. `workers` simulations run at
once, and plan's largest run is the screen's or the verification's, whichever is longer.

>>> simulation_bytes(1_000_000, 200.0) / 1e9
10.3
"""

from __future__ import annotations

import math
import resource

from ridgeline.errors import RidgelineError
from ridgeline.plan.execute import default_workers
from ridgeline.plan.space import PlanRequest
from ridgeline.sim.scenario import (
    CAPACITY_PROBE_MAX_USERS,
    CAPACITY_PROBE_MIN_REQUESTS,
    CAPACITY_PROBE_REQUESTS_PER_USER,
    CAPACITY_PROBE_USERS_PER_SLOT,
)
from ridgeline.workload.lengths import parse_lengths

BYTES_PER_REQUEST = 700
BYTES_PER_OUTPUT_TOKEN = 48
MEMORY_SHARE = 0.8          # of what is available: the parent, the OS and others need some

# The combined size of a search, checked before it starts (simulated requests run about 1e5
# a second per core: 5e7 is hours of screening; the default search is 48,000 requests and
# 1,536 engine instances).
MAX_SCREEN_REQUESTS = 50_000_000
MAX_REPLICA_INSTANCES = 1_000_000  # as `simulate --replicas` allows in one run


def simulation_bytes(requests: int, mean_output_tokens: float) -> float:
    """Peak bytes of one simulation of `requests` requests (estimate, see the docstring)."""
    return requests * (BYTES_PER_REQUEST + BYTES_PER_OUTPUT_TOKEN * mean_output_tokens)


def available_memory_bytes() -> float:
    """What this process may still allocate: MemAvailable (Linux), capped by an address-space
    or data limit (ulimit -v, prlimit) less what the process already maps; inf if unknown."""
    avail = math.inf
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    avail = float(line.split()[1]) * 1024.0
                    break
    except OSError:
        pass
    for lim in (resource.RLIMIT_AS, getattr(resource, "RLIMIT_DATA", None)):
        if lim is None:
            continue
        soft = resource.getrlimit(lim)[0]
        if soft != resource.RLIM_INFINITY and soft > 0:
            avail = min(avail, max(0.0, float(soft) - _mapped_bytes()))
    return avail


def _mapped_bytes() -> float:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmSize:"):
                    return float(line.split()[1]) * 1024.0
    except OSError:
        pass
    return 0.0


def _gb(x: float) -> str:
    return f"{x / 1e9:,.1f} GB" if x < 1e12 else f"{x / 1e12:,.1f} TB"


MEAN_TOKENS_SAMPLE = 200_000


def mean_output_tokens(spec: str, seed: int = 0) -> float:
    """Mean output tokens per request of a length spec as the workload draws them (rounded
    and clipped): exact for fixed lengths, else the mean of 200,000 draws (< 0.5% off)."""
    import numpy as np

    dist = parse_lengths(spec, "--output")
    if dist.kind == "fixed":
        return float(dist.sample(1, np.random.default_rng(seed))[0])
    return float(dist.sample(MEAN_TOKENS_SAMPLE, np.random.default_rng(seed)).mean())


def check_plan_fits(req: PlanRequest, workers: int | None, verify_requests: int,
                    available_bytes: float | None = None) -> None:
    """RidgelineError (one line) when `workers` simulations of the plan's longest run do not
    fit in memory; it says how many requests would."""
    n_workers = max(1, workers or default_workers())
    mean_out = mean_output_tokens(req.output, req.seed)
    budget = (available_memory_bytes() if available_bytes is None else available_bytes)
    budget *= MEMORY_SHARE
    per_request = simulation_bytes(1, mean_out)
    fit = int(budget / n_workers / per_request) if math.isfinite(budget) else None
    for field, n in (("--requests", req.requests), ("--verify-requests", verify_requests)):
        if fit is not None and n > fit:
            need = n_workers * simulation_bytes(n, mean_out)
            raise RidgelineError(
                f"{field}: {n:,} requests per simulation need about {_gb(need)} of memory "
                f"({n_workers} worker{'s' if n_workers > 1 else ''} at once, "
                f"{mean_out:.0f} output tokens per request); {_gb(budget)} can be used: at "
                f"most {fit:,} requests per simulation fit"
                + (" (fewer --workers fit more)" if n_workers > 1 else ""))
    check_plan_size(req)
    # The chosen configuration's capacity probe runs alone: at most this many requests.
    probe = probe_requests_bound(req)
    if math.isfinite(budget) and simulation_bytes(probe, mean_out) > budget:
        raise RidgelineError(
            f"--max-replicas: the capacity probe of a {req.max_replicas}-replica "
            f"configuration with max_num_seqs {max(req.max_num_seqs)} may need {probe:,} "
            f"requests, about {_gb(simulation_bytes(probe, mean_out))} of memory; "
            f"{_gb(budget)} can be used (fewer replicas or a smaller --max-num-seqs fit)")


def check_plan_size(req: PlanRequest) -> None:
    """The combined size of the search, before it starts: simulations x requests each,
    and the engine instances they hold (replicas), not each option alone."""
    sims = req.screening_simulations
    work = sims * req.requests
    if work > MAX_SCREEN_REQUESTS:
        raise RidgelineError(
            f"--extra-replicas/--requests: {sims:,} screening simulations (configurations"
            f" x {min(req.extra_replicas + 1, req.max_replicas):,} replica counts x "
            f"layouts) x {req.requests:,} requests = {work:,} simulated requests; "
            f"allowed: at most {MAX_SCREEN_REQUESTS:,} (fewer --extra-replicas, "
            "candidates or --requests)")
    widest = min(req.max_replicas, req.max_gpus // max(1, min(req.tp)))
    instances = sims * widest
    if instances > MAX_REPLICA_INSTANCES:
        raise RidgelineError(
            f"--max-replicas/--max-gpus: {sims:,} screening simulations of up to "
            f"{widest:,} replicas = {instances:,} engine instances; allowed: at most "
            f"{MAX_REPLICA_INSTANCES:,} (a smaller --max-replicas or --max-gpus)")



def probe_requests_bound(req: PlanRequest) -> int:
    """The most requests `probe_capacity` can use for a configuration of this space."""
    users = min(CAPACITY_PROBE_MAX_USERS, math.ceil(
        CAPACITY_PROBE_USERS_PER_SLOT * max(req.max_num_seqs) * req.max_replicas) + 8)
    return max(CAPACITY_PROBE_MIN_REQUESTS, CAPACITY_PROBE_REQUESTS_PER_USER * users)


__all__ = ["available_memory_bytes", "check_plan_fits", "check_plan_size",
           "probe_requests_bound",
           "simulation_bytes"]

"""`plan`: the cheapest configuration meeting the SLOs, with headroom, the Pareto frontier and
why each rejected family failed.

Headroom ("never plan near saturation", seed 003): every candidate is simulated at the
planning rate lambda x (1 + headroom) (default headroom 0.2), so the chosen configuration
still meets the SLOs with 20% more traffic than asked. For the chosen one the result also
reports its utilization rho = lambda / capacity (capacity from `probe_capacity`: every request
at t=0) and its distance from the knee of its latency-vs-load curve (`rate_sweep`).

Choice among passing candidates: lowest USD per hour, then fewer GPUs, then a fixed order
(family, mixed before P/D, larger batch caps) so the answer is deterministic.

Cost per million output tokens = USD per hour / (output tokens/s at lambda x 3600) x 1e6.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ridgeline.plan.execute import Outcome, evaluate, run_all
from ridgeline.plan.space import Candidate, PlanRequest, Space, enumerate_space

PARETO_TOLERANCE = 0.005   # a point must beat the frontier by 0.5% (simulation noise)


@dataclass
class Evaluated:
    candidate: Candidate
    outcome: Outcome

    @property
    def tok_s_per_gpu(self) -> float:
        return self.outcome.output_tok_s / self.candidate.gpus

    @property
    def tok_s_per_user(self) -> float:
        t = self.outcome.tpot_p50_ms
        return 1e3 / t if t and math.isfinite(t) and t > 0 else math.nan

    def row(self) -> dict[str, Any]:
        c = self.candidate
        sc = c.scenario
        return {"config": c.label, "family": c.family, "gpus": c.gpus,
                "usd_per_hour": c.usd_per_hour, "tp": sc.tp, "ep": sc.ep,
                "max_num_seqs": sc.max_num_seqs,
                "max_num_batched_tokens": sc.max_num_batched_tokens,
                "chunked_prefill": sc.chunked_prefill, "replicas": sc.replicas,
                "pd": list(sc.pd) if sc.pd else None,
                "tok_s_per_gpu": _clean(self.tok_s_per_gpu),
                "tok_s_per_user": _clean(self.tok_s_per_user),
                **{f"sim_{k}": v for k, v in self.outcome.to_dict().items()}}


def _clean(x: float) -> float | None:
    return x if isinstance(x, (int, float)) and math.isfinite(x) else None


@dataclass
class Headroom:
    rate_req_s: float
    capacity_req_s: float
    utilization: float
    knee_rate_req_s: float | None
    distance_from_knee: float | None     # knee / lambda - 1
    output_tok_s: float
    usd_per_million_output_tokens: float
    attainment_at_rate: float

    def to_dict(self) -> dict[str, Any]:
        return {k: _clean(v) if isinstance(v, float) else v for k, v in self.__dict__.items()}


@dataclass
class PlanResult:
    request: PlanRequest
    space_size: int
    simulated: list[Evaluated]
    pruned: list[tuple[Candidate | None, str, str]]
    families: list[str]
    chosen: Evaluated | None = None
    headroom: Headroom | None = None
    pareto: list[Evaluated] = field(default_factory=list)
    rejected_families: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        r = self.request
        return {
            "rate_req_s": r.rate_req_s, "planning_rate_req_s": r.planning_rate_req_s,
            "headroom": r.headroom, "slos": list(r.slos), "goodput_target": r.goodput_target,
            "space_size": self.space_size, "simulated": len(self.simulated),
            "pruned": len(self.pruned),
            "chosen": self.chosen.row() if self.chosen else None,
            "chosen_headroom": self.headroom.to_dict() if self.headroom else None,
            "pareto": [e.row() for e in self.pareto],
            "rejected_families": self.rejected_families,
            "rules": {
                "headroom": f"SLOs must hold at lambda x (1 + {r.headroom:g}) = "
                            f"{r.planning_rate_req_s:g} req/s",
                "choice": "lowest USD/hour, then fewer GPUs",
                "pareto": "SLO-meeting configurations not beaten on both output tok/s per "
                          "GPU and tok/s per user (1 / median TPOT)",
            },
        }

    def markdown(self) -> str:
        r = self.request
        lines = [f"# ridgeline plan: {r.rate_req_s:g} req/s, SLOs {', '.join(r.slos)} for "
                 f">= {r.goodput_target:.0%} of requests", ""]
        lines.append(f"Searched {self.space_size} configurations: {len(self.pruned)} pruned "
                     f"analytically, {len(self.simulated)} simulated at "
                     f"{r.planning_rate_req_s:g} req/s (headroom {r.headroom:.0%}).")
        lines.append("")
        if self.chosen:
            c = self.chosen.candidate
            lines += [f"**Cheapest meeting the SLOs:** {c.label}", "",
                      f"- {c.gpus} GPUs, ${c.usd_per_hour:.2f}/hour; SLO attainment "
                      f"{self.chosen.outcome.attainment:.1%} at {r.planning_rate_req_s:g} req/s"]
            h = self.headroom
            if h:
                knee = (f"{h.knee_rate_req_s:.3g} req/s ({h.distance_from_knee:+.0%} from the "
                        "asked rate)" if h.knee_rate_req_s and h.distance_from_knee is not None
                        else "— (not found)")
                lines += [f"- ${h.usd_per_million_output_tokens:.3f} per million output "
                          f"tokens at {r.rate_req_s:g} req/s (SLO attainment "
                          f"{h.attainment_at_rate:.1%})",
                          f"- utilization {h.utilization:.0%} (capacity "
                          f"{h.capacity_req_s:.3g} req/s), knee at {knee}"]
            lines.append("")
        else:
            lines += ["**No configuration in the space meets the SLOs.**", ""]
        if self.pareto:
            lines += ["## Pareto frontier (SLO-meeting)", "",
                      "| config | GPUs | $/hour | tok/s per GPU | tok/s per user |",
                      "|---|---:|---:|---:|---:|"]
            for e in self.pareto:
                lines.append(f"| {e.candidate.label} | {e.candidate.gpus} | "
                             f"{e.candidate.usd_per_hour:.2f} | {e.tok_s_per_gpu:.1f} | "
                             f"{e.tok_s_per_user:.1f} |")
            lines.append("")
        if self.rejected_families:
            lines += ["## Rejected families", ""]
            lines += [f"- {f}: {why}" for f, why in self.rejected_families.items()]
        return "\n".join(lines) + "\n"


def pareto_front(points: list[Evaluated]) -> list[Evaluated]:
    """Points not dominated on (tok/s per GPU, tok/s per user), both higher-better; sorted by
    tok/s per GPU descending."""
    ok = [e for e in points if math.isfinite(e.tok_s_per_gpu) and math.isfinite(e.tok_s_per_user)]
    ok.sort(key=lambda e: (-e.tok_s_per_gpu, -e.tok_s_per_user))
    front: list[Evaluated] = []
    best_user = -math.inf
    for e in ok:
        if e.tok_s_per_user > best_user * (1 + PARETO_TOLERANCE):
            front.append(e)
            best_user = e.tok_s_per_user
    return front


def _family_reasons(space: Space, simulated: list[Evaluated], target: float,
                    passing_families: set[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for fam in space.families:
        if fam in passing_families:
            continue
        sims = [e for e in simulated if e.candidate.family == fam]
        if sims:
            best = max(sims, key=lambda e: (e.outcome.attainment
                                            if math.isfinite(e.outcome.attainment) else -1))
            o = best.outcome
            why = (f"simulated {len(sims)} configurations; best SLO attainment "
                   f"{o.attainment:.1%} < {target:.0%} ({best.candidate.label}: TTFT P99 "
                   f"{o.ttft_p99_ms:.0f} ms, TPOT P99 {o.tpot_p99_ms:.1f} ms"
                   f"{f', {o.rejected} rejected' if o.rejected else ''})")
            if o.error:
                why = f"simulation error: {o.error}"
            out[fam] = why
            continue
        reasons = [why for _, f, why in space.pruned if f == fam]
        counts: dict[str, int] = {}
        for why in reasons:
            key = why.split(":")[0]
            counts[key] = counts.get(key, 0) + 1
        first = {why.split(":")[0]: why for why in reversed(reasons)}
        out[fam] = "; ".join(f"{first[k]}" + (f" (x{n})" if n > 1 else "")
                             for k, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    return out


def plan(req: PlanRequest, *, workers: int | None = None, ray_address: str | None = None,
         progress: Callable[[str, int, int], None] | None = None,
         headroom_details: bool = True) -> PlanResult:
    """Search the space of `req` (see the module docstring). `progress(stage, done, total)`."""
    req.validate()
    if progress:
        progress("pruning the space analytically", 0, 1)
    space = enumerate_space(req)
    if progress:
        progress("pruning the space analytically", 1, 1)
    cands = sorted(space.candidates, key=Candidate.sort_key)
    total = len(cands)
    if progress:
        progress("simulating candidates", 0, total)
    outcomes = run_all([c.scenario for c in cands], workers=workers, ray_address=ray_address,
                       progress=(lambda d: progress("simulating candidates", d, total))
                       if progress else None)
    simulated = [Evaluated(c, o) for c, o in zip(cands, outcomes, strict=True)]
    passing = [e for e in simulated if e.outcome.meets(req.goodput_target)]
    result = PlanResult(req, space.size, simulated, space.pruned, space.families)
    result.pareto = pareto_front(passing)
    result.rejected_families = _family_reasons(space, simulated, req.goodput_target,
                                               {e.candidate.family for e in passing})
    if passing:
        result.chosen = passing[0]      # cands are sorted by cost
        if headroom_details:
            result.headroom = headroom_of(result.chosen.candidate, req, progress)
    return result


def headroom_of(cand: Candidate, req: PlanRequest,
                progress: Callable[[str, int, int], None] | None = None) -> Headroom:
    """Utilization, knee and cost of a configuration at the asked rate."""
    from ridgeline.sim.scenario import Built, probe_capacity, rate_sweep
    from ridgeline.sim.sweep import sweep_rates

    sc = cand.scenario.replace(rate_req_s=req.rate_req_s)
    built = Built.of(sc)
    at_rate = evaluate(sc)
    cap = probe_capacity(sc, built)
    rates = sweep_rates(cap)
    if progress:
        progress("knee of the chosen configuration", 0, len(rates) * sc.requests)
    sweep = rate_sweep(sc, rates, req.goodput_target, built=built, keep_runs=False,
                       progress=(lambda d: progress("knee of the chosen configuration", d,
                                                    len(rates) * sc.requests))
                       if progress else None)
    knee = sweep.knee_rate_req_s
    tok_s = at_rate.output_tok_s
    return Headroom(
        rate_req_s=req.rate_req_s, capacity_req_s=cap, utilization=req.rate_req_s / cap,
        knee_rate_req_s=knee,
        distance_from_knee=(knee / req.rate_req_s - 1.0) if knee else None,
        output_tok_s=tok_s,
        usd_per_million_output_tokens=cand.usd_per_hour / (tok_s * 3600.0) * 1e6
        if tok_s > 0 else math.inf,
        attainment_at_rate=at_rate.attainment)


def plot_pareto(result: PlanResult, path: str) -> None:
    """Scatter of every simulated configuration, the frontier as a line (needs matplotlib)."""
    from ridgeline.errors import RidgelineError

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RidgelineError("--plot: matplotlib is not installed (pip install "
                             "matplotlib)") from None
    fig, ax = plt.subplots(figsize=(7, 5))
    t = result.request.goodput_target
    for ok, color, label in ((True, "tab:blue", "meets SLOs"),
                             (False, "tab:gray", "misses SLOs")):
        pts = [e for e in result.simulated if e.outcome.meets(t) == ok]
        ax.scatter([e.tok_s_per_user for e in pts], [e.tok_s_per_gpu for e in pts],
                   s=14, c=color, label=label, alpha=0.7)
    if result.pareto:
        ax.plot([e.tok_s_per_user for e in result.pareto],
                [e.tok_s_per_gpu for e in result.pareto], "-o", c="tab:red", ms=4,
                label="Pareto frontier")
    if result.chosen:
        ax.scatter([result.chosen.tok_s_per_user], [result.chosen.tok_s_per_gpu], marker="*",
                   s=160, c="gold", edgecolors="k", label="cheapest meeting SLOs", zorder=5)
    ax.set_xlabel("output tokens/s per user (1 / median TPOT)")
    ax.set_ylabel("output tokens/s per GPU")
    ax.set_title(f"ridgeline plan at {result.request.planning_rate_req_s:g} req/s")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


__all__ = ["Evaluated", "Headroom", "PlanResult", "headroom_of", "pareto_front", "plan",
           "plot_pareto"]

"""`plan`: the cheapest configuration meeting the SLOs, verified with long runs, with headroom,
the Pareto frontier and why each rejected family failed.

Stages (each a set of jobs on `execute.Jobs`, so Ctrl-C stops within a second):

1. screen: every candidate the analytic pruning leaves is simulated with `--requests`
   requests (seed `--seed`) at the planning rate lambda x (1 + headroom) ("never plan near
   saturation"; default headroom 0.2). A short run cannot confirm a 99% target, so
   the screen only rules out: a candidate stays when the upper end of the 95% Wilson interval
   of its attainment reaches the target (`Outcome.could_meet`).
2. verify (`ridgeline.plan.recheck`): the survivors, cheapest first, three at a time, are
   simulated again at the planning rate with `verify_requests(target)` requests (6,086 for
   99%) on two new seeds; the choice is the cheapest whose every run has the lower end of its
   95% interval >= the target. Verification goes on until the first that passes, every
   survivor at its price (ties), and two more (the runners-up, tied ones counting) have
   been verified, or the survivors run out.
3. details of the chosen one: capacity mu (`sim.scenario_run.probe_capacity`: the saturation
   throughput of a closed loop, the definition `simulate --rate sweep` and `bench --rate
   sweep` use), utilization rho = lambda / mu, and the knee of its latency-vs-load curve by
   simulate's rule (`sim.sweep.sweep_rates(mu)`, `summarize_sweep`: the highest rate whose
   P99 TTFT <= 3x its value at the lowest rate), each rate with the requests a P99 within
   +-0.5 points needs (1,522).

Choice among verified candidates: lowest USD per hour; at that price the most headroom, as
SLO slack: 1 - (the judged percentile of an SLO's metric) / (its bound), for the tightest
SLO in the worse of the two runs (a configuration at 60% of its TTFT bound beats one at 95%);
then fewer GPUs, then a fixed order (family, mixed before P/D, larger batch caps) so the
answer is deterministic and does not depend on the number of workers.

Cost per million output tokens at the offered load: USD per hour / (3600 x lambda x mean
output tokens per request / 1e6); the mean is that of the output-length distribution the
workload samples (`mean_output_tokens`), not a short run's measured throughput (which is
the offered rate plus sampling noise).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ridgeline.errors import RidgelineError
from ridgeline.jsonsafe import finite_or_none
from ridgeline.plan.execute import Interrupted, Jobs, Outcome, capacity, evaluate, sweep_point
from ridgeline.plan.families import FamilyRow, family_rows, markdown_table, rejected
from ridgeline.plan.launch import launch_commands

# The workload's mean output (plan/limits.py sizes memory with it too), re-exported.
from ridgeline.plan.limits import check_plan_fits, mean_output_tokens
from ridgeline.plan.recheck import Verification, verify, verify_seeds
from ridgeline.plan.space import Candidate, PlanRequest, enumerate_space
from ridgeline.sim.scenario_run import summarize_sweep
from ridgeline.sim.sweep import sweep_rates
from ridgeline.theory.stats import samples_for_rank_precision

if TYPE_CHECKING:
    from ridgeline.plan.launch import Launch

PARETO_TOLERANCE = 0.005   # a point must beat the frontier by 0.5% (simulation noise)
VERIFY_BATCH = 3           # candidates verified per round (in parallel)
RUNNERS_UP = 2             # candidates verified after the winner
KNEE_PERCENTILE = 99.0     # the knee rule judges P99 TTFT ...
KNEE_HALF_WIDTH_PCT = 0.5  # ... so each sweep rate gets the samples for +-0.5 points


@dataclass
class Evaluated:
    candidate: Candidate
    outcome: Outcome                          # the screening run
    verification: Verification | None = None

    @property
    def tok_s_per_gpu(self) -> float:
        return self.outcome.output_tok_s / self.candidate.gpus

    @property
    def tok_s_per_user(self) -> float:
        t = self.outcome.tpot_p50_ms
        return 1e3 / t if t and math.isfinite(t) and t > 0 else math.nan

    def verified(self, target: float) -> bool | None:
        """True/False once verified, None before."""
        return None if self.verification is None else self.verification.meets(target)

    def meets(self, target: float) -> bool:
        """What the Pareto frontier and the plot count as meeting the SLOs: verification's
        verdict where there is one, else the screen's."""
        v = self.verified(target)
        return self.outcome.meets(target) if v is None else v

    def row(self) -> dict[str, Any]:
        c = self.candidate
        sc = c.scenario
        return {"config": c.label, "family": c.family, "engine": sc.engine, "gpus": c.gpus,
                "usd_per_hour": c.usd_per_hour, "tp": sc.tp, "ep": sc.ep,
                "attn_dp": sc.attn_dp,
                "max_num_seqs": sc.max_num_seqs,
                "max_num_batched_tokens": sc.max_num_batched_tokens,
                "chunked_prefill": sc.chunked_prefill, "replicas": sc.replicas,
                "pd": list(sc.pd) if sc.pd else None,
                "pools": _pools_of(sc),
                "tok_s_per_gpu": finite_or_none(self.tok_s_per_gpu),
                "tok_s_per_user": finite_or_none(self.tok_s_per_user),
                **{f"sim_{k}": v for k, v in self.outcome.to_dict().items()},
                "verification": self.verification.to_dict() if self.verification else None}


def _pools_of(sc: Any) -> dict[str, Any] | None:
    pools = sc.pools()
    return None if pools is None else {p.role: p.describe() for p in pools}


@dataclass
class Details:
    """The chosen configuration at the asked rate: capacity, utilization, knee, cost."""

    rate_req_s: float
    planning_rate_req_s: float
    capacity_req_s: float
    utilization: float                   # rate / capacity
    planning_utilization: float          # planning rate / capacity
    knee_rate_req_s: float | None
    distance_from_knee: float | None     # knee / rate - 1
    sweep_rates_req_s: list[float]
    sweep_requests: int
    sweep_seed: int
    mean_output_tokens: float
    offered_output_tok_s: float          # rate x mean output tokens
    usd_per_million_output_tokens: float

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in self.__dict__.items():
            out[k] = finite_or_none(v) if isinstance(v, float) else v
        return out


def usd_per_million_output_tokens(usd_per_hour: float, rate_req_s: float,
                                  output_tokens_per_request: float) -> float:
    """USD per hour / output tokens per hour at the offered load, per million tokens."""
    tok_per_hour = 3600.0 * rate_req_s * output_tokens_per_request
    return usd_per_hour / tok_per_hour * 1e6 if tok_per_hour > 0 else math.inf


@dataclass
class PlanResult:
    request: PlanRequest
    space_size: int
    simulated: list[Evaluated]
    pruned: list[tuple[Candidate | None, str, str]]
    families: list[str]
    verify_requests: int = 0
    verify_seeds: tuple[int, ...] = ()
    chosen: Evaluated | None = None
    details: Details | None = None
    verified: list[Evaluated] = field(default_factory=list)
    pareto: list[Evaluated] = field(default_factory=list)
    rejected_families: dict[str, str] = field(default_factory=dict)
    family_table: list[FamilyRow] = field(default_factory=list)   # every family, its verdict
    interrupted: str | None = None       # the stage a Ctrl-C stopped: a partial result

    def to_dict(self) -> dict[str, Any]:
        r = self.request
        return {
            "partial": self.interrupted is not None,
            "warnings": [w for w in (r.verify_requests_warning,) if w],
            "interrupted_during": self.interrupted,
            "rate_req_s": r.rate_req_s, "planning_rate_req_s": r.planning_rate_req_s,
            "headroom": r.headroom, "slos": list(r.slos), "goodput_target": r.goodput_target,
            "space_size": self.space_size, "simulated": len(self.simulated),
            "pruned": len(self.pruned),
            "screen": {"requests": r.requests, "seed": r.seed},
            "verification": {"requests": self.verify_requests,
                             "seeds": list(self.verify_seeds),
                             "rate_req_s": r.planning_rate_req_s,
                             "candidates": [e.row() for e in self.verified]},
            "chosen": self.chosen.row() if self.chosen else None,
            "chosen_details": self.details.to_dict() if self.details else None,
            "pareto": [e.row() for e in self.pareto],
            "chosen_on_pareto": self.chosen_on_pareto,
            "rejected_families": self.rejected_families,
            "families": [r.to_dict() for r in self.family_table],
            "launch": self.launch().to_dict() if self.chosen else None,
            "rules": {
                "headroom": f"SLOs must hold at lambda x (1 + {r.headroom:g}) = "
                            f"{r.planning_rate_req_s:g} req/s",
                "screen": f"{r.requests} requests, seed {r.seed}: kept when the upper end "
                          "of the 95% Wilson interval of the attainment reaches the target",
                "verification": f"{self.verify_requests} requests on each of seeds "
                                f"{', '.join(map(str, self.verify_seeds))}: passes when "
                                "every run's 95% lower end (Wilson, with the design effect "
                                "of correlated requests) >= the target",
                "choice": "the cheapest verified (lowest USD/hour); at one price every "
                          "survivor is verified and the most SLO slack wins (1 - the "
                          "judged percentile / the bound, tightest SLO, worst run), then "
                          "fewer GPUs",
                "capacity": "saturation throughput of a closed loop (probe_capacity, as "
                            "simulate --rate sweep)",
                "knee": "highest swept rate with P99 TTFT <= 3x its value at the lowest rate "
                        "(simulate's rule)",
                "usd_per_million_output_tokens": "USD/hour / (3600 x rate x mean output "
                                                 "tokens / 1e6)",
                "pareto": "configurations meeting the target (verification's verdict where "
                          "verified, else the screen's) not beaten on both output tok/s per "
                          "GPU and tok/s per user (1 / median TPOT)",
            },
        }

    def markdown(self, launch: bool = True) -> str:
        """The report; `launch=False` leaves out the launch command (the CLI prints it
        unwrapped, after the rest, so that it can be copied)."""
        r = self.request
        t = r.goodput_target
        lines = [f"# ridgeline plan: {r.rate_req_s:g} req/s, SLOs {', '.join(r.slos)} for "
                 f">= {t:.0%} of requests", ""]
        if self.interrupted is not None:
            lines += [f"**PARTIAL RESULT: interrupted (Ctrl-C) while {self.interrupted}.** "
                      "What follows is only what had finished.", ""]
        if r.verify_requests_warning:
            lines += [f"**Warning:** {r.verify_requests_warning}.", ""]
        seeds = ", ".join(map(str, self.verify_seeds))
        verified = (f"the cheapest survivors verified with {self.verify_requests:,} requests "
                    f"on seeds {seeds}" if self.verified or self.interrupted is None else
                    "verification had not finished a candidate")
        lines.append(f"Searched {self.space_size} configurations: {len(self.pruned)} pruned "
                     f"analytically, {len(self.simulated)} screened with {r.requests:,} "
                     f"requests (seed {r.seed}) at {r.planning_rate_req_s:g} req/s "
                     f"(headroom {r.headroom:.0%}); {verified}.")
        lines.append("")
        if self.chosen:
            c = self.chosen.candidate
            v = self.chosen.verification
            lines += [f"**Cheapest meeting the SLOs:** {c.label}", "",
                      f"- {c.gpus} GPU{'s' if c.gpus > 1 else ''}, "
                      f"${c.usd_per_hour:.2f}/hour"]
            if v is not None:
                lines += [f"- SLO attainment at {r.planning_rate_req_s:g} req/s, verified: "
                          f"{run.text()}" for run in v.runs]
            d = self.details
            if d:
                knee = (f"{d.knee_rate_req_s:.3g} req/s ({d.distance_from_knee:+.0%} from the "
                        "asked rate)" if d.knee_rate_req_s and d.distance_from_knee is not None
                        else "— (no knee within the swept range)")
                lines += [f"- ${d.usd_per_million_output_tokens:.3f} per million output "
                          f"tokens at {r.rate_req_s:g} req/s x {d.mean_output_tokens:.4g} "
                          "output tokens per request",
                          f"- capacity {d.capacity_req_s:.3g} req/s (closed-loop saturation); "
                          f"utilization {d.utilization:.0%} at {r.rate_req_s:g} req/s, "
                          f"{d.planning_utilization:.0%} at {r.planning_rate_req_s:g}",
                          f"- knee (TTFT p99 <= 3x) at {knee} ({len(d.sweep_rates_req_s)} rates x "
                          f"{d.sweep_requests:,} requests, seed {d.sweep_seed})"]
            lines.append("")
            if launch and self.interrupted is None:
                lines += [f"**Launch it** ({self.launch().engine}; every setting the plan "
                          "simulated):", "", "```sh", self.launch().text(), "```", ""]
        elif self.interrupted is None:
            lines += ["**No configuration in the space meets the SLOs.**", ""]
        if self.verified:
            lines += ["## Verified (cheapest first)", "",
                      "| config | $/hour | screen | verification | SLO slack | meets |",
                      "|---|---:|---:|---|---:|---|"]
            for e in self.verified:
                ver = e.verification
                slack = ver.slack(t) if ver else math.nan
                lines.append(f"| {e.candidate.label} | {e.candidate.usd_per_hour:.2f} | "
                             f"{e.outcome.attainment:.1%} | "
                             f"{'; '.join(_short(x) for x in ver.runs) if ver else '—'} | "
                             f"{f'{slack:.0%}' if math.isfinite(slack) else '—'} | "
                             f"{'yes' if e.verified(t) else 'no'} |")
            lines.append("")
        if self.pareto:
            lines += ["## Pareto frontier (met the target: verified *, else in the screen)",
                      "", "| config | GPUs | $/hour | tok/s per GPU | tok/s per user |",
                      "|---|---:|---:|---:|---:|"]
            rows = list(self.pareto)
            if self.chosen is not None and not self.chosen_on_pareto:
                rows.append(self.chosen)     # on the plot too: say where it stands
            for e in rows:
                mark = " *" if e.verified(t) else ""
                if e is self.chosen:
                    mark += (" (chosen)" if self.chosen_on_pareto else
                             " (chosen; off the frontier: the cheapest, not the fastest)")
                lines.append(f"| {e.candidate.label}{mark} | {e.candidate.gpus} | "
                             f"{e.candidate.usd_per_hour:.2f} | {e.tok_s_per_gpu:.1f} | "
                             f"{e.tok_s_per_user:.1f} |")
            lines.append("")
        if self.family_table:
            lines += markdown_table(self.family_table)
        return "\n".join(lines) + "\n"

    @property
    def chosen_on_pareto(self) -> bool:
        return self.chosen is not None and any(e is self.chosen for e in self.pareto)

    def launch(self) -> Launch:
        """The chosen configuration's engine command line(s) (ridgeline.plan.launch)."""
        assert self.chosen is not None
        return launch_commands(self.chosen.candidate.scenario)


def _short(run: Any) -> str:
    if run.error:
        return f"error: {run.error}"
    return (f"{run.attainment:.2%} [{run.ci_low:.2%}, {run.ci_high:.2%}] "
            f"(seed {run.seed})")


class PlanInterrupted(KeyboardInterrupt):
    """Ctrl-C during `plan`: `result` is what had finished, marked partial."""

    def __init__(self, result: PlanResult) -> None:
        super().__init__("interrupted")
        self.result = result


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


def plan(req: PlanRequest, *, workers: int | None = None, ray_address: str | None = None,
         progress: Callable[[str, int, int], None] | None = None,
         headroom_details: bool = True) -> PlanResult:
    """Search the space of `req` (see the module docstring). `progress(stage, done, total)`.

    Ctrl-C raises `PlanInterrupted` (a KeyboardInterrupt) holding the partial result, after
    the worker processes are stopped."""

    req.validate()
    n_verify = req.verify_request_count
    seeds = verify_seeds(req.seed)
    check_plan_fits(req, workers, n_verify)
    result = PlanResult(req, 0, [], [], [], n_verify, seeds)
    stage = "pruning the space analytically"
    cands: list[Candidate] = []
    try:
        with Jobs(workers, ray_address) as jobs:
            if progress:
                progress(stage, 0, 1)
            space = enumerate_space(req)
            result.space_size, result.pruned = space.size, space.pruned
            result.families = space.families
            if progress:
                progress(stage, 1, 1)
            cands = sorted(space.candidates, key=Candidate.sort_key)
            stage = f"screening {len(cands)} candidates"
            outcomes = _map(jobs, evaluate, [c.scenario for c in cands], stage, progress)
            result.simulated = [Evaluated(c, o) for c, o in zip(cands, outcomes, strict=True)]
            stage = "verifying the cheapest candidates"
            _verify(jobs, result, stage, progress)
            result.pareto = pareto_front([e for e in result.simulated
                                          if e.meets(req.goodput_target)])
            result.family_table = family_rows(result)
            result.rejected_families = rejected(result.family_table)
            if result.chosen is not None and headroom_details:
                stage = "measuring the chosen configuration's capacity and knee"
                result.details = _details(jobs, result.chosen.candidate, req, stage,
                                          progress)
    except KeyboardInterrupt as exc:
        pending: set[str] = set()
        if isinstance(exc, Interrupted) and stage.startswith("screening"):
            result.simulated = [Evaluated(c, o) for c, o in zip(cands, exc.done, strict=True)
                                if o is not None]
            pending = {c.family for c, o in zip(cands, exc.done, strict=True) if o is None}
        result.interrupted = stage
        if stage.startswith(("screening", "verifying")):
            result.chosen = None      # a cheaper candidate may not have been verified yet
        if result.families and not result.family_table:
            # every family still gets its row: decided (pruned, screened out) or unfinished
            result.family_table = family_rows(result, pending)
        raise PlanInterrupted(result) from None
    return result


def _map(jobs: Jobs, fn: Callable[[Any], Any], items: list[Any], stage: str,
         progress: Callable[[str, int, int], None] | None) -> list[Any]:
    total = len(items)
    if progress:
        progress(stage, 0, total)
    return jobs.map(fn, items, (lambda d: progress(stage, d, total)) if progress else None)


def _verify(jobs: Jobs, result: PlanResult, stage: str,
            progress: Callable[[str, int, int], None] | None) -> None:
    """Stage 2 (module docstring): verify survivors cheapest first until the first that
    passes, every survivor at its price (ties), and RUNNERS_UP more are verified; the
    choice is the tied passing candidate with the most SLO slack."""
    req = result.request
    target = req.goodput_target
    queue = [e for e in result.simulated if e.outcome.could_meet(target)]
    price: float | None = None      # $/h of the first candidate that passed
    after = 0                        # verified after it (tied or dearer)
    start = 0
    while start < len(queue):
        if price is None:
            batch = queue[start:start + VERIFY_BATCH]
        else:
            ties = 0
            while start + ties < len(queue) and _same_price(queue[start + ties], price):
                ties += 1
            batch = queue[start:start + max(ties, RUNNERS_UP - after)]
        if not batch:
            break
        start += len(batch)
        scs = [e.candidate.scenario.replace(requests=result.verify_requests, seed=s,
                                            rate_req_s=req.planning_rate_req_s)
               for e in batch for s in result.verify_seeds]
        runs = _map(jobs, verify, scs, stage, progress)
        k = len(result.verify_seeds)
        for i, e in enumerate(batch):
            e.verification = Verification(tuple(runs[i * k:(i + 1) * k]))
            result.verified.append(e)
            if price is not None:
                after += 1
            elif e.verification.meets(target):
                price = e.candidate.usd_per_hour
        if price is not None and after >= RUNNERS_UP and (
                start >= len(queue) or not _same_price(queue[start], price)):
            break
    if price is not None:
        tied = [e for e in result.verified if _same_price(e, price) and e.verified(target)]
        result.chosen = min(tied, key=lambda e: _headroom_key(e, target))


def _same_price(e: Evaluated, usd_per_hour: float) -> bool:
    return round(e.candidate.usd_per_hour, 9) == round(usd_per_hour, 9)


def _headroom_key(e: Evaluated, target: float) -> tuple[Any, ...]:
    """Among configurations at one price: the most SLO slack in verification first, then
    fewer GPUs, then the search's fixed order."""
    assert e.verification is not None
    slack = e.verification.slack(target)
    return (-(slack if math.isfinite(slack) else -math.inf), e.candidate.gpus,
            e.candidate.sort_key())


def _details(jobs: Jobs, cand: Candidate, req: PlanRequest, stage: str,
             progress: Callable[[str, int, int], None] | None) -> Details:
    """Stage 3: capacity, utilization and knee of `cand` (simulate's definitions), cost."""
    seed = verify_seeds(req.seed)[0]
    sc = cand.scenario.replace(seed=seed)
    cap = float(_map(jobs, capacity, [sc], stage, progress)[0])
    rates = sweep_rates(cap) if math.isfinite(cap) and cap > 0 else []
    n_knee = max(req.requests, samples_for_rank_precision(KNEE_PERCENTILE, KNEE_HALF_WIDTH_PCT))
    points = _map(jobs, sweep_point, [sc.replace(rate_req_s=r, requests=n_knee)
                                        for r in rates], stage, progress)
    sweep = summarize_sweep(points, req.slos, req.goodput_target)
    knee = sweep.knee_rate_req_s
    mean_out = mean_output_tokens(req.output, req.seed)
    return Details(
        rate_req_s=req.rate_req_s, planning_rate_req_s=req.planning_rate_req_s,
        capacity_req_s=cap, utilization=req.rate_req_s / cap if cap > 0 else math.nan,
        planning_utilization=req.planning_rate_req_s / cap if cap > 0 else math.nan,
        knee_rate_req_s=knee,
        distance_from_knee=(knee / req.rate_req_s - 1.0) if knee else None,
        sweep_rates_req_s=list(rates), sweep_requests=n_knee, sweep_seed=seed,
        mean_output_tokens=mean_out, offered_output_tok_s=req.rate_req_s * mean_out,
        usd_per_million_output_tokens=usd_per_million_output_tokens(
            cand.usd_per_hour, req.rate_req_s, mean_out))


def plot_pareto(result: PlanResult, path: str) -> None:
    """Scatter of every simulated configuration, the frontier as a line (needs matplotlib)."""
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
        pts = [e for e in result.simulated
               if e.meets(t) == ok]
        ax.scatter([e.tok_s_per_user for e in pts], [e.tok_s_per_gpu for e in pts],
                   s=14, c=color, label=label, alpha=0.7)
    if result.pareto:
        ax.plot([e.tok_s_per_user for e in result.pareto],
                [e.tok_s_per_gpu for e in result.pareto], "-o", c="tab:red", ms=4,
                label="Pareto frontier")
    if result.chosen:
        ch = result.chosen
        ax.scatter([ch.tok_s_per_user], [ch.tok_s_per_gpu], marker="*", s=160, c="gold",
                   edgecolors="k", label="chosen: cheapest meeting SLOs", zorder=5)
        ax.annotate(f"chosen, ${ch.candidate.usd_per_hour:.2f}/h", (ch.tok_s_per_user,
                    ch.tok_s_per_gpu), textcoords="offset points", xytext=(8, 6), fontsize=8)
    ax.set_xlabel("output tokens/s per user (1 / median TPOT)")
    ax.set_ylabel("output tokens/s per GPU")
    ax.set_title(f"ridgeline plan at {result.request.planning_rate_req_s:g} req/s")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


__all__ = ["Details", "Evaluated", "PlanInterrupted", "PlanResult",
           "mean_output_tokens",
           "pareto_front", "plan", "plot_pareto", "usd_per_million_output_tokens"]

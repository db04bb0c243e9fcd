"""Every family `plan` searched, with the verdict on it: chosen, or why it lost.

A family is (model, GPU, weights, TP, EP). Each gets one row: the configuration its verdict
rests on (its price, GPUs and shape) and one of

- `chosen`: it holds the choice;
- `tie`: a configuration of it meets the SLOs (verified) at the chosen price, with less SLO
  slack than the chosen one;
- `cost`: it has a configuration that passed the screen (or verification) but costs more
  per hour than the chosen one, so it was not needed (dearer survivors are not verified);
- `slo`: every configuration simulated missed the target (in the screen, or in
  verification), or an SLO floor (an idle replica alone misses it) pruned them;
- `memory`: the weights (and workspace) do not fit;
- `capacity`: the throughput ceiling or Little's law needs more replicas or GPUs than the
  limits allow;
- `invalid`: the engine cannot run it (e.g. TP does not divide the heads);
- `unfinished`: the search was interrupted before it was decided.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ridgeline.plan.search import Evaluated, PlanResult
    from ridgeline.plan.space import Candidate

VERDICTS = ("chosen", "tie", "cost", "slo", "memory", "capacity", "invalid", "unfinished")
LOST = ("slo", "memory", "capacity", "invalid")     # no configuration of it could serve


@dataclass(frozen=True)
class FamilyRow:
    family: str
    verdict: str
    reason: str
    usd_per_hour: float | None = None     # of the configuration the verdict rests on
    gpus: int | None = None
    shape: str | None = None              # "replicas=2" or "pd=1:1"
    config: str | None = None
    detail: str = ""                      # the whole story (`reason` is the table's short one)

    def to_dict(self) -> dict[str, Any]:
        usd = round(self.usd_per_hour, 6) if self.usd_per_hour is not None else None
        return {"family": self.family, "verdict": self.verdict, "reason": self.reason,
                "detail": self.detail or self.reason, "usd_per_hour": usd,
                "gpus": self.gpus, "shape": self.shape, "config": self.config}


def shape_of(c: Candidate) -> str:
    return c.shape


def _row(family: str, verdict: str, reason: str, c: Candidate | None = None,
         detail: str = "") -> FamilyRow:
    if c is None:
        return FamilyRow(family, verdict, reason, detail=detail)
    return FamilyRow(family, verdict, reason, c.usd_per_hour, c.gpus, shape_of(c), c.label,
                     detail)


def pruned_kind(reason: str) -> str:
    """The verdict a pruning reason gives (space.py's reasons start with their rule)."""
    if reason.startswith("memory"):
        return "memory"
    if reason.startswith(("throughput ceiling", "Little's law", "tp=")):
        return "capacity"
    if reason.startswith("SLO floor"):
        return "slo"
    return "invalid"


def family_rows(result: PlanResult, pending: set[str] | frozenset[str] = frozenset()
                ) -> list[FamilyRow]:
    """One row per family of the space, in the order searched. `pending`: families with
    configurations a Ctrl-C left unscreened (their verdict is `unfinished`)."""
    target = result.request.goodput_target
    chosen = result.chosen
    rows = []
    for fam in result.families:
        sims = [e for e in result.simulated if e.candidate.family == fam]
        if fam in pending:
            rows.append(_row(fam, "unfinished", f"{len(sims)} configurations screened before "
                             "the search was interrupted; the rest were not"))
            continue
        rows.append(_family(fam, sims, result, target, chosen))
    return rows


def _family(fam: str, sims: list[Evaluated], result: PlanResult, target: float,
            chosen: Evaluated | None) -> FamilyRow:
    if chosen is not None and chosen.candidate.family == fam:
        v = chosen.verification
        slack = v.slack(target) if v is not None else math.nan
        return _row(fam, "chosen", "cheapest meeting the SLOs (verified"
                    + (f"; SLO slack {slack:.0%}" if math.isfinite(slack) else "") + ")",
                    chosen.candidate)
    passing = [e for e in sims if e.verified(target)]
    alive = [e for e in sims if e.outcome.could_meet(target)]
    waiting = [e for e in alive if e.verification is None]
    failed = [e for e in alive if e.verification is not None and not e.verified(target)]
    if passing:
        best = passing[0]
        if chosen is None:
            return _row(fam, "unfinished", "passed verification; the search was interrupted "
                        "before a choice", best.candidate)
        p, q = best.candidate.usd_per_hour, chosen.candidate.usd_per_hour
        if round(p, 9) == round(q, 9):
            a = best.verification.slack(target) if best.verification else math.nan
            b = chosen.verification.slack(target) if chosen.verification else math.nan
            return _row(fam, "tie", f"meets the SLOs (verified) at the chosen price, with "
                        f"less SLO slack: {_pct(a)} < {_pct(b)}", best.candidate)
        return _row(fam, "cost", f"meets the SLOs (verified); dearer than the chosen "
                    f"${q:.2f}/hour", best.candidate)
    if waiting:
        best = waiting[0]
        o = best.outcome
        if chosen is None:
            return _row(fam, "unfinished", "passed the screen; not verified before the "
                        "search stopped", best.candidate)
        note = f"; {len(failed)} cheaper failed verification" if failed else ""
        return _row(fam, "cost", f"passed the screen ({o.attainment:.1%}); dearer than the "
                    f"chosen ${chosen.candidate.usd_per_hour:.2f}/hour, so not verified{note}",
                    best.candidate,
                    f"{best.candidate.label} passed the screen ({o.attainment:.1%} of "
                    f"{o.judged_requests or o.requests} requests) at "
                    f"${best.candidate.usd_per_hour:.2f}/hour, dearer than the chosen "
                    f"${chosen.candidate.usd_per_hour:.2f}/hour, so not verified{note}")
    if failed:
        best = max(failed, key=lambda e: e.verification.ci_low
                   if e.verification and math.isfinite(e.verification.ci_low) else -1.0)
        assert best.verification is not None
        runs = ", ".join(f"{r.attainment:.1%}" for r in best.verification.runs)
        return _row(fam, "slo", f"{len(failed)} passed the screen, failed verification "
                    f"(best: {runs} < {target:.0%} with 95% confidence)", best.candidate,
                    f"{len(failed)} passed the screen but failed verification; best "
                    f"{best.candidate.label}: {best.verification.text()}")
    if sims:
        best = max(sims, key=lambda e: (e.outcome.attainment
                                        if math.isfinite(e.outcome.attainment) else -1))
        o = best.outcome
        if o.error:
            return _row(fam, "invalid", f"simulation error: {o.error}", best.candidate)
        tail = (f"TTFT P99 {o.ttft_p99_ms:.0f} ms, TPOT P99 {o.tpot_p99_ms:.1f} ms"
                f"{f', {o.rejected} rejected' if o.rejected else ''}")
        return _row(fam, "slo", f"best of {len(sims)} screened: {o.attainment:.1%} < "
                    f"{target:.0%} ({tail})", best.candidate,
                    f"screened {len(sims)} configurations; best SLO attainment "
                    f"{o.attainment:.1%} < {target:.0%} ({best.candidate.label}: {tail})")
    reasons = [why for _, f, why in result.pruned if f == fam]
    if not reasons:
        return _row(fam, "unfinished", "not screened before the search stopped")
    counts: dict[str, int] = {}
    for why in reasons:
        key = why.split(":")[0]
        counts[key] = counts.get(key, 0) + 1
    first = {why.split(":")[0]: why for why in reversed(reasons)}
    ordered = sorted(counts.items(), key=lambda kv: -kv[1])
    text = "; ".join(f"{first[k]}" + (f" (x{n})" if n > 1 else "") for k, n in ordered)
    top = first[ordered[0][0]]
    return _row(fam, pruned_kind(top), _short_pruned(top), detail=text)


def _short_pruned(reason: str) -> str:
    """The table's form of a pruning reason: memory as needed/usable GiB per GPU."""
    import re

    m = re.search(r"needs ([\d.]+) GiB/GPU \(weights ([\d.]+) GiB\) of ([\d.]+) GiB usable",
                  reason)
    if reason.startswith("memory") and m:
        return (f"does not fit: {m.group(1)} GiB per GPU needed (weights {m.group(2)}), "
                f"{m.group(3)} usable")
    return reason


def _pct(x: float) -> str:
    return f"{x:.0%}" if math.isfinite(x) else "—"


def rejected(rows: list[FamilyRow]) -> dict[str, str]:
    """Families no configuration of which could serve the load: family -> why (whole)."""
    return {r.family: r.detail or r.reason for r in rows if r.verdict in LOST}


def markdown_table(rows: list[FamilyRow]) -> list[str]:
    """The compact table: one row per family, the price, GPUs and shape of the
    configuration its verdict rests on (the cheapest that served, else the closest miss)."""
    out = ["## Every family searched", "",
           "($/hour, GPUs and shape: the family's cheapest configuration that passed, "
           "else its closest miss.)", "",
           "| family | $/hour | GPUs | shape | verdict | why |",
           "|---|---:|---:|---|---|---|"]
    for r in rows:
        usd = f"{r.usd_per_hour:.2f}" if r.usd_per_hour is not None else "—"
        out.append(f"| {r.family} | {usd} | {r.gpus if r.gpus is not None else '—'} | "
                   f"{r.shape or '—'} | {r.verdict} | {r.reason.replace('|', '/')} |")
    out.append("")
    return out


__all__ = ["LOST", "VERDICTS", "FamilyRow", "family_rows", "markdown_table", "pruned_kind",
           "rejected", "shape_of"]

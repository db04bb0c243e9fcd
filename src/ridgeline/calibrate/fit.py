"""Fit a calibration profile from measured steps (docs/calibration.md).

Input: `StepSample`s, each a regime of engine steps of one size, measured many times (a
decode probe at batch B gives steps of B tokens reading B x context pairs; a prefill probe
of P prompt tokens gives a step of P tokens and P(P+1)/2 pairs). Output: T(n) per probed
token count and the seconds per attention pair, so that

    step_s = T(tokens) + per_pair_s * pairs.

per_pair_s comes from samples of the same token count at different contexts (the context
probe): the least-squares slope of step_s on pairs, pooled over token counts, floored at 0.
T(n) is then the median of (step_s - per_pair_s * pairs) over the samples at n. No global
functional form is imposed on T: a step that is faster at 8 tokens than at 4 stays so.

>>> s = [StepSample("b1", 1, 100, 0.0110, 9), StepSample("b1-long", 1, 500, 0.0130, 9),
...      StepSample("b4", 4, 400, 0.0420, 9)]
>>> p = fit_profile(s)
>>> round(p.per_pair_s * 1e6, 3), [round(x, 4) for x in p.step_s]
(5.0, [0.0105, 0.04])
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from ridgeline.errors import RidgelineError
from ridgeline.perf.step_time import BatchWork
from ridgeline.sim.calibrated_profile import CalibrationProfile, Provenance, Residual, Scheduling


@dataclass(frozen=True)
class StepSample:
    """A measured step regime: `step_s` is the median of `samples` steps of that shape."""

    point: str
    tokens: int
    pairs: float
    step_s: float
    samples: int = 1


def _is_decode(s: StepSample) -> bool:
    return s.point.startswith(("decode", "context", "open"))


def fit_decode_per_pair_s(samples: list[StepSample]) -> tuple[float | None, str]:
    """The slope from the decode probes alone (a decode token reading its context), capped
    at the smallest decode step per pair; None when no batch size was probed at two
    contexts. llama.cpp on a CPU spends several times more per pair here than in a prompt,
    which the pooled slope, capped by the prefills, cannot show."""
    dec = [s for s in samples if s.point.startswith(("decode", "context"))]
    # Capped at the whole step, not half: at B = 8 and a 400-token context the attention
    # is about half of a llama.cpp CPU decode step, so half would bind.
    slope, note = fit_per_pair_s(dec, what="decode_per_pair_s", cap_fraction=1.0)
    if note.startswith("decode_per_pair_s: no token count"):
        return None, note
    return slope, note


def fit_per_pair_s(samples: list[StepSample], what: str = "per_pair_s",
                   cap_fraction: float = 0.5) -> tuple[float, str]:
    """Pooled within-token-count slope of step time on attention pairs (>= 0), and a note.
    Pooled as one least-squares slope, each token count weighted by the spread of its pairs:
    a batch of B streams probed at two contexts has B times the spread of one stream."""
    groups: dict[int, list[StepSample]] = defaultdict(list)
    for s in samples:
        if not s.point.startswith("open"):   # mixed contexts and layouts: not a slope
            groups[s.tokens].append(s)
    sxy = sxx = 0.0
    used = 0
    for group in groups.values():
        x = np.array([g.pairs for g in group])
        y = np.array([g.step_s for g in group])
        if len(group) < 2 or np.ptp(x) <= 0:
            continue
        dx = x - x.mean()
        sxy += float(dx @ (y - y.mean()))
        sxx += float(dx @ dx)
        used += 1
    if not used:
        return 0.0, f"{what}: no token count was probed at two contexts; attention term 0"
    slope = sxy / sxx
    if slope < 0:
        return 0.0, (f"{what}: fitted slope {slope:.3g} s/pair < 0 (noise above the "
                     "context effect); floored at 0")
    # Attention cannot take more than the whole step: cap the slope at half of the smallest
    # step_s / pairs over all samples (a noisy context probe must not swallow a prefill).
    cap = cap_fraction * min((s.step_s / s.pairs for s in samples if s.pairs > 0),
                             default=slope)
    if slope > cap:
        share = "half" if cap_fraction == 0.5 else f"{cap_fraction:g} x"
        return cap, (f"{what}: fitted slope {slope:.3g} s/pair capped at {cap:.3g} ({share} "
                     "the smallest step time per pair among the probes): context probe noisy")
    return slope, f"{what} from {used} token count(s) probed at several contexts"


def fit_profile(samples: list[StepSample], scheduling: Scheduling | None = None,
                provenance: Provenance | None = None, kv_bytes_per_token: float = 0.0,
                kv_capacity_tokens: int = 1 << 20, notes: list[str] | None = None
                ) -> CalibrationProfile:
    """The profile whose table and attention term fit `samples`, with its residuals."""
    good = [s for s in samples if s.tokens >= 1 and s.step_s > 0 and np.isfinite(s.step_s)]
    if not good:
        raise RidgelineError("calibrate: no usable probe measurements (every probe point "
                             "failed or produced no clean steps)")
    per_pair_s, note = fit_per_pair_s(good)
    dec_pair_s, dec_note = fit_decode_per_pair_s(good)
    if dec_pair_s is not None:
        note = f"{note}; {dec_note}"
    # An open-loop regime at n replaces the lockstep and context probes at n in the table
    # (lockstep sees one slot layout, load sees them all); those still gave the
    # attention slope above, and stay in the residuals.
    if scheduling is not None and scheduling.slot_graphs:
        # The slot model times each layout itself from one-graph steps: an open-loop
        # average over layouts would count the layout twice (kept in the residuals only).
        open_pts = [s for s in good if s.point.startswith("open")]
        if open_pts:
            notes = [n for n in (notes or []) if "replace the lockstep" not in n]
            notes.append(
                "open-loop steps not in the table (slot model: T is one graph; they are "
                "residuals only)")
        table_src = [s for s in good if not s.point.startswith("open")]
    else:
        table_src = good
    open_n = {s.tokens for s in table_src if s.point.startswith("open")}
    by_n: dict[int, list[float]] = defaultdict(list)
    for s in table_src:
        if s.tokens in open_n and not s.point.startswith(("open", "prefill")):
            continue
        slope = dec_pair_s if dec_pair_s is not None and _is_decode(s) else per_pair_s
        by_n[s.tokens].append(s.step_s - slope * s.pairs)
    tokens = sorted(by_n)
    table = [float(np.median(by_n[n])) for n in tokens]
    bad = [n for n, t in zip(tokens, table, strict=True) if t <= 0]
    if bad:
        raise RidgelineError(f"calibrate: step time at {bad} tokens fits <= 0 after the "
                             "attention term; the probe data are inconsistent (rerun it)")
    if len(tokens) < 2:
        raise RidgelineError(f"calibrate: the probes give step times at {len(tokens)} token "
                             f"count ({tokens[0]}); allowed: at least 2 (a step-time table "
                             "needs two points: probe more batch sizes or prompt lengths)")
    kw: dict[str, Any] = {"kv_bytes_per_token": kv_bytes_per_token,
                          "kv_capacity_tokens": kv_capacity_tokens}
    if scheduling is not None:
        u = scheduling.ubatch_tokens
        if u is not None and u > tokens[-1]:
            scheduling = scheduling.model_copy(update={"ubatch_tokens": None})
            (notes := list(notes or [])).append(
                f"ubatch split off: the largest probe ({tokens[-1]} tokens) is below the "
                f"engine's ubatch ({u}); larger steps are extrapolated (and counted)")
        kw["scheduling"] = scheduling
    profile = CalibrationProfile(tokens=tokens, step_s=table, per_pair_s=per_pair_s,
                                 decode_per_pair_s=dec_pair_s,
                                 provenance=provenance or Provenance(),
                                 fit_notes=[note, *(notes or [])], **kw)

    res = []
    for s in good:
        work = BatchWork(decode_seqs=s.tokens, decode_context_tokens=s.pairs) \
            if dec_pair_s is not None and _is_decode(s) else \
            BatchWork(prefill_tokens=s.tokens, prefill_attn_pairs=s.pairs)
        fitted = float(profile.step_time_s(work))
        res.append(Residual(point=s.point, tokens=s.tokens, pairs=s.pairs,
                            measured_s=s.step_s, fitted_s=fitted, samples=s.samples))
    profile.residuals = res
    return profile


__all__ = ["StepSample", "fit_decode_per_pair_s", "fit_per_pair_s", "fit_profile"]

"""An engine's costs outside the GPU kernels: per request and per step, fitted, with provenance.

The roofline prices what the GPU computes. A serving engine adds time the kernels do not
show, and the replay of real vLLM runs (benchmarks/accuracy/bench_vllm_replay.py) measures it:

- per request: the API server, tokenization, the hand-off to the engine core, detokenizing
  and streaming the first chunk (`request_overhead_s`, a fixed time), and vLLM V1's
  asynchronous scheduling, which decides step n+1 while step n runs, so a request that
  arrives during a step joins one step later than a synchronous scheduler would take it
  (`request_overhead_steps`: that many of the run's mean decode steps). Both shift every
  token (TTFT and E2E, not the gaps between tokens), by one amount for the whole run. They
  are applied to the simulated token times after the engine ran (`apply_request_overhead`),
  so they do not feed back into batching: an approximation, kept because it is the same for
  the Python engine and the C core and costs one vector operation. The emulator delays
  each step's tokens by the same shift, with the mean step of the run so far
  (`LiveRequestOverhead`);
- per step: the scheduler, input preparation and sampling on the CPU (`step_overhead_s`,
  every step that runs) and the extra of a step that carries prefill work (`mixed_step_s`:
  vLLM runs decode-only batches as full CUDA graphs and mixed ones piecewise); the
  step-time model adds them to every step (`linear_terms`, a term of the roofline's
  linear part, so the C core, which takes the compiled coefficients, sees them too).

Every number comes from a catalog file, `ridgeline/specs/data/engines/<engine>.json`, with the
data it was fitted on, the date, the residual and the cross-validated error, and is printed
among the assumptions.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from importlib import resources
from typing import Annotated, Any, Literal, TypedDict

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ridgeline.errors import RidgelineError
from ridgeline.inputs import loads_json, read_text, validate_document
from ridgeline.perf.ops import VAR, WORK_VARS

ENGINES = ("vllm", "trtllm", "sglang")
# Engines `calibrate fit` may fit: its replay runs the vLLM loop, which is not SGLang's, and
# no SGLang run may be fitted on.
FIT_ENGINES = ("vllm", "trtllm")
# Steps every token of a request is delivered late by the engine's scheduling, by structure
# (not fitted): vLLM V1 schedules step n+1 while step n runs, so a request joins one step
# later than a synchronous scheduler would take it. An engine not named here gets the steps
# fitted with the fixed seconds.
# SGLang and TensorRT-LLM: their overlap schedulers.
SCHEDULING_LAG_STEPS = {"vllm": 1.0, "sglang": 1.0, "trtllm": 1.0}
FIELDS = ("request_overhead_s", "request_overhead_steps", "step_overhead_s", "mixed_step_s")


@dataclass(frozen=True)
class EngineCosts:
    engine: str = "vllm"
    request_overhead_s: float = 0.0
    request_overhead_steps: float = 0.0
    step_overhead_s: float = 0.0
    mixed_step_s: float = 0.0
    provenance: dict[str, Any] = field(default_factory=dict, compare=False)

    def with_values(self, **values: float) -> EngineCosts:
        return replace(self, **values)

    @property
    def is_zero(self) -> bool:
        return not any(getattr(self, f) for f in FIELDS)

    def linear_terms(self) -> np.ndarray:
        """Seconds per work variable (ridgeline.perf.ops.WORK_VARS) added to every step."""
        out = np.zeros(len(WORK_VARS))
        out[VAR["any"]] = self.step_overhead_s
        out[VAR["pre"]] = self.mixed_step_s
        return out

    def assumptions(self) -> list[str]:
        pv = self.provenance
        when = pv.get("date")
        if when:
            cv = pv.get("cv_ape") or {}
            err = ", ".join(f"{m} {cv[m]:.1%}" for m in ("ttft_mean", "itl", "e2e_mean")
                            if m in cv)
            held_out = (f"; leave-one-model-out mean APE {err}" if err
                        else f"; cross-validated: {pv['cv_error']}" if pv.get("cv_error")
                        else "")
            tail = (f" (fitted {when} on {len(pv.get('runs', []))} runs of "
                    f"{pv.get('data', 'measured data')}{held_out})")
        else:
            tail = f" ({pv.get('fitted_on', 'not fitted: measured nothing')})"
        return [
            f"engine {self.engine}: per request {self.request_overhead_s * 1e3:.2f} ms fixed "
            f"(API server, tokenization, first streamed chunk) + "
            f"{self.request_overhead_steps:g} x the replica's mean decode step (asynchronous "
            "scheduling joins a request one step later), added to every token time, "
            "outside batching (simulate: the run's mean step; serve: the mean of the steps "
            "run so far)" + tail,
            (f"engine {self.engine}: per step {self.step_overhead_s * 1e3:.3f} ms CPU "
             f"(scheduling, input preparation, sampling) + {self.mixed_step_s * 1e3:.3f} ms "
             "for a step with prefill work"
             + (" (piecewise, not full, CUDA graph)" if self.engine == "vllm" else "")
             if self.step_overhead_s or self.mixed_step_s else
             f"engine {self.engine}: no CPU time per step beyond the GPU's (the fit found "
             "none: scheduling overlaps the GPU step)") + tail,
        ]

    def describe(self) -> dict[str, Any]:
        return {"engine": self.engine, **{f: getattr(self, f) for f in FIELDS},
                "provenance": self.provenance}


def load_engine_costs(engine: str = "vllm") -> EngineCosts:
    """The catalog's fitted costs of `engine` (vllm, trtllm, sglang) or a path to such a
    file."""
    from pathlib import Path

    p = Path(engine)
    if p.suffix == ".json":
        text = read_text(p, "--engine", max_bytes=1 << 20)  # a device or a FIFO: refused
        name = p.stem
    else:
        if engine not in ENGINES:
            raise RidgelineError(f"--engine: got {engine!r}; allowed: {', '.join(ENGINES)} "
                                 "or a path to an engine costs .json")
        text = resources.files("ridgeline.specs").joinpath(
            "data", "engines", f"{engine}.json").read_text()
        name = engine
    raw = loads_json(text, f"--engine: {name}")
    doc = validate_document(EngineCostsFile, raw, f"--engine: {name}")
    vals = {f: getattr(doc.costs, f).value for f in FIELDS
            if getattr(doc.costs, f) is not None}
    # The provenance as the file has it (its order is the order `assumptions` prints).
    return EngineCosts(engine=doc.engine or name, provenance=raw.get("provenance") or {},
                       **vals)


def capacity_policy_for(engine: str) -> str:
    """How `engine` meets a KV shortage: vLLM preempts, TensorRT-LLM's default
    (GUARANTEED_NO_EVICT) reserves each request's whole KV at admission. An engine costs
    file names its engine."""
    name = load_engine_costs(engine).engine if engine.endswith(".json") else engine
    return "guaranteed_no_evict" if name == "trtllm" else "vllm"


class LiveRequestOverhead:
    """The per-request shift of `apply_request_overhead`, worked out while the engine runs.

    The emulator (`ridgeline serve`) must stream a token when it is due, so it cannot wait for
    the run's mean decode step as `simulate` does. It uses the same estimator over the run so
    far: the token gaps the engine has produced (every request's gap since its previous token,
    on the engine's timeline, before any shift), pooled, so it converges to simulate's
    whole-run value as the run goes on. Before the first gap it uses the step model's
    predicted decode step for the batch at hand (`prior_step_s`).

    Like simulate's, the shift does not feed back into batching: the engine steps on, only
    the delivery of tokens is delayed."""

    def __init__(self, request_overhead_s: float, request_overhead_steps: float) -> None:
        self.request_overhead_s = float(request_overhead_s)
        self.request_overhead_steps = float(request_overhead_steps)
        self.gap_sum_s = 0.0
        self.gaps = 0

    def observe_gaps(self, total_s: float, count: int) -> None:
        self.gap_sum_s += total_s
        self.gaps += count

    def mean_step_s(self, prior_step_s: float = 0.0) -> float:
        return self.gap_sum_s / self.gaps if self.gaps else float(prior_step_s)

    def shift_s(self, prior_step_s: float = 0.0) -> float:
        return self.request_overhead_s + self.request_overhead_steps * self.mean_step_s(
            prior_step_s)

# The engine costs file's schema: every field checked, an unknown one refused (a misspelt
# cost would silently be 0). A cost missing from a file would be 0 (no cost): every field the
# catalogs fit is required; `mixed_step_s` came later and defaults to 0. Bounds: far above
# any engine's.
REQUIRED = ("request_overhead_s", "request_overhead_steps", "step_overhead_s")
_MAX = {"s": 60.0, "steps": 1000.0}
MAX_PROVENANCE_CHARS = 2000
_STRICT = ConfigDict(extra="forbid", strict=True)
_Text = Annotated[str, Field(max_length=MAX_PROVENANCE_CHARS)]
# A per-fold cost or an absolute percentage error: finite, >= 0 and bounded (1e6 s, or an
# error of 1e8 %, is no fit).
_NonNegative = Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)]


class SecondsCost(BaseModel):
    """A fitted time in seconds, with the fit's per-fold values."""

    model_config = _STRICT
    value: float = Field(ge=0, le=_MAX["s"], allow_inf_nan=False)
    unit: Literal["s"] = "s"
    cv_fold_values: dict[str, _NonNegative] | None = None


class StepsCost(BaseModel):
    """A fitted count of decode steps, with the fit's per-fold values."""

    model_config = _STRICT
    value: float = Field(ge=0, le=_MAX["steps"], allow_inf_nan=False)
    unit: Literal["steps"] = "steps"
    cv_fold_values: dict[str, _NonNegative] | None = None


class CostsTable(BaseModel):
    model_config = _STRICT
    request_overhead_s: SecondsCost
    request_overhead_steps: StepsCost
    step_overhead_s: SecondsCost
    mixed_step_s: SecondsCost | None = None


class CostsProvenance(BaseModel):
    """What `assumptions` prints, typed so that printing cannot fail; the fit adds notes of
    its own (`replications`, `not_fitted`), kept as given."""

    model_config = ConfigDict(extra="allow", strict=True)
    date: _Text | None = None
    data: _Text | None = None
    fitted_on: _Text | None = None
    cv_error: _Text | None = None
    residual: _Text | None = None
    method: _Text | None = None
    runs: list[Any] | None = None
    cv_ape: dict[str, _NonNegative] | None = None
    train_ape: dict[str, _NonNegative] | None = None


class EngineCostsFile(BaseModel):
    """An engine costs file (`--engine FILE`, specs/data/engines/<engine>.json)."""

    model_config = _STRICT
    engine: str | None = Field(None, max_length=100)
    description: _Text | None = None
    costs: CostsTable
    provenance: CostsProvenance | None = None
    # An engine preset's scheduler (SGLang's), checked field by field by its own reader
    # (sim/engine_presets.py).
    scheduler: dict[str, Any] | None = None
    # The expert-parallel dispatch/combine the engine runs by default (perf/comm.py reads it).
    ep_comm: dict[str, Any] | None = None


def run_mean_step_s(n_tokens: np.ndarray, mean_gap_s: np.ndarray) -> float:
    """The run's mean decode step: requests' mean token gaps, weighted by their gaps."""
    multi = n_tokens > 1
    if not multi.any():
        return 0.0
    w = n_tokens[multi] - 1
    return float((mean_gap_s[multi] * w).sum() / w.sum())


def apply_request_overhead(res: Any, costs: EngineCosts | None) -> Any:
    """Shift every token time (and end) by the per-request overhead, in place.

    The shift is one number per replica: `request_overhead_s` + `request_overhead_steps` x the
    replica's mean decode step (its requests' token gaps pooled). One number keeps the tokens
    of one engine step together across requests, as a real server streams them (a
    per-request value would spread them apart; `advise` reads that alignment). A streamed run
    gets the shift of each chunk it hands out (the mean step of that chunk's requests)."""
    if costs is None or (costs.request_overhead_s == 0 and costs.request_overhead_steps == 0):
        return res
    off = np.asarray(res.event_offsets)
    ev = res.event_times_s
    if not len(res) or ev.size == 0:
        return res
    n_tok = np.diff(off)
    has = n_tok > 0
    shift: float | np.ndarray = float(costs.request_overhead_s)
    if costs.request_overhead_steps:
        # the mean decode step of each replica (a shard of a fleet holds whole replicas, so
        # a sharded run shifts exactly as one process does)
        rep = np.asarray(getattr(res, "replica", np.zeros(len(res))), dtype=np.int64)
        rep = np.where(rep < 0, 0, rep)
        multi = np.flatnonzero(n_tok > 1)
        span = np.zeros(n_tok.size)
        span[multi] = ev[off[multi + 1] - 1] - ev[off[multi]]
        gaps = np.where(n_tok > 1, n_tok - 1, 0)
        num = np.bincount(rep, weights=span)
        den = np.bincount(rep, weights=gaps)
        mean_step = np.divide(num, den, out=np.zeros_like(num), where=den > 0)
        per_req = costs.request_overhead_s + costs.request_overhead_steps * mean_step[rep]
        # one replica (or equal steps): a scalar add, no per-token array
        shift = float(per_req[0]) if np.all(per_req == per_req[0]) else per_req
    if not ev.flags.writeable:
        ev = ev.copy()
    ev += np.repeat(shift, n_tok) if isinstance(shift, np.ndarray) else shift
    res.event_times_s = ev
    res.end_s = np.where(has, res.end_s + shift, res.end_s)
    return res


class RequestOverheadFields(TypedDict):
    request_overhead_s: float
    request_overhead_steps: float


def request_overhead_fields(costs: EngineCosts | None) -> RequestOverheadFields:
    """`EngineConfig`'s per-request shift fields of `costs` (zeros for none): how every
    engine built from a step model and its costs takes them."""
    return {"request_overhead_s": costs.request_overhead_s if costs else 0.0,
            "request_overhead_steps": costs.request_overhead_steps if costs else 0.0}


__all__ = ["ENGINES", "FIT_ENGINES", "EngineCosts", "LiveRequestOverhead", "apply_request_overhead",
           "capacity_policy_for", "load_engine_costs", "request_overhead_fields",
           "run_mean_step_s"]

"""How far the model's predictions are from measurements: its cross-validated error.

A simulated TTFT carries a sampling CI (how much another draw of the same workload would
move it); that says nothing about how wrong the model is. The model's own error comes from
the catalog's cross-validation: each fitted constant holds out part of its data (a model, a
batch band) and records the error on the held-out part. This module reads those numbers for
a step-time model, so every printed prediction can stand beside its error.

- serving figures (TTFT, ITL, E2E of `simulate`/`serve`) with the engine's fitted costs:
  the engine preset's replay of real runs, leave-one-model-out mean APE
  (specs/data/engines/<engine>.json provenance "cv_ape");
- one step (a decode step, a prefill pass) on the fitted kernel model: the kernels'
  cross-validated median APE (specs/data/kernels.json "_fit" "cv"), and for a decode step
  the vLLM step fit's leave-one-model-out median (kernels.json "vllm").

A plain roofline (efficiencies given, or a GPU without a kernel model) and a calibrated
profile were not cross-validated here: their error is None ("not cross-validated").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ridgeline.perf.kernels import kernel_catalog


@dataclass(frozen=True)
class ModelError:
    """Cross-validated absolute percentage errors (fractions); None where not validated."""

    prefill_ape: float | None = None    # one prefill pass (kernel CV: GEMM, prefill attention)
    decode_step_ape: float | None = None  # one decode step (vLLM step fit, else kernel CV)
    ttft_ape: float | None = None       # serving TTFT mean (engine replay)
    ttft_p99_ape: float | None = None
    itl_ape: float | None = None
    e2e_ape: float | None = None
    step_basis: str = "not cross-validated"
    serving_basis: str = "not cross-validated"

    def describe(self) -> dict[str, Any]:
        """JSON: each error as `<name>_fraction` (0.049 = 4.9%), with the bases."""
        return {(k if k.endswith("basis") else f"{k}_fraction"): getattr(self, k)
                for k in self.__dataclass_fields__}


def _cv(fit: dict[str, Any] | None) -> float | None:
    cv = (fit or {}).get("cv") or {}
    v = cv.get("median_ape")
    return float(v) if v is not None else None


def model_error(step_model: Any) -> ModelError:
    """The cross-validated error of `step_model`'s predictions (see the module docstring)."""
    base = step_model
    # A what-if wraps the base model (one step-time function): its error is the base's.
    for attr in ("base", "inner", "model_base"):
        inner = getattr(base, attr, None)
        if inner is not None and hasattr(inner, "kernel_profile"):
            base = inner
    prof = getattr(base, "kernel_profile", None)
    if prof is None:
        return ModelError()
    pre = [x for x in (_cv(prof.gemm.get("_fit")),
                       _cv(prof.attention_prefill.get("_fit"))) if x is not None]
    vllm_fit = kernel_catalog().get("vllm", {}).get("floor_scale", {}).get("_fit")
    dec = _cv(vllm_fit) if vllm_fit else _cv(prof.attention_decode.get("_fit"))
    gpu = getattr(base.hardware, "name", "")
    derived = " (derived for this GPU from another's kernels)" if prof.derived else ""
    step_basis = (f"kernel model '{prof.kernels}' cross-validated: median APE of held-out "
                  f"kernels and of real vLLM step times{derived}")
    costs: Any = getattr(base, "engine_costs", None)
    cv = ((getattr(costs, "provenance", None) or {}).get("cv_ape") or {}) if costs else {}
    serving_basis = "not cross-validated"
    if cv:
        pv = costs.provenance
        serving_basis = (f"engine '{costs.engine}' replay of {len(pv.get('runs', []))} real "
                         f"runs of {pv.get('data', 'measured data')}, leave-one-model-out "
                         f"mean APE{'' if 'h100' in gpu else ' (runs on H100 SXM)'}")

    def get(key: str) -> float | None:
        v = cv.get(key)
        return float(v) if v is not None else None

    return ModelError(prefill_ape=max(pre) if pre else None, decode_step_ape=dec,
                      ttft_ape=get("ttft_mean"), ttft_p99_ape=get("ttft_p99"),
                      itl_ape=get("itl"), e2e_ape=get("e2e_mean"), step_basis=step_basis,
                      serving_basis=serving_basis)


def pm(ape: float | None) -> str:
    """'±4.9%' or 'not cross-validated'."""
    return "not cross-validated" if ape is None else f"±{ape:.1%}"


__all__ = ["ModelError", "model_error", "pm"]

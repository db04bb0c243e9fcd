"""Judge a plan at the pessimistic end of the model's error: `plan --confidence 0.9`.

The pessimistic world is the one where every engine step takes `s` times longer than
predicted, `s` the upper end of the decode-time residual's interval (one-sided confidence 0.9
is the upper end of the two-sided 80% interval, 0.975 that of the 95% one; see
ridgeline.metrics.prediction_interval), the largest over the candidate GPUs. Steps `s` times
longer under the same arrivals are, on a clock `s` times slower, the predicted engine under
`s` times the rate: a configuration meets `ttft_ms<=X` at rate R in that world exactly when it
meets `ttft_ms<=X/s` at rate s x R in the predicted one (rates such as decode_rate_tok_s
bounds scale the other way). So the pessimistic plan is the same search on a rescaled
request. The fixed per-request engine cost is rescaled with the rest, a small overstatement.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ridgeline.errors import RidgelineError
from ridgeline.metrics.prediction_interval import distance_from_data, step_scales
from ridgeline.metrics.slo import SLO, parse_slo

# one-sided confidence -> the two-sided interval level whose upper end it is
CONFIDENCE_LEVELS = {0.9: 80, 0.975: 95}


def check_confidence(confidence: float) -> int:
    for c, level in CONFIDENCE_LEVELS.items():
        if abs(confidence - c) < 1e-9:
            return level
    raise RidgelineError(f"--confidence: got {confidence:g}; allowed: 0.9 or 0.975")


def pessimistic_step_scale(confidence: float, hardware: list[str] | tuple[str, ...],
                           engine: str = "vllm") -> tuple[float, dict[str, Any]]:
    """(s, description): the step-time multiplier at `confidence`, the largest over
    `hardware` (GPUs further from the data have wider intervals)."""
    level = check_confidence(confidence)
    per = {hw: step_scales("below_knee", distance_from_data(hw, engine))[level][1]
           for hw in hardware}
    s = max(per.values())
    return s, {"confidence": confidence, "step_time_scale": round(s, 4),
               "per_hardware": {k: round(v, 4) for k, v in per.items()},
               "rule": f"every step x {s:.4f} (the upper end of the decode-time residual's "
                       f"{level}% interval, the largest over the candidate GPUs): the search "
                       "at that multiple of the rate with latency SLOs divided by it"}


def scale_slo(slo: SLO, s: float) -> SLO:
    """The bound that, in the predicted world, is the same as `slo` with steps x s."""
    rate = slo.metric == "decode_rate"
    return dataclasses.replace(slo, value=slo.value * s if rate else slo.value / s)


def pessimistic_request(req: Any, s: float) -> Any:
    """`req` (a PlanRequest) rescaled to the world where every step is `s` times longer."""
    return dataclasses.replace(
        req, rate_req_s=req.rate_req_s * s,
        slos=tuple(scale_slo(parse_slo(t), s).text for t in req.slos))

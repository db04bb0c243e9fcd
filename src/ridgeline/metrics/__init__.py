"""Metrics of a trace: per-request TTFT/TPOT/ITL/E2E, percentiles with bootstrap CIs, goodput,
compare, the regression gate and their renderers (docs/metrics.md).
"""

# The package's public modules (imported one by one, so importing the package stays cheap).
__all__ = [
    "analysis",
    "compare",
    "distribution",
    "gate",
    "order_stats",
    "per_request",
    "render",
    "select",
    "sketch",
    "slo",
    "streaming",
    "telemetry",
]

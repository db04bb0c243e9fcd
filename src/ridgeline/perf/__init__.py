"""The perf model: per-operator FLOPs and bytes, the roofline, the fitted kernel model, and the
one step-time function that estimate, simulate and serve share (docs/model.md).
"""

# The package's public modules (imported one by one, so importing the package stays cheap).
__all__ = [
    "comm",
    "estimate",
    "fast_step",
    "grid",
    "kernels",
    "linear_attention",
    "memory",
    "moe",
    "operator",
    "ops",
    "roofline",
    "roofline_step",
    "step_time",
    "vllm_kv_log",
    "whatif",
    "window",
]

"""Plots and the self-contained HTML (or markdown) report built from traces, sweeps and estimates.
"""

# The package's public modules (imported one by one, so importing the package stays cheap).
__all__ = [
    "breakdown",
    "build",
    "cdf",
    "data",
    "estimate_view",
    "html",
    "load",
    "roofline",
    "style",
    "timeline",
]

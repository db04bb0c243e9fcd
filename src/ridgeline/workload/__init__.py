"""Workload description shared by simulate and bench: lengths and arrivals."""

# The package's public modules (imported one by one, so importing the package stays cheap).
__all__ = [
    "arrivals",
    "lengths",
    "spec_syntax",
    "streams",
    "think",
    "timed_trace_reader",
]

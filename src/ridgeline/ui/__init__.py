"""`ridgeline ui`: a local page over the perf model (see docs/ui.md)."""

# The package's public modules (imported one by one, so importing the package stays cheap).
__all__ = [
    "app",
]

"""`ridgeline ui`: a local page over the perf model (see docs/ui.md)."""

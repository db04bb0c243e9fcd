"""Workload description shared by simulate and bench: lengths and arrivals."""

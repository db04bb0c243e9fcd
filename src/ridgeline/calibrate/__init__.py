"""Calibration: host microbenchmarks, a real engine as tooling, profiles fitted to measurement."""

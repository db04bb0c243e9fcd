"""Calibration: measure a host or a live engine and fit a step-time profile from it.

See docs/calibration.md.
"""

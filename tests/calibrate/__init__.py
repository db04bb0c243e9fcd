"""Tests of ridgeline.calibrate."""

"""Tests of ridgeline.metrics."""

"""Tests of ridgeline.perf."""

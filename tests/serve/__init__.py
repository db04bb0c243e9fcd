"""Tests of ridgeline.serve."""

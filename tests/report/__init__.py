"""Tests of ridgeline.report."""

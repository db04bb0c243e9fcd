"""Tests of ridgeline.specs."""

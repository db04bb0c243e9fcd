"""Tests of ridgeline.sim."""

"""Tests of ridgeline.plan."""

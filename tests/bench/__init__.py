"""Tests of ridgeline.bench."""

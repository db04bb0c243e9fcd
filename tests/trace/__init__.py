"""Tests of ridgeline.trace."""

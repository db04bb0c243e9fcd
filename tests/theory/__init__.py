"""Tests of ridgeline.theory."""

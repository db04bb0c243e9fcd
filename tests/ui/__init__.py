"""Tests of ridgeline.ui."""

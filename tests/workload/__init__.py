"""Tests of ridgeline.workload."""

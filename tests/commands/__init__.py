"""Tests of the installed `ridgeline` command (ridgeline.commands and the CLI as a user runs it)."""

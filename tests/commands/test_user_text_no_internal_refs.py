"""What a user reads (every command's --help, an error, the assumptions, the docs) names no
ticket, no numbered specification chapter and no folder outside the repository: the
installed command's output, piped."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer

from ridgeline.cli import app

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).with_name("ridgeline")
RIDGELINE = str(BIN) if BIN.exists() else shutil.which("ridgeline") or "ridgeline"
INTERNAL = re.compile(r"\bissues? #?[0-9]+|\bseeds? 0[0-9]{2}|§ ?[0-9]|\bchapter [0-9]+|"
                      r"shared/data|"
                      r"shared/seeds|\.\./shared|\bseeds/", re.IGNORECASE)


def _commands() -> list[list[str]]:
    """Every command and subcommand path of the `ridgeline` app."""
    out: list[list[str]] = []

    def walk(cmd: Any, path: list[str]) -> None:
        out.append(path)
        if hasattr(cmd, "list_commands"):   # a group (typer may bring its own click)
            ctx = cmd.context_class(cmd)
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                if sub is not None and not sub.hidden:
                    walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return out


COMMANDS = _commands()


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RIDGELINE, *args], capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)


def test_the_walk_finds_the_commands() -> None:
    names = {" ".join(p) for p in COMMANDS}
    assert {"estimate", "simulate", "bench", "serve", "theory mmc", "calibrate engine"} <= names


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "ridgeline")
def test_help_names_nothing_internal(path: list[str]) -> None:
    proc = run(*path, "--help")
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout + proc.stderr
    assert len(text) > 100
    assert not INTERNAL.findall(text), INTERNAL.findall(text)


@pytest.mark.parametrize("args", [
    ["estimate", "--assumptions"],
    ["estimate", "--json"],
    ["simulate", "--rate", "5", "-n", "200", "--assumptions"],
    ["estimate", "--model", "no-such-model"],
    ["bench", "--use-beam-search"],
    ["hardware"],
    ["models"],
], ids=" ".join)
def test_output_and_errors_name_nothing_internal(args: list[str]) -> None:
    proc = run(*args)
    text = proc.stdout + proc.stderr
    assert len(text) > 20
    assert not INTERNAL.findall(text), INTERNAL.findall(text)


def test_docs_name_nothing_internal() -> None:
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            found += [f"{path.relative_to(ROOT)}:{i}: {m}" for m in INTERNAL.findall(line)]
    assert not found, "\n".join(found)

"""The `ridgeline` command.

Each capability registers its sub-commands from its own module in `ridgeline.commands`.
Those modules import only typer and the standard library at import time; numpy and the
rest are imported inside the command bodies, so `ridgeline estimate` starts fast.
"""

from __future__ import annotations

import importlib
import os
import sys

# numpy asks the kernel for huge pages on large arrays; on a million-request trace that
# costs ~2 s of page faults in `analyze` (numpy/numpy#31590). Set before numpy loads.
os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")

import typer

from ridgeline import __version__
from ridgeline.errors import RidgelineError

app = typer.Typer(
    name="ridgeline",
    help="Predict, simulate, emulate, measure and analyze LLM inference serving.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Modules in ridgeline.commands that expose `register(app)`. A module that is not there
# yet (a capability still being built) is skipped.
COMMAND_MODULES = ("demo", "estimate", "analyze", "theory", "simulate", "serve", "bench",
                   "calibrate", "verify")


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"ridgeline {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version."
    ),
) -> None:
    """ridgeline: how fast will this model serve on this hardware under this load, and why."""


for _name in COMMAND_MODULES:
    try:
        _module = importlib.import_module(f"ridgeline.commands.{_name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"ridgeline.commands.{_name}":
            raise
        continue
    _module.register(app)


def main() -> None:
    """Entry point: run the app, turning RidgelineError into a one-line message."""
    try:
        app(standalone_mode=False)
    except RidgelineError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("aborted", err=True)
        sys.exit(130)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # click usage errors arrive here in non-standalone mode
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        raise


if __name__ == "__main__":
    main()

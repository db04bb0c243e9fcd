"""`simulate --workload FILE`: a load test's own workload in place of the workload flags.

The reading is in ridgeline.workload.load_test_configs; this module turns what it read into
simulate's settings, refusing the flags it replaces (one source for each setting)."""

from __future__ import annotations

from typing import Any

import typer

from ridgeline.errors import RidgelineError

# simulate's options a workload file sets (a user's flag would silently lose to it)
REPLACED = ("arrival", "rate", "concurrency", "prompt", "output", "prefix_groups",
            "prefix_tokens")


def apply_workload(value: str, seed: int, options: dict[str, Any], json_out: bool
                   ) -> tuple[dict[str, Any], Any]:
    """simulate's settings from `--workload value` (the given `options` overridden) and the
    workload read; says on stderr which workload was read (one or two lines)."""
    from ridgeline.workload.load_test_configs import workload_settings
    from ridgeline.workload.workload_file import read_workload_file

    ctx = _context()
    given = flags_given(REPLACED)
    if given:
        raise RidgelineError(f"--workload: sets the load itself; allowed: without "
                             f"{', '.join(given)}")
    w = read_workload_file(value, seed)
    requests_given = ctx is not None and (src := ctx.get_parameter_source("requests")) \
        is not None and src.name not in ("DEFAULT", "DEFAULT_MAP")
    settings = workload_settings(w, int(options["requests"]) if requests_given else None)
    n = settings["requests"]
    out = dict(options, **{k: v for k, v in settings.items() if not k.endswith("_replay")})
    typer.echo(w.summary + (f" (the first {n:,} simulated: --requests)" if n < w.requests
                            else ""), err=True)
    return out, w


def flags_given(names: tuple[str, ...]) -> list[str]:
    """The options among `names` (parameter names) the user gave, as `--flag` spellings."""
    ctx = _context()
    given = []
    if ctx is not None:
        for name in names:
            src = ctx.get_parameter_source(name)
            if src is not None and src.name not in ("DEFAULT", "DEFAULT_MAP"):
                given.append("--" + name.replace("_", "-"))
    return given


def _context() -> Any:
    """The running command's context, to tell a flag the user gave from its default. Typer
    0.29 carries its own copy of click; earlier ones use click itself."""
    try:
        from typer._click.globals import get_current_context
    except ImportError:
        from click import get_current_context  # type: ignore[no-redef]
    return get_current_context(silent=True)


__all__ = ["apply_workload", "flags_given"]

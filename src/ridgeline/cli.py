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
# One BLAS thread. The simulator, the emulator and the analysis are single-threaded Python
# between numpy calls; after a BLAS call (a dot product, a bootstrap's matrix-vector
# product) the idle pool's threads spin and take the other cores from them: a
# 1,000-replica simulate took 19.8 CPU-s with the default pool, 8.2 with one thread.
# `calibrate` keeps every thread: it measures the host's BLAS peak. A user's setting wins.
if sys.argv[1:2] != ["calibrate"]:
    for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

import typer

from ridgeline import __version__
from ridgeline.errors import RidgelineError


def _new_app() -> typer.Typer:
    return typer.Typer(
        name="ridgeline",
        help="Predict, simulate, emulate, measure and analyze LLM inference serving.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        # Plain click help: rich markup would read `a:b:step` as the `:b:` emoji and `[x]` as
        # a style tag.
        rich_markup_mode=None,
    )


app = _new_app()

# Modules in ridgeline.commands that expose `register(app)`. A module that is not there
# yet (a capability still being built) is skipped.
COMMAND_MODULES = ("demo", "estimate", "analyze", "theory", "simulate", "serve", "bench",
                   "report", "ui", "plan", "advise", "calibrate", "verify", "export")
# The command names each module registers (tests/commands/test_cli_exit_codes.py checks this against
# `app`). `run` builds the click tree of the invoked command's module only: the whole tree
# of every command's options takes ~0.08 s to build, one module's ~0.01 s.
COMMANDS = {
    "demo": "demo", "estimate": "estimate", "roofline": "estimate", "models": "estimate",
    "hardware": "estimate", "analyze": "analyze", "compare": "analyze", "gate": "analyze",
    "validate": "analyze", "theory": "theory", "simulate": "simulate", "serve": "serve",
    "bench": "bench", "report": "report", "plot": "report", "ui": "ui", "plan": "plan",
    "advise": "advise", "calibrate": "calibrate", "verify": "verify", "export": "export",
}


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


_registered: dict[str, object] = {}
for _name in COMMAND_MODULES:
    try:
        _module = importlib.import_module(f"ridgeline.commands.{_name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"ridgeline.commands.{_name}":
            raise
        continue
    _module.register(app)
    _registered[_name] = _module


def app_for(argv: list[str]) -> typer.Typer:
    """The app to run `argv` with: for a known command, one holding only its module's
    commands (the same command, options and help: click builds only its tree); anything else
    (`--help`, `--version`, a typo, a command added to `app` at run time) gets `app`."""
    module = _registered.get(COMMANDS.get(argv[0], "")) if argv else None
    if module is None:
        return app
    lean = _new_app()
    lean.callback()(_root)
    module.register(lean)  # type: ignore[attr-defined]
    return lean


def _click_exception_type() -> type[Exception]:
    """click's ClickException as typer uses it (typer >= 0.20 bundles its own click)."""
    for cls in typer.BadParameter.__mro__:
        if cls.__name__ == "ClickException":
            return cls
    raise RuntimeError("typer.BadParameter does not derive from ClickException")


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _usage_error(exc: Exception) -> int:
    """Print a click usage error as click's usage line plus ONE `error:` line, on stderr."""
    ctx = getattr(exc, "ctx", None)
    if type(exc).__name__ == "NoArgsIsHelpError" and ctx is not None:
        # `ridgeline` or `ridgeline theory ...` with nothing to run: the help, then why.
        typer.echo(ctx.get_help(), err=True)
        typer.echo(f"error: missing command; run '{ctx.command_path} COMMAND' "
                   f"(see '{ctx.command_path} --help')", err=True)
        return 2
    if ctx is not None:
        typer.echo(ctx.get_usage(), err=True)
    message = _one_line(exc.format_message())  # type: ignore[attr-defined]
    hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    typer.echo(f"error: {message}{hint}", err=True)
    return int(getattr(exc, "exit_code", 2) or 2)


def _crash_report(exc: BaseException) -> str:
    """Write the traceback of an unexpected exception to a file; return its path."""
    import tempfile
    import time
    import traceback

    text = (f"ridgeline {__version__} crash report\nargv: {sys.argv!r}\n"
            f"python: {sys.version}\n\n" + "".join(traceback.format_exception(exc)))
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    name = f"crash-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
    for folder in (os.path.join(cache, "ridgeline"), tempfile.gettempdir()):
        try:
            os.makedirs(folder, exist_ok=True)
            path = os.path.join(folder, name)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
            return path
        except OSError:
            continue
    return "nowhere: no writable cache or temp folder"


# Exit codes (docs/cli.md): 0 ok; 1 a check failed (gate regression, invalid trace, a bench
# where nothing succeeded); 2 bad input; 3 gate cannot evaluate a rule; 70 internal error
# (EX_SOFTWARE: a bug, never to be read as a regression); 130 interrupted (Ctrl-C).
EXIT_INTERNAL_ERROR = 70
EXIT_INTERRUPTED = 130


def _internal_error(exc: Exception) -> int:
    if os.environ.get("RIDGELINE_DEBUG"):
        raise exc
    path = _crash_report(exc)
    typer.echo(f"error: internal error: {type(exc).__name__}: {_one_line(str(exc))} "
               f"(full report written to {path})", err=True)
    return EXIT_INTERNAL_ERROR


def run(args: list[str] | None = None) -> int:
    """Run the command line and return its exit code; never lets a traceback reach the user.

    Set RIDGELINE_DEBUG=1 to get the traceback of an internal error on the terminal too.
    """
    click_exception = _click_exception_type()
    argv = list(sys.argv[1:] if args is None else args)
    try:
        if argv[:1] == ["bench"]:
            from ridgeline.bench.peer_flags import normalize_argv

            peer_argv, notes = normalize_argv(argv[1:])  # vLLM's option shapes (nargs="+")
            args = ["bench", *peer_argv]
            if "emulator" in peer_argv or "--target=emulator" in peer_argv:
                from ridgeline.commands.bench_run import prespawn

                prespawn(peer_argv)  # the emulator starts while the parser is built
            for note in notes:
                typer.echo(f"note: {note}", err=True)
        if argv[:1] == ["serve"] and "--lora-modules" in argv:
            from ridgeline.serve.lora import expand_lora_argv

            args = ["serve", *expand_lora_argv(argv[1:])]   # vLLM's nargs="+" shape
        from ridgeline.commands.options import check_numbers, guard_command_line

        # Outputs equal to inputs, unwritable outputs, device/FIFO inputs: refused before
        # any command starts (docs/cli.md).
        argv = list(sys.argv[1:] if args is None else args)
        guard_command_line(argv)
        # The click command tree is built once (~0.1 s): for the number checks and the run
        # (what `app(...)` does, less typer's traceback hook, which `run` never lets fire).
        command = typer.main.get_command(app_for(argv))
        if "--help" not in argv:
            check_numbers(command, argv)
        code = command(args=args, standalone_mode=False, prog_name="ridgeline")
    except RidgelineError as exc:
        typer.echo(f"error: {_one_line(str(exc))}", err=True)
        return 2
    except click_exception as exc:
        if hasattr(exc, "ctx"):  # a usage error: bad option, missing argument, no command
            return _usage_error(exc)
        typer.echo(f"error: {_one_line(exc.format_message())}", err=True)  # type: ignore
        return int(getattr(exc, "exit_code", 1) or 1)
    except typer.Exit as exc:
        code = exc.exit_code
    except (typer.Abort, KeyboardInterrupt):
        code = EXIT_INTERRUPTED
    except OSError as exc:
        # The disk or the file system refused a write (full, read-only, quota): the output
        # cannot be written, as docs/cli.md counts it: bad input, not a bug.
        import errno

        if exc.errno in (errno.ENAMETOOLONG, errno.ELOOP):  # a path no file can have
            name = _one_line(str(exc.filename or ""))
            name = name if len(name) <= 60 else name[:57] + "..."
            typer.echo(f"error: path {name!r}: {exc.strerror}; allowed: an existing file "
                       "path", err=True)
            return 2
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG):
            return _internal_error(exc)
        where = f" ({exc.filename})" if exc.filename else ""
        typer.echo(f"error: output: cannot write{where}: {exc.strerror}; allowed: a path "
                   "on a file system with room", err=True)
        return 2
    except SystemExit as exc:  # a streamed run that printed what finished, then 130
        if exc.code != EXIT_INTERRUPTED:
            raise
        code = EXIT_INTERRUPTED
    except Exception as exc:
        return _internal_error(exc)
    # In non-standalone mode click returns the code of a `typer.Exit` (and turns Ctrl-C into
    # Exit(130)); a command that returns normally gives None.
    code = code if isinstance(code, int) and not isinstance(code, bool) else 0
    if code == EXIT_INTERRUPTED:
        typer.echo("interrupted", err=True)
    return code


def _keep_freed_memory() -> None:
    """glibc: keep freed memory for reuse instead of returning it to the system. A streamed
    run builds arrays of ~10 MB per chunk; with the defaults each came from a fresh mapping
    and every page faulted (1M requests over 1,000 replicas: 4.2 s of 13.8 s in the kernel,
    3.5 M page faults; 0.1 s and 77 k with this). Peak memory is unchanged. Elsewhere: no-op."""
    if not sys.platform.startswith("linux") or sys.argv[1:2] == ["calibrate"]:
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3
    mallopt(m_mmap_threshold, 32 << 20)     # glibc's largest allowed value
    mallopt(m_trim_threshold, 1 << 30)
    mallopt(m_top_pad, 64 << 20)


def main() -> None:
    """Entry point of the `ridgeline` console script."""
    _keep_freed_memory()
    code = run()
    try:
        sys.stdout.flush()
    except (BrokenPipeError, ValueError):
        # `ridgeline models | head -1`: the reader left; exit quietly without a second error
        # when the interpreter flushes stdout at shutdown.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    if code == EXIT_INTERRUPTED:
        _exit_now(code)
    sys.exit(code)


def _exit_now(code: int) -> None:
    """After a Ctrl-C: run the exit hooks (they stop what is still running), then leave
    without the interpreter's teardown, which after a Ray run took 1-2 s on a loaded box
    (its C++ core's destructors), past the 2 s a Ctrl-C may take (docs/cli.md). Every
    output was closed or removed on the way here."""
    import atexit
    import contextlib

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    main()

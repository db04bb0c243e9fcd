"""Start the installed `ridgeline serve` for the emulator-feature tests (modes, failures,
structured output, LoRA): a subprocess on 127.0.0.1, a free port, stopped by PID."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ridgeline.serve.launcher import EmulatorProcess

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")


def emulator(*flags: str) -> EmulatorProcess:
    """`ridgeline serve` with these flags (llama-3.1-8b on h100-sxm, port 0)."""
    return EmulatorProcess(command=[RIDGELINE, "serve", "--model", "llama-3.1-8b",
                                    "--hardware", "h100-sxm", "--host", "127.0.0.1",
                                    "--port", "0", *flags])


def serve_refuses(*flags: str) -> subprocess.CompletedProcess[str]:
    """Run `ridgeline serve` with bad flags; it must exit before serving."""
    return subprocess.run([RIDGELINE, "serve", "--port", "0", *flags],
                          capture_output=True, text=True, timeout=120)


def one_error_line(r: subprocess.CompletedProcess[str], flag: str) -> bool:
    """Exit 2 with one `error:` line naming the flag (click's own range errors add the
    usage line above it), never a traceback."""
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
    return (r.returncode == 2 and len(errors) == 1 and flag in errors[0]
            and "Traceback" not in r.stderr)

"""The `ridgeline` sub-commands: thin shells that parse options and call one library function.

Each module imports only typer and the standard library at import time, so `ridgeline --help`
stays fast (docs/architecture.md#thin-commands).
"""

# The package's public modules (imported one by one, so importing the package stays cheap).
__all__ = [
    "advise",
    "analyze",
    "bench",
    "calibrate",
    "demo",
    "estimate",
    "export",
    "options",
    "plan",
    "report",
    "serve",
    "simulate",
    "simulate_streamed",
    "theory",
    "ui",
    "verify",
    "whatif_options",
]

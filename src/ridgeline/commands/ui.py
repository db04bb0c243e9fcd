"""`ridgeline ui`: the interactive page over the perf model, served on 127.0.0.1.

Only typer and the standard library at import time; Starlette and uvicorn load inside.
"""

from __future__ import annotations

from typing import Annotated

import typer


def ui_cmd(
    port: Annotated[int, typer.Option("--port", help="TCP port on 127.0.0.1 (0: any free "
                                      "port).")] = 8050,
    host: Annotated[str, typer.Option("--host", help="Interface to bind (local only by "
                                      "default).")] = "127.0.0.1",
) -> None:
    """Open a local page: pick model, hardware, precisions, parallelism; drag batch and
    context and watch the roofline, the operator breakdown, TPOT, TTFT, tok/s and memory."""
    import socket

    from ridgeline.errors import RidgelineError

    if not 0 <= port <= 65535:
        raise RidgelineError(f"--port: got {port}; allowed: 0 to 65535")
    try:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        raise RidgelineError(f"--port: cannot listen on {host}:{port} ({exc.strerror}); "
                             "allowed: a free port, e.g. --port 0") from None
    import uvicorn

    from ridgeline.ui.app import create_app

    bound = sock.getsockname()[1]
    typer.echo(f"ridgeline ui: http://{host}:{bound}/  (Ctrl-C to stop)", err=False)
    config = uvicorn.Config(create_app(), log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    server.run(sockets=[sock])


def register(app: typer.Typer) -> None:
    app.command("ui")(ui_cmd)

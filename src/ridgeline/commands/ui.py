"""`ridgeline ui`: the interactive page over the perf model, served on 127.0.0.1.

Only typer and the standard library at import time; Starlette and uvicorn load inside.
"""

from __future__ import annotations

from typing import Annotated

import typer

from ridgeline.commands.options import number


def ui_cmd(
    port: Annotated[int, typer.Option("--port", help="TCP port on 127.0.0.1 (0: any free "
                                      "port).")] = 8050,
    host: Annotated[str, typer.Option("--host", help="Interface to bind (local only by "
                                      "default).")] = "127.0.0.1",
    header_timeout_s: Annotated[float, typer.Option(
        "--header-timeout", callback=number(gt=0, le=3600),
        help="Seconds a connection may take to send its request headers, and then its body "
        "(as `serve --header-timeout`).")] = 30.0,
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

    from ridgeline.serve.header_timeout import base_protocol_class, with_header_timeout
    from ridgeline.ui.app import create_app

    bound = sock.getsockname()[1]
    typer.echo(f"ridgeline ui: http://{host}:{bound}/  (Ctrl-C to stop)", err=False)
    # The emulator's slow-header guard (serve/header_timeout.py); the body gets the same
    # time inside the app (408).
    http = with_header_timeout(base_protocol_class("auto"), header_timeout_s)
    config = uvicorn.Config(create_app(body_timeout_s=header_timeout_s), log_level="warning",
                            access_log=False, http=http, timeout_keep_alive=30)
    server = uvicorn.Server(config)
    server.run(sockets=[sock])


def register(app: typer.Typer) -> None:
    app.command("ui")(ui_cmd)

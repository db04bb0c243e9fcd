"""Start the emulator: as a subprocess (`EmulatorProcess`), inside the current event loop
(`running_server`), or in the foreground (`serve_app`, used by `ridgeline serve`).

The subprocess is the one to use for load generation and benchmarks: the server then has
its own interpreter (its own GIL), as a real server would, and the client's CPU use does
not disturb the emulated timing.

>>> from ridgeline.serve.launcher import EmulatorProcess
>>> with EmulatorProcess(model="llama-3.1-8b", hardware="h100-sxm") as emu:  # doctest: +SKIP
...     emu.base_url
'http://127.0.0.1:39017'
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator, Sequence
from types import TracebackType
from typing import Any

from ridgeline.errors import RidgelineError
from ridgeline.serve.header_timeout import (
    DEFAULT_HEADER_TIMEOUT_S,
    base_protocol_class,
    with_header_timeout,
)

READY_PREFIX = "ridgeline serve: listening on "


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket; port 0 picks a free port (read it from getsockname())."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY on accepted sockets only when
    # the proto says TCP, and without it Nagle's algorithm holds each small SSE chunk back
    # until the client's delayed ACK (~40 ms), bunching tokens on keep-alive connections.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def _uvicorn_server(app: Any, *, log_level: str, access_log: bool) -> Any:
    import uvicorn

    emulator = getattr(getattr(app, "state", None), "emulator", None)
    grace_s = emulator.config.shutdown_grace_s if emulator is not None else 5.0
    header_timeout_s = (emulator.config.header_timeout_s if emulator is not None
                        else DEFAULT_HEADER_TIMEOUT_S)

    class _GracefulServer(uvicorn.Server):
        """On shutdown, bound the wait for open streams by the emulator's grace period."""

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            drainer = None
            if emulator is not None and emulator.driver is not None:
                drainer = asyncio.get_running_loop().create_task(
                    emulator.driver.drain(grace_s))
            await super().shutdown(sockets)
            if drainer is not None:
                await drainer

    # uvicorn's own timeout is only a backstop: driver.drain() ends every stream after grace_s.
    # loop/http "auto" pick uvloop and httptools when installed (about 1.7x the token rate
    # of asyncio + h11, see benchmarks/results/bench_serve.md); the environment variables force
    # one implementation (benchmarks, tests of the pure-Python path). The HTTP protocol is
    # uvicorn's, with a deadline for request headers added (header_timeout.py).
    http = with_header_timeout(base_protocol_class(os.environ.get("RIDGELINE_SERVE_HTTP",
                                                                  "auto")), header_timeout_s)
    config = uvicorn.Config(app, log_level=log_level, access_log=access_log,
                            lifespan="on", timeout_keep_alive=30, backlog=2048,
                            timeout_graceful_shutdown=int(grace_s) + 5,
                            loop=os.environ.get("RIDGELINE_SERVE_LOOP", "auto"),
                            http=http, ws="none")  # no websocket routes: skip their imports
    return _GracefulServer(config)


def serve_app(app: Any, host: str = "127.0.0.1", port: int = 8000, *,
              log_level: str = "warning", access_log: bool = False,
              announce: bool = True) -> None:
    """Run the app in the foreground until SIGINT/SIGTERM (blocks).

    On the signal: stop accepting, let streams in flight finish (the app's shutdown grace),
    end the rest cleanly, exit.
    """
    sock = bind_socket(host, port)
    actual_port = sock.getsockname()[1]
    server = _uvicorn_server(app, log_level=log_level, access_log=access_log)
    if announce:
        shown = f"[{host}]" if ":" in host else host
        print(f"{READY_PREFIX}http://{shown}:{actual_port}", flush=True)
    # Everything built so far (the engine, its model tables, the libraries) lives as long
    # as the process: move it out of the collector's reach, so a full collection, which
    # would otherwise walk all of it, costs microseconds rather than landing a
    # ~15 ms pause on a step boundary.
    gc.collect()
    gc.freeze()
    server.run(sockets=[sock])


@contextlib.asynccontextmanager
async def running_server(app: Any, host: str = "127.0.0.1",
                         sock: socket.socket | None = None) -> AsyncIterator[str]:
    """Serve `app` inside the running event loop; yields its base URL (tests, in-process).

    `sock`: a listening socket from `bind_socket` (to set socket options first).

    >>> async def main():  # doctest: +SKIP
    ...     async with running_server(app) as base_url:
    ...         ...
    """
    sock = sock or bind_socket(host, 0)
    host, port = sock.getsockname()[:2]
    server = _uvicorn_server(app, log_level="warning", access_log=False)
    task = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()  # raises the startup error
            await asyncio.sleep(0.005)
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task
        sock.close()


@contextlib.contextmanager
def running_in_thread(app: Any, host: str = "127.0.0.1",
                      startup_timeout_s: float = 30.0) -> Iterator[str]:
    """Serve `app` from a background thread with its own event loop; yields the base URL.

    For synchronous callers (the `openai` client in tests). The thread shares this
    process's GIL, so use `EmulatorProcess` where timing matters under load.
    """
    urls: list[str] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    async def main() -> None:
        async with running_server(app, host) as url:
            urls.append(url)
            while not stop.is_set():
                await asyncio.sleep(0.01)

    def target() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:  # reported to the caller below
            errors.append(exc)

    thread = threading.Thread(target=target, name="ridgeline-serve", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout_s
    while not urls:
        if errors:
            raise errors[0]
        if time.monotonic() > deadline:
            raise TimeoutError("the emulator thread did not start")
        time.sleep(0.005)
    try:
        yield urls[0]
    finally:
        stop.set()
        thread.join(30)


class EmulatorProcess:
    """`ridgeline serve` in a subprocess on 127.0.0.1, health-checked when entered.

    `extra_args` are more `ridgeline serve` flags, e.g. ["--max-num-seqs", "64"]. The
    server picks a free port itself (`--port 0`) and reports it on stdout, so there is no
    race for the port. Leaving the `with` block sends SIGTERM (graceful: streams in flight
    are ended cleanly) and waits for the exit, killing it after `stop_timeout_s`.
    """

    def __init__(self, model: str = "llama-3.1-8b", hardware: str = "h100-sxm",
                 speed: float = 1.0, extra_args: Sequence[str] = (), *,
                 host: str = "127.0.0.1", port: int = 0, startup_timeout_s: float = 60.0,
                 stop_timeout_s: float = 15.0, env: dict[str, str] | None = None,
                 command: Sequence[str] | None = None) -> None:
        # `command` replaces `ridgeline serve ...` (e.g. a script serving a custom engine
        # with serve_app); it must print the READY_PREFIX line as serve_app does.
        self.args = list(command) if command is not None else [
            sys.executable, "-m", "ridgeline.cli", "serve", "--model", model,
            "--hardware", hardware, "--speed", repr(float(speed)), "--host", host,
            "--port", str(port), *extra_args]
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.env = {**os.environ, **(env or {})}
        self.base_url = ""
        self.proc: subprocess.Popen[str] | None = None
        self._stderr = tempfile.TemporaryFile(mode="w+", encoding="utf-8")  # noqa: SIM115
        self._stdout_lines: list[str] = []

    def spawn(self) -> EmulatorProcess:
        """Start the process and return at once (`start` then waits until it is ready): a
        caller with its own start-up work to do overlaps the two."""
        if self.proc is None:
            self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE,
                                         stderr=self._stderr, stdin=subprocess.DEVNULL,
                                         text=True, env=self.env)
            self._found: list[str] = []
            threading.Thread(target=self._read_stdout, args=(self._found,),
                             daemon=True).start()
        return self

    def start(self) -> EmulatorProcess:
        self.spawn()
        assert self.proc is not None
        found = self._found
        deadline = time.monotonic() + self.startup_timeout_s
        while not found:
            if self.proc.poll() is not None:
                text = self.stderr_text()
                errors = [ln for ln in text.splitlines() if ln.startswith("error: ")]
                if self.proc.returncode == 2 and errors:
                    # serve refused its arguments: bad input to bench, not a crash
                    raise RidgelineError(f"--target emulator: ridgeline serve refused its "
                                         f"arguments: {errors[-1][len('error: '):]}")
                raise RuntimeError(f"ridgeline serve exited with {self.proc.returncode}: "
                                   f"{text[-2000:]}")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError("ridgeline serve did not start within "
                                   f"{self.startup_timeout_s} s: {self.stderr_text()[-2000:]}")
            time.sleep(0.02)
        self.base_url = found[0]
        while not self._healthy():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"ridgeline serve never became healthy: "
                                   f"{self.stderr_text()[-2000:]}")
            time.sleep(0.02)
        return self

    def _read_stdout(self, found: list[str]) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        # Keep draining stdout for the whole life of the process, so it never blocks.
        for line in self.proc.stdout:
            self._stdout_lines.append(line)
            if line.startswith(READY_PREFIX) and not found:
                found.append(line[len(READY_PREFIX):].strip())

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.base_url + "/health", timeout=2) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def stderr_text(self) -> str:
        self._stderr.flush()
        self._stderr.seek(0)
        return self._stderr.read()

    def stop(self) -> int | None:
        """SIGTERM, wait, then SIGKILL if needed. Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._stderr.close()
        return self.proc.returncode

    def __enter__(self) -> EmulatorProcess:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


__all__ = ["READY_PREFIX", "EmulatorProcess", "bind_socket", "running_in_thread", "running_server",
           "serve_app"]

"""A deadline for a request's headers: a connection that opens and then sends its request
line and headers slowly (or not at all) is closed after `header_timeout_s`.

uvicorn has no such limit: its keep-alive timer runs only between requests after a
response, and any byte cancels it, so a client that connects and trickles a header
("slowloris") holds a connection and its buffers forever. nginx calls this
`client_header_timeout` (default 60 s), Apache `RequestReadTimeout header=20-40`.

The limit wraps uvicorn's own HTTP protocol class (httptools or h11, whichever uvicorn
would pick), relying only on what both share: a new `cycle` object is created when a
request's headers are complete. The timer is armed when a connection opens and when the
first bytes of a request arrive after the previous response finished; it is cancelled
as soon as the headers are complete. Slow bodies and slow readers are not covered.
"""

from __future__ import annotations

import asyncio
import importlib.util
from typing import Any

DEFAULT_HEADER_TIMEOUT_S = 30.0


def base_protocol_class(http: str = "auto") -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol class for `http` ("auto": httptools if installed, else h11)."""
    if http == "auto":
        http = "httptools" if importlib.util.find_spec("httptools") else "h11"
    if http == "httptools":
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        return HttpToolsProtocol
    if http == "h11":
        from uvicorn.protocols.http.h11_impl import H11Protocol

        return H11Protocol
    raise ValueError(f"http implementation: got {http!r}; allowed: auto, httptools, h11")


def with_header_timeout(base: type[Any], header_timeout_s: float) -> type[Any]:
    """A subclass of uvicorn protocol `base` that closes connections whose request headers
    are not complete within `header_timeout_s` seconds."""

    class HeaderTimeoutProtocol(base):
        _header_timer: asyncio.TimerHandle | None = None
        _cycle_when_armed: Any = None

        def _arm_header_timer(self) -> None:
            self._cancel_header_timer()
            self._cycle_when_armed = self.cycle
            self._header_timer = asyncio.get_running_loop().call_later(
                header_timeout_s, self._header_timeout)

        def _cancel_header_timer(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _header_timeout(self) -> None:
            self._header_timer = None
            if self.cycle is self._cycle_when_armed and not self.transport.is_closing():
                self.transport.close()  # headers never completed: free the connection

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm_header_timer()

        def data_received(self, data: bytes) -> None:
            idle = self.cycle is None or self.cycle.response_complete
            if self._header_timer is None and idle:
                self._arm_header_timer()  # the first bytes of the next request
            super().data_received(data)
            if self._header_timer is not None and self.cycle is not self._cycle_when_armed:
                self._cancel_header_timer()  # a new request's headers are complete

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_header_timer()
            super().connection_lost(exc)

    HeaderTimeoutProtocol.__name__ = f"HeaderTimeout{base.__name__}"
    HeaderTimeoutProtocol.__qualname__ = HeaderTimeoutProtocol.__name__
    return HeaderTimeoutProtocol


__all__ = ["DEFAULT_HEADER_TIMEOUT_S", "base_protocol_class", "with_header_timeout"]

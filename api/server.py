"""uvicorn's h11 protocol with a deadline for a request's head: `uvicorn api.main:app --http api.server:Protocol`.

uvicorn times out an idle kept-alive connection but not a slow one: a client that sends half its headers, or one
byte a second, held a connection (and its memory) for as long as it liked. Here a request line and its
headers must be complete within API_HEADER_TIMEOUT_S of their first byte (or of the connection, for the first
request); past that the client gets a 408 and the connection is closed. The body's deadline is api/limits.py's.
"""

import asyncio
import json
import logging
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from shared.core.settings import get_settings

log = logging.getLogger(__name__)


def _timeout_response(seconds: float) -> bytes:
    """A raw 408 problem+json that closes the connection (no request was parsed to answer through h11)."""
    body = json.dumps({
        "type": "about:blank",
        "title": "Request timeout",
        "status": 408,
        "detail": f"the request line and headers did not arrive within {seconds:g} s",
    }).encode()  # fmt: skip
    head = (
        "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/problem+json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


def command(uvicorn: str, *, host: str, port: int | str) -> list[str]:
    """The argv that serves the API with this protocol (the tests' and benches' stacks run it)."""
    return [
        uvicorn,
        "api.main:app",
        "--http",
        "api.server:Protocol",
        "--no-proxy-headers",
        "--host",
        host,
        "--port",
        str(port),
    ]


class Protocol(H11Protocol):
    """H11Protocol whose every request head has a deadline."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.head_timeout_s = get_settings().api_header_timeout_s
        self._head_deadline: asyncio.TimerHandle | None = None
        self._head_begun = False  # a byte of the awaited head has come

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """A new connection: its first request's head is due within the deadline."""
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        """Bytes of a new request start its head's deadline; a complete head stops it."""
        if self.conn.their_state is h11.IDLE:
            if self._head_deadline is None:
                self._arm()
            self._head_begun = True
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._disarm()
            self._head_begun = False

    def connection_lost(self, exc: Exception | None) -> None:
        """The connection went: its deadline with it."""
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._head_deadline = self.loop.call_later(self.head_timeout_s, self._head_too_slow)

    def _disarm(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_too_slow(self) -> None:
        """The head is late: a 408 for a head begun and not finished (nothing at all: closed quietly, as a browser's
        unused preconnection should be), then close."""
        self._head_deadline = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        if self._head_begun and self.conn.our_state is h11.IDLE:
            log.info("closing a connection from %s: request head not complete within %g s", self.client,
                     self.head_timeout_s)  # fmt: skip
            self.transport.write(_timeout_response(self.head_timeout_s))
        self.transport.close()

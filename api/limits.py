"""Bounds applied at the door, before any route runs: body sizes and deadlines, control characters, points per job.

A pure ASGI middleware, so a body is counted as it arrives: a declared Content-Length over the
limit is refused before a byte of the body is read, and a chunked body (no Content-Length) is cut
off with the same 413 at the first chunk that passes the limit. Uploads (POST /v1/cnns) get
MAX_UPLOAD_BYTES; every other body MAX_JSON_BYTES. A body not in by its deadline (API_BODY_TIMEOUT_S, uploads
API_UPLOAD_TIMEOUT_S, from the route's first read) gets a 408 and the connection is closed.
"""

import asyncio
import logging
import re
from urllib.parse import unquote_to_bytes

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.problems import problem
from shared.core.settings import get_settings
from shared.jobs import request as schemas

log = logging.getLogger(__name__)

# Requests whose body is an upload; the rest are JSON. The form's own fields and boundaries ride on top.
UPLOADS = {("POST", "/v1/cnns")}
FORM_OVERHEAD = 64 * 1024
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class _TooLarge(Exception):
    """The body passed its limit, or its deadline, while the route was reading it."""


class RequestLimits:
    """ASGI middleware: bounded bodies (413), no control characters in the URL (422), the job points limit."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse what is over a limit, else run the app with a receive that counts bytes."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        settings = get_settings()
        path = str(scope.get("path", ""))
        query = unquote_to_bytes(bytes(scope.get("query_string", b"")).replace(b"+", b" "))
        # Path segments and queries carry CNN and machine names: a NUL or newline must not reach PostgreSQL.
        if _CONTROL.search(path) or _CONTROL.search(query.decode("latin-1")):
            detail = "the URL holds a control character (NUL, newline, …); names never contain one"
            await problem(422, "Invalid request", detail, path)(scope, receive, send)
            return
        upload = (scope.get("method"), path.rstrip("/")) in UPLOADS
        limit = settings.max_upload_bytes if upload else settings.max_json_bytes
        allowed = limit + FORM_OVERHEAD if upload else limit
        what = "upload" if upload else "request body"
        declared = _content_length(scope)
        if declared is not None and declared > allowed:
            detail = f"{what} of {declared} bytes is over the limit of {limit} bytes"
            await problem(413, "Content too large", detail, path)(scope, receive, send)
            return

        timeout = settings.api_upload_timeout_s if upload else settings.api_body_timeout_s
        deadline: float | None = None  # set at the route's first read
        whole = False
        received = 0
        started = False  # the app began its response: too late for ours
        answered = False  # we sent the 413: what the app sends after is dropped

        async def counting_receive() -> Message:
            nonlocal received, answered, deadline, whole
            if answered:
                return {"type": "http.disconnect"}
            if whole:  # the body is in: later reads wait for a disconnect, which has no deadline
                return await receive()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout if deadline is None else deadline
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                if not started:
                    detail = f"{what} did not arrive within {timeout:g} s"
                    late = problem(408, "Request timeout", detail, path)
                    late.headers["Connection"] = "close"  # uvicorn then closes it: the rest of the body is not read
                    await late(scope, receive, send)
                    answered = True
                log.info("%s to %s cut off: not complete within %g s", what, path, timeout)
                raise _TooLarge from None
            if message["type"] == "http.request":
                whole = not message.get("more_body", False)
                received += len(message.get("body", b""))
                if received > allowed:
                    if not started:
                        detail = f"{what} is over the limit of {limit} bytes"
                        await problem(413, "Content too large", detail, path)(scope, receive, send)
                        answered = True
                    # The route's read fails, so it stops reading and stores nothing.
                    raise _TooLarge
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if answered:
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        token = schemas.points_limit.set(settings.max_points_per_job)
        try:
            await self.app(scope, counting_receive, guarded_send)
        except _TooLarge:
            pass
        except Exception:
            if not answered:
                raise
            # Whatever the route made of its cut-off body, the client already has its 413.
            log.debug("request cut off at the body limit; the route's own error is dropped", exc_info=True)
        finally:
            schemas.points_limit.reset(token)


def _content_length(scope: Scope) -> int | None:
    headers: list[tuple[bytes, bytes]] = scope.get("headers", [])
    for name, value in headers:
        if name == b"content-length":
            text = value.decode("latin-1").strip()
            if not text.isdigit():
                return None
            return int(text) if len(text) <= 18 else 10**18  # int() refuses thousands of digits
    return None

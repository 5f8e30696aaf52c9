"""Each request observed: a request id, one log line with its route, status and job, and the HTTP metrics.

A pure ASGI middleware, outside every other one, so refusals at the door (413, 422) and errors count too.
The route is the matched route's template (`/v1/jobs/{job_id}`), never the raw path: the metrics' labels
stay few whatever URLs clients send.
"""

import logging
import re
import time
import uuid
from typing import Any

from prometheus_client import Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.metrics import REGISTRY
from shared.core import logs

log = logging.getLogger("api.requests")

REQUESTS = Counter(
    "traincast_http_requests",
    "HTTP requests this API process answered, by method, route template and status",
    ["method", "route", "status"],
    registry=REGISTRY,
)
LATENCY = Histogram(
    "traincast_http_request_duration_seconds",
    "Time this API process took to answer, by route template",
    ["route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    registry=REGISTRY,
)
UNMATCHED = "<unmatched>"
# A client's X-Request-ID is kept when it is a plain token; anything else gets one of ours.
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
# Probes and scrapes: logged at DEBUG, or they would drown the lines that follow jobs.
QUIET = {"/healthz", "/readyz", "/metrics"}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_METHODS = {"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"}


def _request_id(scope: Scope) -> str:
    for name, value in scope.get("headers", []):
        if name == b"x-request-id":
            text = value.decode("latin-1")
            if _REQUEST_ID.match(text):
                return text
    return uuid.uuid4().hex


def _job_id(scope: Scope) -> str | None:
    value = (scope.get("path_params") or {}).get("job_id")
    try:
        return str(uuid.UUID(str(value))) if value is not None else None
    except ValueError:
        return None  # the route answers 422; the line keeps no client-chosen text


class Observe:
    """ASGI middleware: X-Request-ID, a log line per request with its fields, the request counter and latency."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the request inside a log context; count and log it when it ends."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = _request_id(scope)
        status = 500  # unless the app starts a response
        started = time.perf_counter()

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                message["headers"] = [*message.get("headers", []), (b"x-request-id", request_id.encode())]
            await send(message)

        with logs.context(request_id=request_id) as fields:
            try:
                await self.app(scope, receive, send_with_id)
            finally:
                self._record(scope, fields, status, time.perf_counter() - started)

    @staticmethod
    def _record(scope: Scope, fields: dict[str, Any], status: int, seconds: float) -> None:
        route = getattr(scope.get("route"), "path", None) or UNMATCHED
        method = scope.get("method", "")
        method = method if method in _METHODS else "OTHER"
        REQUESTS.labels(method, route, str(status)).inc()
        LATENCY.labels(route).observe(seconds)
        if job_id := _job_id(scope):
            fields["job_id"] = job_id
        level = logging.DEBUG if route in QUIET and status < 500 else logging.INFO
        path = _CONTROL.sub("?", str(scope.get("path", ""))[:200])
        log.log(
            level,
            "%s %s %d",
            method,
            path,
            status,
            extra={"route": route, "status": status, "duration_ms": round(seconds * 1000, 1)},
        )

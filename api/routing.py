"""Routes whose JSON body is parsed in a worker thread, not on the event loop that answers /healthz.

FastAPI parses a body with json.loads on the event loop: a 1 MiB body of 200,000 strings held every other request
(the /healthz probe too) for tens of milliseconds. Parsed here first, in the threadpool, and left where Starlette's
Request.json() keeps it, FastAPI finds it parsed; a body that does not parse is left for FastAPI to refuse as before.
"""

import contextlib
import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response


class ParsedOffLoop(APIRoute):
    """An APIRoute that parses a JSON body in the threadpool before FastAPI reads it."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def parsed_first(request: Request) -> Response:
            if "json" in request.headers.get("content-type", ""):
                body = await request.body()
                if body:
                    # One that does not parse: FastAPI parses it again and answers its own 422.
                    with contextlib.suppress(ValueError):
                        request._json = await run_in_threadpool(json.loads, body)
            return await handle(request)

        return parsed_first

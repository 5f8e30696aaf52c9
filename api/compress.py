"""gzip for responses of a useful size: large enough to gain, small enough that compressing costs less than sending."""

from starlette.datastructures import Headers
from starlette.middleware.gzip import GZipMiddleware, GZipResponder
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# Below this, gzip's header costs about what it saves.
MINIMUM_SIZE = 1024
# Above this (a 63,488-point result's JSON is about 43 MB) gzip costs about a second of CPU per response even
# at level 1, more than sending the body takes on a LAN: such a body goes as it is; a client pages predictions.
MAXIMUM_SIZE = 8 * 1024 * 1024
# Level 1 packs a result's JSON about 3.3× (level 6: 4×) at a quarter of level 6's CPU (63,488 synthetic points).
LEVEL = 1


class GZip(GZipMiddleware):
    """Starlette's gzip for clients that accept it, for bodies of MINIMUM_SIZE to MAXIMUM_SIZE bytes."""

    def __init__(self, app: ASGIApp) -> None:
        super().__init__(app, minimum_size=MINIMUM_SIZE, compresslevel=LEVEL)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or "gzip" not in Headers(scope=scope).get("Accept-Encoding", ""):
            await self.app(scope, receive, send)
            return
        responder = _Bounded(
            self.app,
            self.minimum_size,
            compresslevel=self.compresslevel,
            thread_minimum_size=self.thread_minimum_size,
            exclude_content_types=self.exclude_content_types,
        )
        await responder(scope, receive, send)


class _Bounded(GZipResponder):
    too_large = False

    async def send_with_compression(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            length = Headers(raw=message.get("headers", [])).get("content-length")
            self.too_large = length is not None and int(length) > MAXIMUM_SIZE
        if self.too_large:
            await self.send(message)
        else:
            await super().send_with_compression(message)

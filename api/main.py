"""The FastAPI app: `uvicorn api.main:app --http api.server:Protocol` (api/server.py: request heads have a deadline)."""

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from anyio import to_thread
from fastapi import FastAPI

from api import problems, waits
from api.compress import GZip
from api.limits import RequestLimits
from api.observe import Observe
from api.routers import agents, cnns, fleet, health, jobs, keys, machines, measurements, metrics, web
from shared.cnn import builtins as cnn_registry
from shared.core import logs, secrets
from shared.core.settings import get_settings

# uvicorn set up its loggers before importing this module: ours replace them (JSON lines unless on a terminal).
logs.setup("api")

# With TRAINCAST_SSM_PATH set, DATABASE_URL and REDIS_URL come from SSM (before any request reads them).
secrets.load_from_environment()


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Load the built-in CNNs' registry (a JSON file; no torch) and build the OpenAPI document before the first
    request, not during it (the document took ~170 ms on the event loop, stalling every other request)."""
    cnn_registry.names()
    app.openapi()
    # Sync routes run in anyio's thread pool (40 threads by default). Each runnable thread holds the GIL for up to
    # 5 ms at a time, so 40 busy ones (40 cancels at once beside 4 streamed results) kept the event loop, and
    # /healthz, waiting 130-160 ms; fewer threads queue the rest on the loop, where waiting costs nothing.
    to_thread.current_default_thread_limiter().total_tokens = get_settings().api_threads
    # A loop wake-up waits up to one switch interval for the GIL, and an answer takes several wake-ups: with 5 ms
    # that was ~90-100 ms for /healthz in a burst of streamed results; shorter intervals cost the threads little.
    sys.setswitchinterval(get_settings().api_gil_switch_ms / 1000)
    yield
    waits.stop()


app = FastAPI(
    title="Traincast",
    version="0.1.0",
    description="Predict CNN training time and cost per GPU machine type and batch size.",
    lifespan=lifespan,
)
problems.install(app)
app.add_middleware(RequestLimits)
app.add_middleware(GZip)
# Added last, so outermost: requests refused at the door are logged and counted too.
app.add_middleware(Observe)
routers = (jobs, cnns, machines, measurements, agents, fleet, keys, health, metrics, web)
for router in (module.router for module in routers):
    app.include_router(router)

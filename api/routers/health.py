"""Liveness and readiness."""

from typing import Any

import redis
from fastapi import APIRouter
from fastapi.responses import JSONResponse

from shared.core import tasks
from shared.core.db import transaction
from shared.core.errors import ServiceUnavailable

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up: answered on the event loop itself, so it waits on no thread another route holds."""
    return {"status": "ok"}


@router.get("/readyz", response_model=None)
def readyz() -> dict[str, Any] | JSONResponse:
    """Database and broker reachable."""
    checks: dict[str, str] = {}
    try:
        with transaction() as cur:
            cur.execute("SELECT 1")
        checks["database"] = "ok"
    except ServiceUnavailable as exc:
        checks["database"] = exc.detail
    try:
        tasks.redis_client(socket_connect_timeout=2).ping()
        checks["broker"] = "ok"
    except redis.RedisError as exc:
        checks["broker"] = f"Redis unreachable: {exc}"
    if all(v == "ok" for v in checks.values()):
        return {"status": "ready", "checks": checks}
    from api.problems import problem

    return problem(
        503, "Not ready", "; ".join(f"{k}: {v}" for k, v in checks.items() if v != "ok"), "/readyz", checks=checks
    )

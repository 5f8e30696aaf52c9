"""GET /metrics: the service's figures for Prometheus, for an admin key or the METRICS_TOKEN."""

import hmac
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from fastapi.security import HTTPAuthorizationCredentials
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from api.auth import authenticate, bearer
from api.metrics import REGISTRY
from shared import keys
from shared.core.settings import get_settings

router = APIRouter(tags=["health"])


async def scraper(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
) -> None:
    """Let the METRICS_TOKEN through (a scraper needs no API key); anyone else needs an admin key."""
    token = get_settings().metrics_token
    if token and credentials and hmac.compare_digest(credentials.credentials.encode(), token.encode()):
        return
    keys.require(await authenticate(request, credentials), "admin")


@router.get(
    "/metrics",
    response_class=Response,
    dependencies=[Depends(scraper)],
    responses={200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}, "description": "metrics"}},
)
def metrics() -> Response:
    """Jobs, layer benchmarks, queues, agents, the fleet and HTTP requests in Prometheus's text format."""
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

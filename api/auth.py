"""Who may call what: FastAPI dependencies that check the bearer key, its scope, its request rate and points limit."""

import ipaddress
from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from api import ratelimit
from shared import keys
from shared.core.errors import RateLimited, Unauthorized
from shared.core.settings import get_settings
from shared.jobs import request as schemas
from shared.keys import Principal

# auto_error off: a missing key is our own 401 problem+json, not FastAPI's 403.
bearer = HTTPBearer(auto_error=False, description="An API key: `traincast keys create --name N --scope S`")


def client_address(request: Request) -> str:
    """Who sent the request: the TCP peer, unless that peer is one of API_TRUSTED_PROXIES, whose X-Forwarded-For then
    names it (the right-most address not itself a trusted proxy). With no trusted proxy (the default) a header the
    client wrote is never believed: one made-up address per request escaped every throttle."""
    peer = request.client.host if request.client else "unknown"
    trusted = get_settings().trusted_proxy_networks()
    if not trusted or not _within(peer, trusted):
        return peer
    hops = [h.strip() for h in ",".join(request.headers.getlist("x-forwarded-for")).split(",") if h.strip()]
    for hop in reversed(hops):
        if not _within(hop, trusted):
            return hop
    return peer


def _within(address: str, networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in net for net in networks)


def failure_buckets(request: Request, token: str | None) -> list[tuple[str, float]]:
    """The failed-authentication buckets a request counts against: its client address, and the key id it names."""
    per_min = get_settings().api_auth_failures_per_min
    buckets = [(f"addr:{client_address(request)}", per_min)]
    match = keys.KEY.match(token or "")
    if match:
        buckets.append((f"key:{match.group(1)}", per_min * 10))
    return buckets


async def checked(request: Request, token: str | None) -> Principal:
    """The token's principal; a failure counts against its address and key id, and once either has failed too often
    (API_AUTH_FAILURES_PER_MIN) further failures get 429 instead of 401.

    A right key is never refused for failures it did not make (behind a proxy, one attacker would otherwise lock
    everyone out): its secret is compared whatever the buckets hold, which costs one indexed SELECT and a SHA-256.
    A token that is not even shaped like a key is refused at once while locked out.
    """
    buckets = failure_buckets(request, token)
    try:
        await run_in_threadpool(ratelimit.failed_auth, buckets=buckets, take=False)
        locked = None
    except RateLimited as exc:
        locked = exc
    if locked is not None and not keys.KEY.match(token or ""):
        raise locked
    try:
        return await run_in_threadpool(keys.authenticate, token=token)
    except Unauthorized:
        if token:  # a request without a key guesses nothing
            await run_in_threadpool(ratelimit.failed_auth, buckets=buckets, take=True)
        if locked is not None:
            raise locked from None
        raise


async def authenticate(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
) -> Principal:
    """The request's key, checked and counted against its rate (once per request); sets its points per job limit."""
    principal = await checked(request, credentials.credentials if credentials else None)
    rate = principal.rate_per_s or get_settings().api_rate_per_key_s
    await run_in_threadpool(ratelimit.take, key_id=principal.key_id, rate_per_s=rate)
    if principal.max_points_per_job is not None:
        # Here, not in a sync dependency: a threadpool call sets the variable in a copy of the context. FastAPI
        # validates the body (shared/jobs/request.py reads the limit) after the dependencies, in this context;
        # api/limits.py set the default for the request and resets it when the request ends.
        schemas.points_limit.set(principal.max_points_per_job)
    return principal


def require(scope: str) -> Callable[[Principal], Principal]:
    """A dependency giving the request's principal, 403 unless its scope includes `scope`."""
    if scope not in keys.SCOPES:
        raise ValueError(f"unknown scope {scope!r}")

    def check(principal: Annotated[Principal, Depends(authenticate)]) -> Principal:
        keys.require(principal, scope)
        return principal

    check.__name__ = f"require_{scope}"
    return check


Reader = Annotated[Principal, Depends(require("read"))]
Submitter = Annotated[Principal, Depends(require("submit"))]
Admin = Annotated[Principal, Depends(require("admin"))]

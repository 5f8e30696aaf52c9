"""Traincast's exceptions.

TraincastError                 base: every error we raise on purpose
├── ServiceUnavailable         PostgreSQL or Redis cannot be reached
├── NotFound                   a job, CNN or machine type that does not exist
├── InvalidRequest             input a person must correct (bad batch sizes, image size, …)
│   ├── ExtractionError        a CNN could not be read into conv layers
│   └── OverBudget             a job needing more benchmark seconds than its key's whole day: no wait helps
├── PayloadTooLarge            an upload over the configured size limit
├── Unauthorized               no API key, or one that is unknown or revoked (401, WWW-Authenticate)
├── Forbidden                  a valid key whose scope does not allow the request (403)
├── RateLimited                a key over its requests per second (429, Retry-After)
├── Conflict                   idempotency key reused with a different request; bad state change
└── FleetError                 the AWS fleet could not do what it was asked
    ├── CapacityShort          no subnet or market had capacity now: retried later, not fatal
    └── LaunchRefused          AWS refused the launch request itself (permissions, AMI, settings)
        └── QuotaShort         every market's vCPU quota for the type's family is too low (Service Quotas)
"""

from typing import Any


class TraincastError(Exception):
    """Base of every error Traincast raises on purpose."""

    status = 500
    title = "Internal error"

    def __init__(self, detail: str, **context: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.context = context


class ServiceUnavailable(TraincastError):
    """A backing service (PostgreSQL, Redis) cannot be reached."""

    status = 503
    title = "Service unavailable"
    # Clients (and the CLI) retry after this; a restart of PostgreSQL or Redis takes seconds.
    headers = {"Retry-After": "5"}


class NotFound(TraincastError):
    """The thing asked for does not exist."""

    status = 404
    title = "Not found"


class InvalidRequest(TraincastError):
    """The request cannot be carried out as given."""

    status = 422
    title = "Invalid request"


class Conflict(TraincastError):
    """The request conflicts with the current state."""

    status = 409
    title = "Conflict"


class ExtractionError(InvalidRequest):
    """A CNN could not be read into its conv layers."""

    title = "Cannot read CNN"


class OverBudget(InvalidRequest):
    """A job whose benchmarks need more seconds than its key may spend in a whole day: no retry can run it."""

    title = "Larger than the key's daily budget"


class PayloadTooLarge(TraincastError):
    """An upload over the configured size limit."""

    status = 413
    title = "Upload too large"


class FleetError(TraincastError):
    """The AWS fleet could not do what it was asked."""

    status = 502
    title = "Fleet error"


class CapacityShort(FleetError):
    """Every subnet and market tried was short of capacity for the instance type."""

    status = 503
    title = "Capacity short"


class LaunchRefused(FleetError):
    """AWS refused a launch for a reason other than capacity; retrying will not help by itself."""

    title = "Launch refused"


class QuotaShort(LaunchRefused):
    """Every market tried refused for a vCPU quota (VcpuLimitExceeded, MaxSpotInstanceCountExceeded)."""

    title = "Quota too low"


class Unauthorized(TraincastError):
    """No API key was sent, or it is unknown or revoked."""

    status = 401
    title = "Unauthorized"
    headers = {"WWW-Authenticate": 'Bearer realm="traincast"'}


class Forbidden(TraincastError):
    """The key is valid but its scope does not allow this request."""

    status = 403
    title = "Forbidden"


class RateLimited(TraincastError):
    """A key sent more requests per second than it may."""

    status = 429
    title = "Too many requests"

    def __init__(self, detail: str, *, retry_after_s: int, **context: Any) -> None:
        super().__init__(detail, retry_after_s=retry_after_s, **context)
        self.headers = {"Retry-After": str(retry_after_s)}

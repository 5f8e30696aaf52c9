"""Traincast's exceptions.

TraincastError                 base: every error we raise on purpose
├── ServiceUnavailable         PostgreSQL or Redis cannot be reached
├── NotFound                   a job, CNN or machine type that does not exist
├── InvalidRequest             input a person must correct (bad batch sizes, image size, …)
│   └── ExtractionError        a CNN could not be read into conv layers
├── PayloadTooLarge            an upload over the configured size limit
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

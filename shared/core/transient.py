"""Telling a passing outage (a database restart, a dropped connection) from an error in the work itself."""

import psycopg2
import redis
from kombu.exceptions import OperationalError as BrokerError

from shared.core.errors import ServiceUnavailable

# SQLSTATE classes and codes that say "try again later", not "this work is wrong": connection
# exceptions, a server shutting down or starting, serialization failures and deadlocks.
_TRANSIENT_CLASSES = ("08", "53")
_TRANSIENT_CODES = {"57P01", "57P02", "57P03", "40001", "40P01"}


def is_transient(exc: BaseException) -> bool:
    """True for errors retrying later cures: PostgreSQL or Redis unreachable or restarting."""
    # redis.TimeoutError is not a ConnectionError: a Redis stopping mid-command times out instead of refusing.
    if isinstance(
        exc, ServiceUnavailable | psycopg2.InterfaceError | redis.ConnectionError | redis.TimeoutError | BrokerError
    ):
        return True
    if isinstance(exc, psycopg2.OperationalError | psycopg2.extensions.TransactionRollbackError):
        # A lost connection has no SQLSTATE; a limit exceeded (e.g. jsonb too large) is also an
        # OperationalError, but with code class 54: that one is the work's fault.
        code = getattr(exc, "pgcode", None)
        return code is None or code[:2] in _TRANSIENT_CLASSES or code in _TRANSIENT_CODES
    return False

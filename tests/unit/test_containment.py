"""Containment as configuration: which errors are transient, and every worker task has a time limit."""

import psycopg2
import psycopg2.errors
import redis

from shared.core.errors import ServiceUnavailable
from shared.core.settings import get_settings
from shared.core.transient import is_transient


def test_which_errors_are_transient() -> None:
    """Connection losses and shutdowns are transient; a limit exceeded (jsonb too large) is not."""
    assert is_transient(psycopg2.OperationalError("server closed the connection unexpectedly"))
    assert is_transient(psycopg2.InterfaceError("connection already closed"))
    assert is_transient(ServiceUnavailable("down"))
    assert is_transient(redis.ConnectionError("refused")) and is_transient(redis.TimeoutError("timed out"))
    assert is_transient(redis.BusyLoadingError("LOADING")) and not is_transient(redis.ResponseError("WRONGTYPE"))

    def with_code(code: str) -> Exception:
        exc = psycopg2.OperationalError("x")
        monkey = type("E", (psycopg2.OperationalError,), {"pgcode": code})
        return monkey(exc)

    assert is_transient(with_code("57P01"))  # admin_shutdown
    assert not is_transient(with_code("54000"))  # program_limit_exceeded
    assert not is_transient(OverflowError("x")) and not is_transient(psycopg2.errors.UniqueViolation())


def test_worker_tasks_have_time_limits() -> None:
    """Every worker task carries the soft and hard time limits of the settings, the soft one first."""
    from shared.core import tasks
    from worker.app import app

    settings = get_settings()
    assert settings.worker_task_soft_time_limit_s < settings.worker_task_time_limit_s
    for name in (tasks.PLAN_JOB, tasks.ADVANCE_JOBS, tasks.RECONCILE):
        assert app.tasks[name].soft_time_limit == settings.worker_task_soft_time_limit_s
        assert app.tasks[name].time_limit == settings.worker_task_time_limit_s

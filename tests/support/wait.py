"""Waiting on conditions instead of fixed sleeps."""

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def wait_until(
    check: Callable[[], T | None], timeout: float, what: str, interval: float = 0.1, log: Callable[[], str] = str
) -> T:
    """Call `check` until it returns something truthy and return that; fail saying what was awaited."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}\n{log()[-4000:]}")
        time.sleep(interval)


TERMINAL = ("succeeded", "failed", "canceled")


def job_finished(
    get: Callable[[], dict[str, Any]], job_id: str, timeout: float, log: Callable[[], str] = str, interval: float = 0.3
) -> dict[str, Any]:
    """Poll a job (`get` returns it as the API answers) until it has ended; return it whatever its status."""

    def ended() -> dict[str, Any] | None:
        job = get()
        return job if job["status"] in TERMINAL else None

    return wait_until(ended, timeout, f"job {job_id} to end", interval, log)

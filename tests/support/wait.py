"""Waiting on conditions instead of fixed sleeps."""

import time
from collections.abc import Callable
from typing import TypeVar

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

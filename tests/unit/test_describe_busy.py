"""Describing a built-in CNN at a new size (a torch child process) is bounded: one at a time, a busy API answers
503 at once instead of queueing requests in its thread pool, and a size described once is never traced again."""

import subprocess
from typing import Any

import pytest

from shared.cnn import registry
from shared.core.errors import ServiceUnavailable


def test_a_busy_describer_answers_503_and_a_described_size_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """While another description runs, a new size is refused (503, Retry-After); once described, it is cached."""
    registry._builtin_view.cache_clear()
    assert registry._CHILD.acquire(timeout=1)
    try:
        with pytest.raises(ServiceUnavailable, match="retry"):
            registry._builtin_view("resnet18", 72, 1000)
    finally:
        registry._CHILD.release()
    children: list[Any] = []
    run = subprocess.run

    def counted(*args: Any, **kwargs: Any) -> Any:
        children.append(args)
        return run(*args, **kwargs)

    monkeypatch.setattr(subprocess, "run", counted)
    first = registry._builtin_view("resnet18", 72, 1000)
    again = registry._builtin_view("resnet18", 72, 1000)
    assert first == again and first["conv_count"] == 20 and len(children) == 1
    assert ServiceUnavailable.headers["Retry-After"]

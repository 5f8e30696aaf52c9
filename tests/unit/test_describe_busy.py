"""Describing a built-in CNN at a new size (a warm torch child, a fork per trace) is bounded: one at a time, a busy
API answers 503 at once instead of queueing requests in its thread pool, a size described once is never traced again,
and the child imports torch once for many sizes, survives a failed trace and leaves when idle or late."""

from typing import Any

import pytest

from shared.cnn import registry
from shared.cnn.describer import Describer
from shared.core.errors import ServiceUnavailable, TraincastError


def test_a_busy_describer_answers_503_and_a_described_size_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """While another description runs, a new size is refused (503, Retry-After); once described, it is cached."""
    registry._builtin_view.cache_clear()
    assert registry._CHILD.acquire(timeout=1)
    try:
        with pytest.raises(ServiceUnavailable, match="retry"):
            registry._builtin_view("resnet18", 72, 1000)
    finally:
        registry._CHILD.release()
    traced: list[Any] = []
    describe = registry.DESCRIBER.describe

    def counted(*args: Any, **kwargs: Any) -> Any:
        traced.append(args)
        return describe(*args, **kwargs)

    monkeypatch.setattr(registry.DESCRIBER, "describe", counted)
    first = registry._builtin_view("resnet18", 72, 1000)
    again = registry._builtin_view("resnet18", 72, 1000)
    assert first == again and first["conv_count"] == 20 and len(traced) == 1
    assert ServiceUnavailable.headers["Retry-After"]
    registry.DESCRIBER.close_if_idle()


def test_one_child_describes_many_sizes_and_survives_a_failed_trace() -> None:
    """Two sizes and an unknown CNN from one child; a trace that dies is an error and the next request is answered."""
    describer = Describer(warm_s=30)
    try:
        small = describer.describe("resnet18", 64, 10, timeout_s=60)
        large = describer.describe("resnet18", 320, 1000, timeout_s=60)
        unknown = describer.describe("no_such_cnn", 224, 1000, timeout_s=60)
        assert small["conv_count"] == large["conv_count"] == 20 and small != large
        assert unknown["status"] == 404 and "no_such_cnn" in unknown["error"]
        with pytest.raises(TraincastError, match="without an answer"):
            describer.describe("resnet18", "not a size", 1000, timeout_s=60)  # type: ignore[arg-type]
        assert describer.describe("resnet18", 64, 10, timeout_s=60) == small
        assert describer.started == 1 and describer.running
    finally:
        describer.close_if_idle()
    assert not describer.running


def test_a_late_child_is_killed_and_an_idle_one_leaves() -> None:
    """Past its deadline the child is stopped and the request fails; a warm child leaves after its idle time."""
    describer = Describer(warm_s=0.5)
    with pytest.raises(TraincastError, match="timed out"):
        describer.describe("resnet18", 64, 10, timeout_s=0.01)  # torch is not imported in 10 ms
    assert not describer.running
    assert describer.describe("resnet18", 64, 10, timeout_s=60)["conv_count"] == 20
    assert describer.started == 2 and describer.running
    proc = describer._proc
    assert proc is not None
    proc.wait(timeout=10)  # the idle timer stops it
    assert not describer.running


def test_with_no_warm_time_the_child_leaves_after_each_description(monkeypatch: pytest.MonkeyPatch) -> None:
    """API_DESCRIBE_WARM_S=0: every description starts a child and none is left running after it."""
    from shared.core.settings import get_settings

    monkeypatch.setenv("API_DESCRIBE_WARM_S", "0")
    get_settings.cache_clear()
    try:
        describer = Describer()
        first = describer.describe("resnet18", 64, 10, timeout_s=60)
        assert first["conv_count"] == 20 and not describer.running
        assert describer.describe("resnet18", 96, 10, timeout_s=60)["conv_count"] == 20
        assert describer.started == 2 and not describer.running
    finally:
        monkeypatch.delenv("API_DESCRIBE_WARM_S")
        get_settings.cache_clear()

"""The warm-up's loop in one process (worker/warmup.py): it waits for an agent here; off where settings say so."""

import pytest

from shared.core.settings import get_settings
from worker import warmup


def test_the_loop_waits_while_an_agent_here_measures(monkeypatch: pytest.MonkeyPatch) -> None:
    """Yielding, each step waits (YIELD_S at a time) until no agent on this host measures; not yielding, it does not
    ask."""
    measuring = iter([True, True, False, True, False])
    steps = iter([1, None])
    calls: list[str] = []

    def timing_here() -> bool:
        calls.append("asked")
        return next(measuring)

    def run_step(index: int, *, wait: bool) -> int | None:
        assert wait  # the loop finishes a step another process holds instead of passing it over
        calls.append(f"step {index}")
        return next(steps)

    monkeypatch.setattr(warmup, "timing_here", timing_here)
    monkeypatch.setattr(warmup.time, "sleep", lambda s: calls.append(f"slept {s}"))
    monkeypatch.setattr(warmup, "run_step", run_step)

    assert warmup.warm(yielding=True) == 1
    slept = f"slept {warmup.YIELD_S}"
    assert calls == ["asked", slept, "asked", slept, "asked", "step 0", "asked", slept, "asked", "step 1"]

    calls.clear()
    steps = iter([None])
    assert warmup.warm() == 0
    assert calls == ["step 0"]


def test_the_command_does_nothing_when_the_warm_up_is_off(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`python -m worker.warmup --if-enabled` (scripts/run.sh) runs no step when WARM_ON_START is off; without the flag
    it runs them all."""
    ran: list[bool] = []

    def warm(*, yielding: bool) -> int:
        ran.append(yielding)
        return 3

    monkeypatch.setattr(warmup, "warm", warm)
    monkeypatch.setenv("WARM_ON_START", "0")
    get_settings.cache_clear()
    try:
        assert warmup.main(["--if-enabled"]) == 0
        assert ran == [] and "off" in capsys.readouterr().out
        assert warmup.main([]) == 0
        assert ran == [True] and "3 steps" in capsys.readouterr().out
    finally:
        get_settings.cache_clear()

"""Sending a task over a broken broker connection: a new connection, or an outage the caller can retry."""

from typing import Any

import pytest

from shared.core import tasks
from shared.core.errors import ServiceUnavailable
from shared.core.transient import is_transient


class App:
    """A sending app whose send_task fails as kombu's Redis transport does after a lost connection, or records."""

    def __init__(self, broken: bool, sent: list[str]) -> None:
        self.broken, self.sent = broken, sent

    def send_task(self, name: str, **_kwargs: Any) -> None:
        if self.broken:
            raise AttributeError("'NoneType' object has no attribute 'client'")
        self.sent.append(name)


def apps(monkeypatch: pytest.MonkeyPatch, *broken: bool) -> list[str]:
    """Each new sending app is the next of these (broken or not); what the working ones sent."""
    sent: list[str] = []
    made = iter([App(b, sent) for b in broken])
    tasks.reset_client()
    monkeypatch.setattr(tasks, "make_app", lambda _name: next(made))
    return sent


def test_a_broken_connection_is_replaced_and_the_task_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cached app's connection broke: a new app sends the task."""
    sent = apps(monkeypatch, True, False)
    tasks.send(tasks.PLAN_JOB, args=["x"])
    assert sent == [tasks.PLAN_JOB]
    tasks.reset_client()


def test_a_connection_that_stays_broken_is_a_transient_outage(monkeypatch: pytest.MonkeyPatch) -> None:
    """Broken twice: ServiceUnavailable, which the worker treats as transient (the job is not failed)."""
    apps(monkeypatch, True, True)
    with pytest.raises(ServiceUnavailable) as caught:
        tasks.send(tasks.PLAN_JOB, args=["x"])
    assert is_transient(caught.value)
    tasks.reset_client()

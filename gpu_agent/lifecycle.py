"""The agent's life: registration and heartbeats in PostgreSQL, its current work, and stop requests.

An agent of `local` registers with a description of its device (its GPU, or its CPU), which makes `local` in the
catalog that GPU or a CPU (shared/local_machine.py, migrations/0026_local_device.sql).

A stop request (SIGTERM or SIGINT, relayed by Celery's worker_shutting_down signal) only sets a
flag; measurement code looks at it between windows, so the window in progress is finished and
stored before the task hands its remaining work back to the queue.
"""

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import torch

from gpu_agent import environment
from shared import agents
from shared.core.settings import get_settings
from shared.local_machine import LocalDevice

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Identity:
    """Who this agent process is, as registered."""

    id: uuid.UUID
    machine_type: str
    host: str
    pid: int
    device: str
    environment_id: int
    started_at: datetime
    description: LocalDevice | None = None  # `local` as its agent describes it; None for other machine types


_stop = threading.Event()
_halt = threading.Event()  # ends the heartbeat thread
_me: Identity | None = None
_stop_reason: str | None = None
_busy = False
_idle_since = time.monotonic()


def request_stop(reason: str | None = None) -> None:
    """Ask the running task to finish its current window, store it, and hand back the rest."""
    global _stop_reason
    if reason and _stop_reason is None:
        _stop_reason = reason
    _stop.set()


def idle_for() -> float:
    """Seconds since this agent last finished work (or started); 0 while it measures."""
    return 0.0 if _busy else time.monotonic() - _idle_since


def stop_requested() -> bool:
    """True once a stop was requested in this process."""
    return _stop.is_set()


def clear_stop() -> None:
    """Forget a stop request (for in-process use, e.g. tests)."""
    global _stop_reason
    _stop_reason = None
    _stop.clear()


def identity() -> Identity | None:
    """This process's registration, if it registered."""
    return _me


def start(*, machine_type: str, device: str, environment_id: int, interval_s: float) -> Identity:
    """Register this agent and keep its heartbeat going in a background thread."""
    global _me
    _me = Identity(
        id=uuid.uuid4(),
        machine_type=machine_type,
        host=socket.gethostname(),
        pid=os.getpid(),
        device=device,
        environment_id=environment_id,
        started_at=datetime.now(UTC),
        description=_describe(device) if machine_type == "local" else None,
    )
    _halt.clear()
    _beat()
    threading.Thread(target=_beat_forever, args=(interval_s,), name="agent-heartbeat", daemon=True).start()
    log.info("agent %s registered for %s on %s", _me.id, machine_type, device)
    if _me.description is not None:
        described = _me.description.gpu or "a CPU"
        log.info("local described as %s (%s)", described, _me.description.specs_source or _me.description.device)
    return _me


def stop() -> None:
    """Mark this agent stopped, with why, and end its heartbeats."""
    _halt.set()
    if _me is not None:
        _execute(agents.mark_stopped, agent_id=_me.id, reason=_stop_reason or "stop signal")


def set_work(work: dict[str, Any] | None) -> None:
    """Publish what the agent is measuring now (None: idle)."""
    global _busy, _idle_since
    _busy = work is not None
    if not _busy:
        _idle_since = time.monotonic()
    if _me is not None:
        _execute(agents.set_work, agent_id=_me.id, work=work)


def record_error(message: str) -> None:
    """Publish the last task failure."""
    if _me is not None:
        _execute(agents.set_error, agent_id=_me.id, message=message)


def _describe(device: str) -> LocalDevice | None:
    # Without a description `local` keeps what the catalog says: better than an agent that cannot start.
    try:
        return environment.local_device(torch.device(device))
    except Exception:
        log.warning("could not describe %s for the catalog: local keeps its row as it is", device, exc_info=True)
        return None


def _beat() -> None:
    assert _me is not None
    _execute(
        agents.beat,
        agent_id=_me.id,
        machine_type=_me.machine_type,
        host=_me.host,
        pid=_me.pid,
        device=_me.device,
        environment_id=_me.environment_id,
        started_at=_me.started_at,
        device_description=_me.description,
        # The fleet controller matches instances to heartbeats by this; empty outside the fleet.
        instance_id=get_settings().agent_instance_id or None,
    )


def _beat_forever(interval_s: float) -> None:
    # Not the stop-request flag: after SIGTERM the agent is still alive, finishing a window.
    while not _halt.wait(interval_s):
        _beat()


def _execute(write: Callable[..., None], **params: Any) -> None:
    # Status writes must never fail a measurement: a missed heartbeat only makes the agent look late.
    try:
        write(**params)
    except Exception:
        log.warning("agent status write failed", exc_info=True)

"""Long polls: GET /v1/jobs/{id}?wait=S answers when the job finishes or S seconds pass, whichever comes first.

One thread per API process LISTENs on PostgreSQL's `job_finished` channel (migrations/0023_job_finished_notify.sql)
and wakes the requests waiting on that job. A waiting request holds no thread and no connection. It also reads
the job again every RECHECK_S, so a notification lost while the listener reconnects costs a second, not the wait.
"""

import asyncio
import logging
import select
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

from shared.core.db import connect

log = logging.getLogger(__name__)

CHANNEL = "job_finished"
LISTEN = f"LISTEN {CHANNEL}"
# The longest wait a request may ask for: below the 60 s idle timeout of common proxies and load balancers.
MAX_WAIT_S = 30.0
RECHECK_S = 1.0
RECONNECT_S = 1.0

_waiters: dict[str, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}
_lock = threading.Lock()
_listener: threading.Thread | None = None
# Set by stop() (the app's shutdown): the listener closes its connection and ends within POLL_S.
_stopping = threading.Event()
POLL_S = 1.0
# Set while the listener's LISTEN is in force (notifications from then on reach waiters).
listening = threading.Event()


class Waiter:
    """A request's registration for one job's end."""

    def __init__(self, event: asyncio.Event) -> None:
        self._event = event

    async def until(self, deadline: float) -> bool:
        """Sleep until the job is said to have ended (True) or RECHECK_S / the deadline pass (False)."""
        timeout = min(RECHECK_S, deadline - time.monotonic())
        if timeout <= 0:
            return False
        try:
            await asyncio.wait_for(self._event.wait(), timeout)
        except TimeoutError:
            return False
        self._event.clear()
        return True


@asynccontextmanager
async def finished(job_id: str) -> AsyncIterator[Waiter]:
    """Registered for the job's end before the caller reads it, so an end between the two is not missed."""
    _ensure_listener()
    entry = (asyncio.get_running_loop(), asyncio.Event())
    with _lock:
        _waiters.setdefault(job_id, set()).add(entry)
    try:
        yield Waiter(entry[1])
    finally:
        with _lock:
            held = _waiters.get(job_id)
            if held is not None:
                held.discard(entry)
                if not held:
                    del _waiters[job_id]


def waiting() -> int:
    """Requests waiting now (for tests and metrics)."""
    with _lock:
        return sum(map(len, _waiters.values()))


def _wake(job_id: str) -> None:
    with _lock:
        entries = list(_waiters.get(job_id, ()))
    for loop, event in entries:
        with suppress(RuntimeError):  # that request's loop has closed: nothing left to wake
            loop.call_soon_threadsafe(event.set)


def _ensure_listener() -> None:
    global _listener
    with _lock:
        if _listener is None or not _listener.is_alive():
            _stopping.clear()
            _listener = threading.Thread(target=_listen_forever, name="job-finished-listener", daemon=True)
            _listener.start()


def stop() -> None:
    """End the listener (at the app's shutdown), so no thread outlives the app's database or log streams."""
    global _listener
    with _lock:
        thread, _listener = _listener, None
    _stopping.set()
    if thread is not None:
        thread.join(timeout=POLL_S + 5)


def _listen_forever() -> None:
    """LISTEN and dispatch; on any failure reconnect after RECONNECT_S (waiters meanwhile re-read every RECHECK_S)."""
    while not _stopping.is_set():
        try:
            _listen()
        except Exception as exc:  # noqa: BLE001 - the listener must outlive an outage
            if _stopping.is_set():
                return
            log.warning("job_finished listener lost its connection (%s); reconnecting in %g s", exc, RECONNECT_S)
        _stopping.wait(RECONNECT_S)


def _listen() -> None:
    conn = connect()
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(LISTEN)
        listening.set()
        while not _stopping.is_set():
            if select.select([conn], [], [], POLL_S) == ([], [], []):
                continue
            conn.poll()
            while conn.notifies:
                _wake(conn.notifies.pop(0).payload)
    finally:
        listening.clear()
        conn.close()

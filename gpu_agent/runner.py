"""One loop for every kind of signature work (conv layers, other ops): resume, measure, store, hand back.

A task carries many signatures (worker/coverage.py). What its environment has stored is read once for all of
them; measured rows are kept briefly and written many to a transaction, at most every BENCH_STORE_EVERY_S (and
at the end, before a hand-back and before a failure is recorded); the worker is told after each such write, so
a job's progress moves during a long task without a message per signature.
"""

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

from celery.exceptions import Reject

from gpu_agent import lifecycle
from gpu_agent.store import Measured
from gpu_agent.windows import Outcome
from shared.core import logs, tasks
from shared.core.settings import get_settings
from shared.core.transient import is_transient

log = logging.getLogger(__name__)
Save = Callable[[int, Outcome], None]
# Rows written in one transaction at most; more are written at once rather than waiting for the interval.
STORE_MOST_ROWS = 256


@dataclass(frozen=True)
class SignatureWork:
    """One signature's part of a task: what is stored already, how to measure it and record a failure."""

    signature_id: int
    tag: int | str  # bound to the task's log lines as `signature` (an op's: "op:<id>")
    what: str  # named in log lines
    done: set[int]  # batch sizes its environment has stored (from the task's one read)
    measure: Callable[[list[int], Save], list[int]]  # (batch sizes to do, save) → those a stop left
    record_failure: Callable[[list[int], str], None]  # (batch sizes asked, error)
    work: dict[str, Any] = field(default_factory=dict)  # more of what the agent says it is doing


@dataclass(frozen=True)
class TaskWork:
    """What a task's items share: how to set up an item, how to write many rows."""

    prepare: Callable[[dict[str, Any]], SignatureWork]
    save_many: Callable[[list[Measured]], None]  # one transaction, idempotent


class Pending:
    """Measured rows not yet stored: written together every `every_s` or `most` rows, the worker told each time."""

    def __init__(self, save_many: Callable[[list[Measured]], None], machine_type: str, every_s: float) -> None:
        self._save_many, self._machine_type, self._every_s = save_many, machine_type, every_s
        self._rows: list[Measured] = []
        self._last = time.monotonic()
        self.written = 0

    def add(self, row: Measured) -> None:
        """Keep a row; write what is kept when it is time."""
        self._rows.append(row)
        if len(self._rows) >= STORE_MOST_ROWS or time.monotonic() - self._last >= self._every_s:
            self.flush()

    def flush(self) -> None:
        """Write the kept rows in one transaction and tell the worker (nothing kept: nothing sent)."""
        self._last = time.monotonic()
        if not self._rows:
            return
        self._save_many(self._rows)
        self.written += len(self._rows)
        self._rows = []
        # Progress counts come from the database: the worker recounts the jobs waiting for these rows.
        tasks.send(tasks.ADVANCE_JOBS, machine_type=self._machine_type)


def hand_back(task: str, written: int) -> None:
    """Requeue the task as it came: the next delivery skips every stored row, so nothing is measured twice."""
    log.warning("stop requested: stored %d measurements of %s; handing the rest back to the queue", written, task)
    raise Reject(f"agent stopping; {task} continues from its stored rows", requeue=True)


def recording_failure(measure: Callable[[], list[int]], record: Callable[[str], None]) -> list[int]:
    """Run one signature's measurement; an unexpected error is stored (record(error)) before it fails the task."""
    try:
        return measure()
    except Exception as exc:
        if is_transient(exc):
            raise  # PostgreSQL or Redis away: retried, not a failure of this signature
        # Kept as data (layer_failures, op_failures): jobs waiting for this signature fail after a few
        # such failures instead of waiting for ever (worker/planning.py). Out of memory and infeasible
        # points never get here: they are stored as measurements.
        record(f"{type(exc).__name__}: {exc}")
        raise


def run_items(task: str, machine_type: str, items: list[dict[str, Any]], work: TaskWork) -> int:
    """Measure each item's missing batch sizes; returns rows stored."""
    every_s = get_settings().bench_store_every_s
    pending = Pending(work.save_many, machine_type, every_s)
    published = float("-inf")
    try:
        for n, item in enumerate(items):
            if lifecycle.stop_requested():
                pending.flush()
                hand_back(task, pending.written)
            sig = work.prepare(item)
            todo = sorted(set(item["batch_sizes"]) - sig.done)
            # The task's lines carry the signature from here (the machine type and jobs: shared/core/logs.py).
            logs.bind(signature=sig.tag)
            log.info("measuring %s at %d batch sizes (%d stored)", sig.what, len(todo), len(sig.done))
            if not todo:
                continue
            if time.monotonic() - published >= every_s:
                # Not per signature: a status write each few milliseconds would cost more than a GPU measurement.
                published = time.monotonic()
                left_ids = [i["signature_id"] for i in items[n:]]
                lifecycle.set_work(
                    {"task": task, "signature_id": sig.signature_id, **sig.work, "batch_sizes": todo}
                    | {"item": n + 1, "items": len(items), "signature_ids": left_ids}
                    | {"since": datetime.now(UTC).isoformat()}
                )

            def save(bs: int, outcome: Outcome, sig_id: int = sig.signature_id) -> None:
                pending.add((sig_id, bs, outcome))

            def record(error: str, sig: SignatureWork = sig, todo: list[int] = todo) -> None:
                pending.flush()  # what this task measured before the failure stays measured
                sig.record_failure(todo, error)

            left = recording_failure(partial(sig.measure, todo, save), record)
            if left:
                pending.flush()
                hand_back(task, pending.written)
        pending.flush()
    finally:
        lifecycle.set_work(None)
    return pending.written

"""One loop for every kind of signature work (conv layers, other ops): resume, measure, store, hand back."""

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

from celery.exceptions import Reject

from gpu_agent import lifecycle
from gpu_agent.windows import Outcome
from shared.core import logs, tasks
from shared.core.transient import is_transient

log = logging.getLogger(__name__)
Save = Callable[[int, Outcome], None]


@dataclass(frozen=True)
class SignatureWork:
    """One signature's part of a task: what is stored already, and how to measure, store and record a failure."""

    signature_id: int
    tag: int | str  # bound to the task's log lines as `signature` (an op's: "op:<id>")
    what: str  # named in log lines
    done: set[int]
    measure: Callable[[list[int], Save], list[int]]  # (batch sizes to do, save) → those a stop left
    save: Save
    record_failure: Callable[[list[int], str], None]  # (batch sizes asked, error)
    work: dict[str, Any] = field(default_factory=dict)  # more of what the agent says it is doing


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


def run_items(
    task: str, machine_type: str, items: list[dict[str, Any]], prepare: Callable[[dict[str, Any]], SignatureWork]
) -> int:
    """Measure each item's missing batch sizes, telling the worker after each signature; returns rows stored."""
    written: list[int] = []
    try:
        for n, item in enumerate(items):
            if lifecycle.stop_requested():
                hand_back(task, len(written))
            work = prepare(item)
            todo = sorted(set(item["batch_sizes"]) - work.done)
            # The task's lines carry the signature from here (the machine type and jobs: shared/core/logs.py).
            logs.bind(signature=work.tag)
            log.info("measuring %s at %d batch sizes (%d stored)", work.what, len(todo), len(work.done))
            lifecycle.set_work(
                {"task": task, "signature_id": work.signature_id, **work.work, "batch_sizes": todo}
                | {"item": n + 1, "items": len(items), "since": datetime.now(UTC).isoformat()}
            )

            def save(bs: int, outcome: Outcome, work: SignatureWork = work) -> None:
                work.save(bs, outcome)
                written.append(bs)

            left = recording_failure(partial(work.measure, todo, save), partial(work.record_failure, todo))
            log.info("%s: %d measurements stored", work.what, len(todo) - len(left))
            # Tell the worker after each signature, so job progress moves while we measure.
            tasks.send(tasks.ADVANCE_JOBS, machine_type=machine_type)
            if left:
                hand_back(task, len(written))
    finally:
        lifecycle.set_work(None)
    return len(written)

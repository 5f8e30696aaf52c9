"""The `jobs` table as the worker drives a job: the open row's lock, one planner and one assembler per job, start,
progress, finish, and the passes over many jobs (stale, live plans, recently ended)."""

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any, cast

import psycopg2

from shared.core.db import Cursor, Json, pool, transaction
from shared.jobs import predictions
from shared.jobs.models import JobStatus, Plan, Progress
from shared.jobs.store import (
    LOCK_OWNER,
    OPEN_SQL,
    OWNER_LOCK_CLASS,
    SELECT_KEY_USAGE,
    FinishedJob,
    JobRow,
    KeyUsage,
    PlannedJob,
    StaleJob,
)

S = JobStatus

# The worker's statements (worker/planning.py, reconcile.py, withdrawal.py). Every write is conditional on the job
# being open: a cancel is never undone.
LOCK_OPEN_JOB = f"SELECT * FROM jobs WHERE id = %s AND status IN {OPEN_SQL} FOR UPDATE"
START_JOB = f"""
UPDATE jobs SET status = '{S.RUNNING}', plan = %(plan)s::jsonb, progress = %(progress)s::jsonb,
       started_at = COALESCE(started_at, now()), updated_at = now()
WHERE id = %(id)s AND status IN {OPEN_SQL}
RETURNING id"""
SET_PROGRESS = f"""
UPDATE jobs SET progress = %(progress)s::jsonb, updated_at = now()
WHERE id = %(id)s AND status = '{S.RUNNING}' AND progress IS DISTINCT FROM %(progress)s::jsonb"""
# clock_timestamp(), not now(): now() is when the transaction began, which for a job assembled in it is before the
# assembly ran.
FINISH_JOB = f"""
UPDATE jobs SET status = %(status)s, result = %(result)s, error = %(error)s,
       progress = COALESCE(%(progress)s::jsonb, progress),
       finished_at = clock_timestamp(), updated_at = clock_timestamp()
WHERE id = %(id)s AND status IN {OPEN_SQL}
RETURNING id, status, request, plan"""
SELECT_RUNNING_JOB = f"SELECT * FROM jobs WHERE id = %s AND status = '{S.RUNNING}'"
SELECT_RUNNING_ON = f"SELECT id FROM jobs WHERE status = '{S.RUNNING}' AND request->'machines' ?| %s"
SELECT_STALE = f"""
SELECT id, status FROM jobs
WHERE status IN {OPEN_SQL} AND updated_at < now() - make_interval(secs => %s)
ORDER BY created_at"""
TOUCH = f"UPDATE jobs SET updated_at = now() WHERE id = %s AND status IN {OPEN_SQL}"
# One planner per job (class 14 beside the owner lock's 13): a plan message the reconciler sent again while a slow
# first planning ran must not plan the job a second time, concurrently.
TRY_PLANNING_LOCK = "SELECT pg_try_advisory_lock(%s, hashtext(%s::text)) AS mine"
UNLOCK_PLANNING = "SELECT pg_advisory_unlock(%s, hashtext(%s::text))"
PLANNING_LOCK_CLASS = 14
ASSEMBLY_LOCK_CLASS = 15
# Running jobs keep their queued work, whoever else asked for it too.
SELECT_LIVE_PLANS = f"SELECT id, request, plan FROM jobs WHERE status = '{S.RUNNING}' AND plan IS NOT NULL"
SELECT_RECENTLY_ENDED = f"""
SELECT id, request, plan FROM jobs
WHERE status IN ('{S.CANCELED}', '{S.FAILED}') AND plan IS NOT NULL
  AND finished_at > now() - make_interval(secs => %s)"""


@contextmanager
def locked_open(*, job_id: uuid.UUID) -> Iterator[tuple[Cursor, JobRow | None]]:
    """An open job's row (None if it ended) locked for the transaction: concurrent callers take turns."""
    with transaction() as cur:
        cur.execute(LOCK_OPEN_JOB, (job_id,))
        yield cur, cast(JobRow | None, cur.fetchone())


@contextmanager
def planning_claim(*, job_id: uuid.UUID) -> Iterator[bool]:
    """True inside the block if this process alone may plan the job now; False if another is planning it."""
    with _claim(PLANNING_LOCK_CLASS, job_id) as mine:
        yield mine


@contextmanager
def assembly_claim(*, job_id: uuid.UUID) -> Iterator[bool]:
    """True inside the block if this process alone may assemble the job's result now; False if another is.

    Assembly runs outside the job row's lock (a large result takes seconds), so a cancel meanwhile takes effect at
    once and the finished result is then dropped (finish is conditional on the job being open).
    """
    with _claim(ASSEMBLY_LOCK_CLASS, job_id) as mine:
        yield mine


@contextmanager
def _claim(lock_class: int, job_id: uuid.UUID) -> Iterator[bool]:
    """A session lock on a pooled connection kept for the block and unlocked at its end; if the process dies
    inside the block its connection closes and the lock goes with it, so a later message can take the job up."""
    owner = pool()
    conn = owner.borrow()
    key = (lock_class, str(job_id))
    mine = False
    try:
        with conn, conn.cursor() as cur:
            cur.execute(TRY_PLANNING_LOCK, key)
            row = cur.fetchone()
        mine = bool(row and row[0])
        yield mine
        if mine:
            with conn, conn.cursor() as cur:
                cur.execute(UNLOCK_PLANNING, key)
    except BaseException:
        # Unlocked now where the session still answers (the block failed, not the connection): a closed session's
        # lock goes only when its server process exits, and a retry right after (the next advance) could miss it.
        if mine:
            with suppress(psycopg2.Error), conn, conn.cursor() as cur:
                cur.execute(UNLOCK_PLANNING, key)
        conn.close()  # whatever state the session is in, its lock ends with it
        raise
    finally:
        owner.give_back(conn)  # closed ones are dropped


def open_job(*, job_id: uuid.UUID) -> JobRow | None:
    """A job's row if it is still open (queued or running), else None."""
    with locked_open(job_id=job_id) as (_cur, row):
        return row


def start(
    *,
    job_id: uuid.UUID,
    plan: Plan,
    progress: Progress,
    owner_key_id: str | None = None,
    admit: Callable[[KeyUsage], None] | None = None,
) -> bool:
    """Mark an open job running with its plan and progress; False if it ended meanwhile.

    With `admit` (shared/keys.check_charge) a plan that charges benchmark seconds is stored under the owner's lock,
    as create() stores a job: admit sees the owner's usage without this charge and raises to refuse it, so
    concurrent plans of one key cannot together pass its daily budget.
    """
    params = {"id": job_id, "plan": _doc(plan), "progress": _doc(progress)}
    with transaction() as cur:
        if admit is not None and owner_key_id is not None and plan.bench_seconds > 0:
            cur.execute(LOCK_OWNER, (OWNER_LOCK_CLASS, owner_key_id))
            cur.execute(SELECT_KEY_USAGE, {"owner": owner_key_id, "key": None})
            admit(cast(KeyUsage, cur.fetchone()))
        cur.execute(START_JOB, params)
        return cur.fetchone() is not None


def set_progress(*, cur: Cursor, job_id: uuid.UUID, progress: Progress) -> None:
    """Store a running job's new progress (in the caller's transaction, under locked_open)."""
    cur.execute(SET_PROGRESS, {"id": job_id, "progress": _doc(progress)})


def finish(
    *,
    job_id: uuid.UUID,
    status: JobStatus,
    result: dict[str, Any] | None = None,
    error: str | None = None,
    progress: Progress | None = None,
    cur: Cursor | None = None,
) -> FinishedJob | None:
    """End an open job (result: a Result-checked document); its id, status, request and plan, or None if it had ended.

    With `cur`, in the caller's transaction (under locked_open).
    """
    if cur is not None:
        return _finish(cur, job_id=job_id, status=status, result=result, error=error, progress=progress)
    with transaction() as own:
        return _finish(own, job_id=job_id, status=status, result=result, error=error, progress=progress)


def _finish(
    cur: Cursor, *, job_id: uuid.UUID, status: JobStatus, result: dict[str, Any] | None, error: str | None,
    progress: Progress | None,
) -> FinishedJob | None:  # fmt: skip
    # The points go to job_predictions, rendered once; the row keeps the rest (a few KB however many points).
    rest = {k: v for k, v in result.items() if k != "predictions"} if result is not None else None
    params = {
        "id": job_id,
        "status": str(status),
        "result": Json(rest) if rest is not None else None,
        "error": error,
        "progress": _doc(progress) if progress is not None else None,
    }
    cur.execute(FINISH_JOB, params)
    row = cur.fetchone()
    if row is None:
        return None  # it had ended: its result is not stored
    if result is not None:
        predictions.store(cur=cur, job_id=job_id, points=result.get("predictions", []))
    return cast(FinishedJob, row)


def running(*, job_id: uuid.UUID) -> JobRow | None:
    """A job's row if it is running, else None."""
    with transaction() as cur:
        cur.execute(SELECT_RUNNING_JOB, (job_id,))
        return cast(JobRow | None, cur.fetchone())


def running_on(*, machine_types: list[str]) -> list[uuid.UUID]:
    """Ids of running jobs that name any of these machine types."""
    with transaction() as cur:
        cur.execute(SELECT_RUNNING_ON, (machine_types,))
        return [r["id"] for r in cur.fetchall()]


def stale(*, after_s: float) -> list[StaleJob]:
    """Open jobs (id, status) not updated for `after_s` seconds, oldest first."""
    with transaction() as cur:
        cur.execute(SELECT_STALE, (after_s,))
        return cast(list[StaleJob], cur.fetchall())


def touch(*, job_id: uuid.UUID) -> None:
    """Mark an open job as looked at now (its updated_at)."""
    with transaction() as cur:
        cur.execute(TOUCH, (job_id,))


def live_plans() -> list[PlannedJob]:
    """Running jobs' id, request and plan."""
    with transaction() as cur:
        cur.execute(SELECT_LIVE_PLANS)
        return cast(list[PlannedJob], cur.fetchall())


def recently_ended(*, within_s: float) -> list[PlannedJob]:
    """Id, request and plan of planned jobs canceled or failed within the last `within_s` seconds."""
    with transaction() as cur:
        cur.execute(SELECT_RECENTLY_ENDED, (within_s,))
        return cast(list[PlannedJob], cur.fetchall())


def _doc(model: Plan | Progress) -> str:
    # JSON text for a jsonb parameter, rendered by pydantic in one pass (a large plan holds ~10^4 pairs).
    # Unset optional fields stay absent, as the worker always wrote them.
    return model.model_dump_json(exclude_none=True)

"""The `jobs` table: submitting, reading, listing and canceling jobs, and a key's usage (the worker's statements on
it are lifecycle.py); keyword-only service functions."""

import hashlib
import itertools
import json
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, TypedDict, cast

from shared.core.db import Json, transaction
from shared.core.errors import Conflict, NotFound
from shared.jobs import predictions
from shared.jobs.models import OPEN, JobStatus
from shared.jobs.request import JobRequest

S = JobStatus


class PlannedJob(TypedDict):
    """A job as the worker's passes over many jobs read it (live_plans, recently_ended)."""

    id: uuid.UUID
    request: dict[str, Any]  # JobRequest's JSON, validated at the door
    plan: dict[str, Any] | None  # Plan's JSON once planned


class FinishedJob(PlannedJob):
    """What finish() returns of the job it ended."""

    status: str  # a JobStatus value


class JobRow(FinishedJob):
    """A `jobs` row whole (SELECT *): request, plan, progress and result as their JSON documents."""

    idempotency_key: str | None
    request_hash: str
    progress: dict[str, Any]  # Progress's JSON; {} until planned
    result: dict[str, Any] | None  # Result's JSON without its predictions (get() puts them back)
    error: str | None
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    owner_key_id: str | None


class JobListRow(TypedDict):
    """A job as a list page shows it: no plan, no result."""

    id: uuid.UUID
    status: str
    request: dict[str, Any]
    progress: dict[str, Any]
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class JobView(JobListRow):
    """A job for GET /v1/jobs/{id}: its result as JSON bytes read as they are sent, a page of predictions spliced in."""

    error: str | None
    result_json: Iterable[bytes] | None  # chunks whose concatenation is the result's JSON, read lazily
    result_length: int | None  # their bytes together, known before any is read
    predictions_total: int | None  # set when a page of predictions was asked for


class JobPosition(TypedDict):
    """Where a job sits in the list: a page cursor."""

    id: uuid.UUID
    created_at: datetime


class StaleJob(TypedDict):
    """An open job nobody updated for a while."""

    id: uuid.UUID
    status: str


class KeyUsage(TypedDict):
    """What one API key has running and has spent, for its limits (shared/keys.py check_submission)."""

    unfinished: int
    bench_seconds_day: float
    bench_charges: list[list[float]] | None  # [seconds until the charge leaves the 24 h window, its seconds]
    retry: bool


# SQL names statuses by the enum's values: `status IN {OPEN_SQL}`.
OPEN_SQL = "(" + ", ".join(f"'{s}'" for s in OPEN) + ")"

INSERT_JOB = """
INSERT INTO jobs (id, request, idempotency_key, request_hash, owner_key_id)
VALUES (%(id)s, %(request)s, %(key)s, %(hash)s, %(owner)s)
ON CONFLICT (owner_key_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING *"""
# Idempotency keys are per owner (migrations/0012_api_keys.sql).
SELECT_BY_KEY = "SELECT * FROM jobs WHERE idempotency_key = %s AND owner_key_id IS NOT DISTINCT FROM %s"
# %(owner)s NULL: every job (admin keys, workers); else only that key's jobs, so others' ids answer 404.
_OWNED = "(%(owner)s::text IS NULL OR owner_key_id = %(owner)s)"
SELECT_JOB = f"SELECT * FROM jobs WHERE id = %(id)s AND {_OWNED}"
# GET /v1/jobs/{id}: the result as PostgreSQL's text, never parsed into Python; its predictions are apart
# (shared/jobs/predictions.py), spliced in by view().
SELECT_VIEW = f"""
SELECT id, status, request, progress, error, created_at, started_at, finished_at,
       CASE WHEN status = '{S.SUCCEEDED}' THEN result::text END AS result_text
FROM jobs WHERE id = %(id)s AND {_OWNED}"""
SELECT_POSITION = f"SELECT id, created_at FROM jobs WHERE id = %(id)s AND {_OWNED}"
# A job's status alone: what a refused cancel names, read without its result (which can be hundreds of MB).
SELECT_STATUS = f"SELECT status FROM jobs WHERE id = %(id)s AND {_OWNED}"
SELECT_PAGE = f"""
SELECT id, status, request, progress, created_at, started_at, finished_at FROM jobs
WHERE (%(before)s::timestamptz IS NULL OR (created_at, id) < (%(before)s, %(before_id)s)) AND {_OWNED}
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s"""
CANCEL_JOB = f"""
UPDATE jobs SET status = '{S.CANCELED}', finished_at = clock_timestamp(), updated_at = clock_timestamp()
WHERE id = %(id)s AND status IN {OPEN_SQL} AND {_OWNED}
RETURNING *"""
SELECT_OPEN_USING_CNN = f"""
SELECT id FROM jobs WHERE status IN {OPEN_SQL} AND request->'cnns' ? %s ORDER BY created_at LIMIT 5"""
SELECT_OPEN_USING_MACHINE = f"""
SELECT id FROM jobs WHERE status IN {OPEN_SQL} AND request->'machines' ? %s ORDER BY created_at LIMIT 5"""

# What a key has running and spent, for its limits (shared/keys.py check_submission): unfinished jobs, benchmark
# seconds its plans sent in the last 24 h (Plan.bench_seconds), each of those charges with when it leaves the window,
# and whether this idempotency key is a retry (never refused).
SELECT_KEY_USAGE = f"""
SELECT count(*) FILTER (WHERE status IN {OPEN_SQL}) AS unfinished,
       COALESCE(sum((plan->>'bench_seconds')::float8) FILTER (WHERE created_at > now() - interval '24 hours'), 0)
           AS bench_seconds_day,
       array_agg(ARRAY[EXTRACT(EPOCH FROM created_at + interval '24 hours' - now())::float8,
                       (plan->>'bench_seconds')::float8] ORDER BY created_at) FILTER (
           WHERE created_at > now() - interval '24 hours' AND (plan->>'bench_seconds')::float8 > 0
       ) AS bench_charges,
       COALESCE(bool_or(idempotency_key = %(key)s), false) AS retry
FROM jobs
WHERE owner_key_id = %(owner)s
  AND (status IN {OPEN_SQL} OR created_at > now() - interval '24 hours' OR idempotency_key = %(key)s)"""

# Submissions of one key take turns from counting its jobs to storing the new one (released at commit), so
# concurrent ones cannot all pass its limit. Two int4 keys: a key space apart from shared/core/migrate.py's bigint one.
LOCK_OWNER = "SELECT pg_advisory_xact_lock(%s, hashtext(%s))"
OWNER_LOCK_CLASS = 13


def request_hash(request: JobRequest) -> str:
    """Hash of the normalised request, to tell a retry from a different request (a range and the list it spans,
    or a list in another order, are the same request)."""
    # Fields at their defaults are left out, so a field a later version adds (at its default) leaves the hash alone.
    normalised = {**request.model_dump(mode="json", exclude_defaults=True), "batch_sizes": request.batch_size_list()}
    canonical = json.dumps(normalised, sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


def create(
    *,
    request: JobRequest,
    idempotency_key: str | None = None,
    owner_key_id: str | None = None,
    admit: Callable[[KeyUsage], None] | None = None,
) -> tuple[JobRow, bool]:
    """Store a new queued job of an owner; with an idempotency key it used before, that job. (job, created).

    `admit` (shared/keys.check_submission) sees the owner's usage (key_usage's shape) under the owner's lock, in the
    transaction that stores the job, and raises to refuse it; a retry of a stored idempotency key is not refused.
    """
    digest = request_hash(request)
    params = {
        "id": uuid.uuid4(),
        "request": Json(request.model_dump(mode="json")),
        "key": idempotency_key,
        "hash": digest,
        "owner": owner_key_id,
    }
    with transaction() as cur:
        if admit is not None and owner_key_id is not None:
            cur.execute(LOCK_OWNER, (OWNER_LOCK_CLASS, owner_key_id))
            cur.execute(SELECT_KEY_USAGE, {"owner": owner_key_id, "key": idempotency_key})
            usage = cast(KeyUsage, cur.fetchone())
            if not usage["retry"]:
                admit(usage)
        cur.execute(INSERT_JOB, params)
        row = cur.fetchone()
        if row is not None:
            return cast(JobRow, row), True
        cur.execute(SELECT_BY_KEY, (idempotency_key, owner_key_id))
        existing = cur.fetchone()
    if existing is None:  # pragma: no cover - the conflicting row vanished between statements
        raise Conflict("idempotency key conflict; retry the request")
    if existing["request_hash"] != digest:
        raise Conflict(
            f"Idempotency-Key {idempotency_key!r} was already used for a different request",
            job_id=str(existing["id"]),
        )
    return cast(JobRow, existing), False


def get(*, job_id: uuid.UUID, owner: str | None = None) -> JobRow:
    """One job by id; a succeeded one's result whole (its points read back). With `owner`, only if that key owns it."""
    row = cast(JobRow, _one(SELECT_JOB, {"id": job_id, "owner": owner}, job_id))
    if row["status"] == S.SUCCEEDED and row["result"] is not None and "predictions" not in row["result"]:
        row["result"] = {"predictions": predictions.points(job_id=job_id), **row["result"]}
    return row


def view(
    *, job_id: uuid.UUID, owner: str | None = None, offset: int | None = None, limit: int | None = None
) -> JobView:
    """One job for GET: its result as JSON bytes (`result_json`), only predictions[offset:offset+limit] if paged.

    `predictions_total` is set when a page was asked for.
    """
    found = _one(SELECT_VIEW, {"id": job_id, "owner": owner}, job_id)
    text: str | None = found.pop("result_text")
    row = cast(JobView, found | {"result_json": None, "result_length": None, "predictions_total": None})
    if text is not None:
        # Never whole in memory: the points stream from the table as they are sent (a 196 MB result held 700 MB
        # per GET, and four at once 3.2 GB).
        points = predictions.Stream(job_id=job_id, offset=offset or 0, limit=limit)
        # jsonb prints an object as "{...}": the points go in as its first member.
        rest = text[1:].lstrip().encode()
        head, tail = b'{"predictions": ', b", " + rest if rest != b"}" else b"}"
        row["result_json"] = itertools.chain((head,), points, (tail,))
        row["result_length"] = len(head) + points.length + len(tail)
        if offset is not None or limit is not None:
            row["predictions_total"] = points.total
    return row


def position(*, job_id: uuid.UUID, owner: str | None = None) -> JobPosition:
    """A job's place in the list (id, created_at): a page cursor; with `owner`, only if that key owns it."""
    return cast(JobPosition, _one(SELECT_POSITION, {"id": job_id, "owner": owner}, job_id))


def _one(sql: str, params: dict[str, Any], job_id: uuid.UUID) -> dict[str, Any]:
    """The one job row a statement selects; 404 when there is none (or another key owns it)."""
    with transaction() as cur:
        cur.execute(sql, params)
        row = cur.fetchone()
    if row is None:
        raise NotFound(f"no job with id {job_id}", job_id=str(job_id))
    return dict(row)


def list_page(*, limit: int, before: JobPosition | None = None, owner: str | None = None) -> list[JobListRow]:
    """Newest jobs first (with `owner`, that key's only), `limit` at a time, strictly older than `before`."""
    params = {
        "owner": owner,
        "limit": limit,
        "before": before["created_at"] if before else None,
        "before_id": before["id"] if before else None,
    }
    with transaction() as cur:
        cur.execute(SELECT_PAGE, params)
        return cast(list[JobListRow], cur.fetchall())


def cancel(*, job_id: uuid.UUID, owner: str | None = None) -> JobRow:
    """Cancel a job that has not finished (with `owner`, only that key's); a finished job is a conflict."""
    with transaction() as cur:
        cur.execute(CANCEL_JOB, {"id": job_id, "owner": owner})
        row = cur.fetchone()
    if row is not None:
        return cast(JobRow, row)
    status = _one(SELECT_STATUS, {"id": job_id, "owner": owner}, job_id)["status"]
    raise Conflict(f"job {job_id} is already {status}", job_id=str(job_id), job_status=status)


def open_using_cnn(*, name: str) -> list[str]:
    """Ids of unfinished jobs that name a CNN (a few at most)."""
    with transaction() as cur:
        cur.execute(SELECT_OPEN_USING_CNN, (name,))
        return [str(r["id"]) for r in cur.fetchall()]


def open_using_machine(*, name: str) -> list[str]:
    """Ids of unfinished jobs that name a machine type (a few at most)."""
    with transaction() as cur:
        cur.execute(SELECT_OPEN_USING_MACHINE, (name,))
        return [str(r["id"]) for r in cur.fetchall()]


def key_usage(*, owner_key_id: str, idempotency_key: str | None = None) -> KeyUsage:
    """A key's unfinished jobs, benchmark seconds of the last 24 h, and whether `idempotency_key` is a retry."""
    with transaction() as cur:
        cur.execute(SELECT_KEY_USAGE, {"owner": owner_key_id, "key": idempotency_key})
        return cast(KeyUsage, cur.fetchone())

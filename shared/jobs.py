"""Jobs in PostgreSQL: the service functions the API and the workers call."""

import hashlib
import json
import uuid
from collections.abc import Callable
from typing import Any

from shared.db import Cursor, Json, transaction
from shared.errors import Conflict, NotFound
from shared.schemas import JobRequest

TERMINAL = ("succeeded", "failed", "canceled")

INSERT_JOB = """
INSERT INTO jobs (id, request, idempotency_key, request_hash, owner_key_id)
VALUES (%(id)s, %(request)s, %(key)s, %(hash)s, %(owner)s)
ON CONFLICT (owner_key_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING *"""
# Idempotency keys are per owner (migrations/0012_api_keys.sql).
SELECT_BY_KEY = "SELECT * FROM jobs WHERE idempotency_key = %s AND owner_key_id IS NOT DISTINCT FROM %s"
# %(owner)s NULL: every job (admin keys, workers); else only that key's jobs, so others' ids answer 404.
SELECT_JOB = "SELECT * FROM jobs WHERE id = %(id)s AND (%(owner)s::text IS NULL OR owner_key_id = %(owner)s)"
SELECT_PAGE = """
SELECT * FROM jobs
WHERE (%(before)s::timestamptz IS NULL OR (created_at, id) < (%(before)s, %(before_id)s))
  AND (%(owner)s::text IS NULL OR owner_key_id = %(owner)s)
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s"""
CANCEL_JOB = """
UPDATE jobs SET status = 'canceled', finished_at = now(), updated_at = now()
WHERE id = %(id)s AND status IN ('queued', 'running') AND (%(owner)s::text IS NULL OR owner_key_id = %(owner)s)
RETURNING *"""
SELECT_OPEN_USING_CNN = """
SELECT id FROM jobs WHERE status IN ('queued', 'running') AND request->'cnns' ? %s ORDER BY created_at LIMIT 5"""

# What a key has running and spent, for its limits (shared/keys.py check_submission): unfinished jobs, benchmark
# seconds its plans sent in the last 24 h (worker/planning.py records plan.bench_seconds), when the oldest of
# those charges leaves the window, and whether this idempotency key is a retry (never refused).
SELECT_KEY_USAGE = """
SELECT count(*) FILTER (WHERE status IN ('queued', 'running')) AS unfinished,
       COALESCE(sum((plan->>'bench_seconds')::float8) FILTER (WHERE created_at > now() - interval '24 hours'), 0)
           AS bench_seconds_day,
       EXTRACT(EPOCH FROM min(created_at) FILTER (
           WHERE created_at > now() - interval '24 hours' AND (plan->>'bench_seconds')::float8 > 0
       ) + interval '24 hours' - now()) AS bench_frees_in_s,
       COALESCE(bool_or(idempotency_key = %(key)s), false) AS retry
FROM jobs
WHERE owner_key_id = %(owner)s
  AND (status IN ('queued', 'running') OR created_at > now() - interval '24 hours' OR idempotency_key = %(key)s)"""

# Submissions of one key take turns from counting its jobs to storing the new one (released at commit), so
# concurrent ones cannot all pass its limit. Two int4 keys: a key space apart from shared/migrate.py's bigint one.
LOCK_OWNER = "SELECT pg_advisory_xact_lock(%s, hashtext(%s))"
OWNER_LOCK_CLASS = 13


# Metrics (api/metrics.py): one pass over jobs_status_times (migrations/0020_metrics.sql, an index-only scan):
# jobs per status and bucket of duration (submission to end): `above` is how many bounds lie below the duration,
# so the job belongs to bucket le=DURATION_BUCKETS_S[above] (NULL: not finished). width_bucket on the negated
# bounds counts those >= the duration: Prometheus buckets include their bound.
DURATION_BUCKETS_S = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 24 * 3600)
SELECT_STATUS_DURATIONS = """
SELECT status, %(n)s - width_bucket(-d, %(bounds)s::float8[]) AS above, count(*) AS n, COALESCE(sum(d), 0) AS seconds
FROM (SELECT status, EXTRACT(EPOCH FROM finished_at - created_at)::float8 AS d FROM jobs) j
GROUP BY 1, 2"""
# Layer benchmarks running jobs still wait for, per machine type, as each job's progress counts them.
SELECT_PENDING = """
SELECT m.key AS machine_type, sum((m.value->>'pending')::int) AS pending
FROM jobs j, jsonb_each(j.progress->'machines') m
WHERE j.status = 'running' GROUP BY m.key"""


def status_durations(cur: Cursor) -> dict[str, dict[str, Any]]:
    """Per status: jobs `n`, finished ones, their summed duration `seconds` and cumulative counts per bucket."""
    bounds = sorted(-float(b) for b in DURATION_BUCKETS_S)
    cur.execute(SELECT_STATUS_DURATIONS, {"n": len(DURATION_BUCKETS_S), "bounds": bounds})
    out: dict[str, dict[str, Any]] = {}
    for r in cur.fetchall():
        s = out.setdefault(r["status"], {"n": 0, "finished": 0, "seconds": 0.0, "buckets": [0] * len(bounds)})
        s["n"] += r["n"]
        if r["above"] is None:
            continue  # not finished
        s["finished"] += r["n"]
        s["seconds"] += float(r["seconds"])
        for i in range(r["above"], len(bounds)):
            s["buckets"][i] += r["n"]
    return out


def pending_benchmarks(cur: Cursor) -> dict[str, int]:
    """Layer benchmarks running jobs wait for, per machine type (a point two jobs wait for counts twice)."""
    cur.execute(SELECT_PENDING)
    return {r["machine_type"]: int(r["pending"] or 0) for r in cur.fetchall()}


def request_hash(request: JobRequest) -> str:
    """Hash of the normalised request, to tell a retry from a different request."""
    canonical = json.dumps(request.model_dump(mode="json"), sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


def create(
    *,
    request: JobRequest,
    idempotency_key: str | None = None,
    owner_key_id: str | None = None,
    admit: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[dict[str, Any], bool]:
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
            usage = dict(cur.fetchone() or {})
            if not usage["retry"]:
                admit(usage)
        cur.execute(INSERT_JOB, params)
        row = cur.fetchone()
        if row is not None:
            return dict(row), True
        cur.execute(SELECT_BY_KEY, (idempotency_key, owner_key_id))
        existing = cur.fetchone()
    if existing is None:  # pragma: no cover - the conflicting row vanished between statements
        raise Conflict("idempotency key conflict; retry the request")
    if existing["request_hash"] != digest:
        raise Conflict(
            f"Idempotency-Key {idempotency_key!r} was already used for a different request",
            job_id=str(existing["id"]),
        )
    return dict(existing), False


def get(*, job_id: uuid.UUID, owner: str | None = None) -> dict[str, Any]:
    """One job by id; with `owner`, only if that key owns it."""
    with transaction() as cur:
        cur.execute(SELECT_JOB, {"id": job_id, "owner": owner})
        row = cur.fetchone()
    if row is None:
        raise NotFound(f"no job with id {job_id}", job_id=str(job_id))
    return dict(row)


def list_page(*, limit: int, before: dict[str, Any] | None = None, owner: str | None = None) -> list[dict[str, Any]]:
    """Newest jobs first (with `owner`, that key's only), `limit` at a time, strictly older than `before`."""
    params = {
        "owner": owner,
        "limit": limit,
        "before": before["created_at"] if before else None,
        "before_id": before["id"] if before else None,
    }
    with transaction() as cur:
        cur.execute(SELECT_PAGE, params)
        return [dict(r) for r in cur.fetchall()]


def cancel(*, job_id: uuid.UUID, owner: str | None = None) -> dict[str, Any]:
    """Cancel a job that has not finished (with `owner`, only that key's); a finished job is a conflict."""
    with transaction() as cur:
        cur.execute(CANCEL_JOB, {"id": job_id, "owner": owner})
        row = cur.fetchone()
    if row is not None:
        return dict(row)
    job = get(job_id=job_id, owner=owner)
    raise Conflict(f"job {job_id} is already {job['status']}", job_id=str(job_id), job_status=job["status"])


def open_using_cnn(*, name: str) -> list[str]:
    """Ids of unfinished jobs that name a CNN (a few at most)."""
    with transaction() as cur:
        cur.execute(SELECT_OPEN_USING_CNN, (name,))
        return [str(r["id"]) for r in cur.fetchall()]


def key_usage(*, owner_key_id: str, idempotency_key: str | None = None) -> dict[str, Any]:
    """A key's unfinished jobs, benchmark seconds of the last 24 h, and whether `idempotency_key` is a retry."""
    with transaction() as cur:
        cur.execute(SELECT_KEY_USAGE, {"owner": owner_key_id, "key": idempotency_key})
        return dict(cur.fetchone() or {})

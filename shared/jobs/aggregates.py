"""Figures over many jobs: metrics, work waiting per machine type, and synthetic rows for benchmarks."""

from typing import Any

from shared.core.db import Cursor, transaction
from shared.jobs.models import JobStatus

S = JobStatus

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
SELECT_PENDING = f"""
SELECT m.key AS machine_type, sum((m.value->>'pending')::int) AS pending
FROM jobs j, jsonb_each(j.progress->'machines') m
WHERE j.status = '{S.RUNNING}' GROUP BY m.key"""
# The fleet controller (fleet): running jobs per machine type with benchmarks pending there. Its login
# may read only jobs' status and progress (migrations/0014_least_privilege.sql).
SELECT_WAITING = f"""
SELECT m.key AS machine_type, count(*) AS n
FROM jobs j, jsonb_each(j.progress->'machines') m
WHERE j.status = '{S.RUNNING}' AND COALESCE((m.value->>'pending')::int, 0) > 0
GROUP BY m.key"""
# bench/metrics.py's scratch database: finished jobs with small results, and running ones waiting on two types.
INSERT_SYNTHETIC = f"""
INSERT INTO jobs (id, status, request, request_hash, progress, result, created_at, started_at, finished_at)
SELECT gen_random_uuid(),
       (ARRAY['{S.SUCCEEDED}','{S.SUCCEEDED}','{S.SUCCEEDED}','{S.FAILED}','{S.CANCELED}'])[1 + j %% 5],
       '{{"cnns": ["resnet50"], "machines": ["g5.xlarge"], "batch_sizes": [8, 16, 32]}}', md5(j::text), '{{}}',
       (SELECT jsonb_build_object('best', jsonb_agg(jsonb_build_object('batch_size', p, 'seconds', p * 1.5)))
        FROM generate_series(1, 40) p),
       now() - make_interval(secs => j * 30), now() - make_interval(secs => j * 30 - 2),
       now() - make_interval(secs => j * 30 - 5 - j %% 600)
FROM generate_series(1, %(finished)s) j;
INSERT INTO jobs (id, status, request, request_hash, progress, created_at, started_at)
SELECT gen_random_uuid(), '{S.RUNNING}', '{{"cnns": ["resnet50"], "machines": ["local", "g5.xlarge"]}}', md5('r' || j),
       '{{"machines": {{"local": {{"pending": 12}}, "g5.xlarge": {{"pending": 30}}}}}}', now(), now()
FROM generate_series(1, %(running)s) j"""


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


def waiting_by_machine_type() -> dict[str, int]:
    """machine type → running jobs with benchmarks pending on it."""
    with transaction() as cur:
        cur.execute(SELECT_WAITING)
        return {r["machine_type"]: int(r["n"]) for r in cur.fetchall()}


def fill_synthetic(cur: Cursor, *, finished: int, running: int) -> None:
    """Insert synthetic finished and running jobs (a benchmark's scratch database only)."""
    cur.execute(INSERT_SYNTHETIC, {"finished": finished, "running": running})

"""Turn a job into layer benchmark work, track its progress, and finish it when all is in."""

import logging
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any, TypeVar

from shared import agents, fleet, layers, logs, machines
from shared.db import Json, transaction
from shared.errors import TraincastError
from shared.schemas import JobRequest
from shared.settings import get_settings
from shared.transient import is_transient
from worker import assemble, coverage, queued, withdrawal

T = TypeVar("T")

log = logging.getLogger(__name__)

LOCK_OPEN_JOB = "SELECT * FROM jobs WHERE id = %s AND status IN ('queued', 'running') FOR UPDATE"
# Every write below is conditional on the job being open: a cancel is never undone.
START_JOB = """
UPDATE jobs SET status = 'running', plan = %(plan)s, progress = %(progress)s,
       started_at = COALESCE(started_at, now()), updated_at = now()
WHERE id = %(id)s AND status IN ('queued', 'running')
RETURNING id"""
SET_PROGRESS = """
UPDATE jobs SET progress = %(progress)s, updated_at = now()
WHERE id = %(id)s AND status = 'running' AND progress IS DISTINCT FROM %(progress)s"""
FINISH_JOB = """
UPDATE jobs SET status = %(status)s, result = %(result)s, error = %(error)s,
       progress = COALESCE(%(progress)s::jsonb, progress),
       finished_at = now(), updated_at = now()
WHERE id = %(id)s AND status IN ('queued', 'running')
RETURNING *"""
# Failures of this job's missing work since it started: re-sent work that fails the same way each time.
SELECT_FAILED_TOO_OFTEN = """
SELECT signature_id, machine_type, count(*) AS n, (array_agg(error ORDER BY failed_at DESC))[1] AS error
FROM layer_failures
WHERE signature_id = ANY(%(sigs)s) AND machine_type = ANY(%(machines)s) AND precision = %(precision)s
  AND failed_at >= %(since)s
GROUP BY signature_id, machine_type
HAVING count(*) >= %(limit)s
ORDER BY signature_id, machine_type
LIMIT 1"""
SELECT_RUNNING = "SELECT id FROM jobs WHERE status = 'running' AND request->'machines' ?| %s"
SELECT_STATUS = "SELECT * FROM jobs WHERE id = %s"


def contained(job_id: uuid.UUID, step: Callable[[], T]) -> T | None:
    """Run one job's step; an unexpected error fails that job with its reason instead of escaping.

    A transient error (PostgreSQL or Redis unreachable) is raised: the job is fine, and the
    reconciler takes it up again once the service is back.
    """
    # Every line logged in the step carries the job's id (plan, advance, assemble, reconcile).
    with logs.context(job_id=str(job_id)):
        try:
            return step()
        except Exception as exc:
            if is_transient(exc):
                raise
            log.exception("job %s failed with an unexpected error", job_id)
            fail(job_id, f"unexpected error: {type(exc).__name__}: {str(exc)[:1000]}")
            return None


def fail(job_id: uuid.UUID, error: str) -> None:
    """Mark an open job failed with the reason and withdraw its queued benchmark work."""
    with transaction() as cur:
        cur.execute(FINISH_JOB, {"id": job_id, "status": "failed", "result": None, "error": error, "progress": None})
        row = cur.fetchone()
    if row is not None:
        withdrawal.withdraw_jobs([dict(row)])


def plan_job(job_id: uuid.UUID) -> None:
    """Plan a job, failing it (not the worker) on an unexpected error."""
    contained(job_id, partial(_plan, job_id))


def _plan(job_id: uuid.UUID) -> None:
    """Resolve signatures, send what is missing to the agents; finish at once if nothing is waited for."""
    with transaction() as cur:
        cur.execute(LOCK_OPEN_JOB, (job_id,))
        job = cur.fetchone()
    if job is None:
        return  # finished or canceled meanwhile: nothing to do
    request = JobRequest.model_validate(job["request"])
    try:
        plan: dict[str, Any] = {
            "cnns": {
                name: layers.register(name=name, image_size=request.image_size, num_classes=request.num_classes)
                for name in request.cnns
            }
        }
    except TraincastError as exc:
        if is_transient(exc):
            raise
        _finish(job_id, status="failed", error=exc.detail, progress=job["progress"])
        return
    uncalibrated = coverage.uncalibrated(request)
    if uncalibrated:
        _finish(job_id, status="failed", error=uncalibrated, progress=job["progress"])
        return
    # Fixed once, so the job's answer does not change source while it runs.
    plan["peers"] = machines.peers_of(names=request.machines)
    plan["waits_on"] = _waits_on(request)
    gaps = coverage.missing(plan, request)
    progress = _progress(plan, request, gaps)
    sent = coverage.routed(gaps, plan)
    # Issue 13: what this job asks agents to measure, charged to its key's benchmark seconds (shared/jobs.py).
    plan["bench_seconds"] = sum(map(len, sent.values())) * 3 * get_settings().bench_time_cap_s
    with transaction() as cur:
        cur.execute(START_JOB, {"id": job_id, "plan": Json(plan), "progress": Json(progress)})
        if cur.fetchone() is None:
            log.info("job %s was canceled while it was planned: nothing sent", job_id)
            return
    coverage.send_work(sent, request.layer_precision, job_ids=[str(job_id)])
    log.info("job %s planned: %d layer benchmark points sent to agents", job_id, sum(map(len, sent.values())))
    with transaction() as cur:
        cur.execute(SELECT_STATUS, (job_id,))
        job = cur.fetchone()
    if job is not None and job["status"] != "running":
        # Canceled while its work was being sent: take it back (later cancels: the reconciler).
        withdrawal.withdraw_jobs([dict(job)])
    elif not coverage.waited_for(gaps, plan):
        finish_if_complete(job_id)


def _waits_on(request: JobRequest) -> list[str]:
    """Machine types the job waits for benchmarks on: all if asked, else those the reference cannot answer."""
    if request.wait_for_benchmarks:
        return list(request.machines)
    gpu = {m["name"]: m["gpu"] for m in machines.list_all() if m["name"] in request.machines}
    return [m for m in request.machines if gpu.get(m) is None]


def advance_jobs(machine: str) -> None:
    """Update the progress of running jobs that wait on a machine type; finish complete ones."""
    # Benchmarks stored for one type serve every type with its GPU model.
    with transaction() as cur:
        cur.execute(SELECT_RUNNING, (machines.peers_of(names=[machine])[machine],))
        ids = [r["id"] for r in cur.fetchall()]
    for job_id in ids:
        # One job's bad data must not keep the others from finishing.
        contained(job_id, partial(finish_if_complete, job_id))


def finish_if_complete(job_id: uuid.UUID) -> bool:
    """Recount a running job's benchmarks; assemble its result when none is missing."""
    # The row lock makes concurrent callers assemble a job once.
    with transaction() as cur:
        cur.execute(LOCK_OPEN_JOB, (job_id,))
        job = cur.fetchone()
        if job is None or job["status"] != "running":
            return False
        request = JobRequest.model_validate(job["request"])
        gaps = coverage.missing(job["plan"], request)
        progress = _progress(job["plan"], request, gaps, previous=job["progress"])
        waited = coverage.waited_for(gaps, job["plan"])
        expired = _waited_too_long(progress) or _failed_too_often(job, request, waited)
        if waited and not expired:
            cur.execute(SET_PROGRESS, {"id": job_id, "progress": Json(progress)})
            return False
        if expired:
            result, status, error = None, "failed", expired
        else:
            try:
                result = assemble.result(request=request, plan=job["plan"], incomplete=set(gaps))
                status, error = "succeeded", None
            except TraincastError as exc:
                if is_transient(exc):
                    raise  # an outage, not this job's fault
                result, status, error = None, "failed", exc.detail
        cur.execute(
            FINISH_JOB,
            {
                "id": job_id,
                "status": status,
                "result": Json(result) if result is not None else None,
                "error": error,
                "progress": Json(progress),
            },
        )
        finished = cur.fetchone()
    log.info("job %s %s", job_id, status)
    if status == "failed" and finished is not None:
        withdrawal.withdraw_jobs([dict(finished)])
    return True


def resend_missing(job_id: uuid.UUID) -> int:
    """Send again the missing benchmarks of a running job that are neither queued nor being measured."""
    with transaction() as cur:
        cur.execute("SELECT * FROM jobs WHERE id = %s AND status = 'running'", (job_id,))
        job = cur.fetchone()
    if job is None or finish_if_complete(job_id):
        return 0  # finished (complete, or failed after waiting too long for an agent)
    request = JobRequest.model_validate(job["request"])
    lost = withdrawal.lost(coverage.waited_for(coverage.missing(job["plan"], request), job["plan"]))
    coverage.send_work(lost, request.layer_precision, job_ids=[str(job_id)])
    return sum(len({s for s, _b in gap}) for gap in lost.values())


def _progress(
    plan: dict[str, Any],
    request: JobRequest,
    gaps: coverage.Missing,
    previous: dict[str, Any] | None = None,
) -> dict[str, Any]:
    per_machine = len(coverage.signature_ids(plan)) * len(request.batch_size_list())
    pending = {m: len(gaps.get(m, ())) for m in request.machines}
    counts_by_type: dict[str, dict[str, Any]] = {
        m: {"needed": per_machine, "done": per_machine - pending[m], "pending": pending[m]} for m in request.machines
    }
    if gaps:
        settings = get_settings()
        listed = agents.list_all(alive_after_s=settings.agent_alive_after_s, limit=500)
        # A hung agent serves nobody: with only hung agents a type waits for one, and the wait times out.
        alive = {a["machine_type"] for a in listed if a["alive"] and not queued.stuck(a, settings.bench_stuck_after_s)}
        before = (previous or {}).get("machines", {})
        # Asked only when some machine type waits: this runs after every stored signature.
        booting = fleet.booting() if any(c["pending"] and m not in alive for m, c in counts_by_type.items()) else {}
        waits_on = plan.get("waits_on", request.machines)
        for m, counts in counts_by_type.items():
            counts["agent_alive"] = m in alive
            if counts["pending"] and m not in waits_on:
                counts["answered_by"] = "reference"  # measured later where an agent or the fleet can
            elif counts["pending"] and m not in alive:
                # Said in the job, so nobody waits on a machine type no agent serves without knowing.
                counts["waiting_for"] = f"waiting for an agent on {m}" + (
                    f" (the fleet launched {booting[m]}; it is booting)" if m in booting else ""
                )
                # Kept across updates: the clock of the agent-wait timeout starts once.
                counts["waiting_since"] = before.get(m, {}).get("waiting_since") or datetime.now(UTC).isoformat()
    return {
        "layer_benchmarks": {
            "needed": per_machine * len(request.machines),
            "done": per_machine * len(request.machines) - sum(pending.values()),
            "pending": sum(pending.values()),
        },
        "machines": counts_by_type,
    }


def _failed_too_often(job: dict[str, Any], request: JobRequest, waited: coverage.Missing) -> str | None:
    """The failure reason when a missing benchmark raised BENCH_MAX_FAILURES times since the job started."""
    if not waited:
        return None
    params = {
        "sigs": sorted({s for gap in waited.values() for s, _b in gap}),
        "machines": sorted(waited),
        "precision": request.layer_precision,
        "since": job["started_at"],
        "limit": get_settings().bench_max_failures,
    }
    with transaction() as cur:
        cur.execute(SELECT_FAILED_TOO_OFTEN, params)
        row = cur.fetchone()
    if row is None:
        return None
    return (
        f"the layer benchmark of signature {row['signature_id']} failed {row['n']} times on {row['machine_type']}: "
        f"{row['error']}"
    )


def _waited_too_long(progress: dict[str, Any]) -> str | None:
    """The failure reason when a machine type has had no agent for AGENT_WAIT_TIMEOUT_S, else None."""
    timeout = get_settings().agent_wait_timeout_s
    for m, counts in progress["machines"].items():
        since = counts.get("waiting_since")
        if since and (datetime.now(UTC) - datetime.fromisoformat(since)).total_seconds() > timeout:
            return (
                f"no agent on {m} came up within {timeout:.0f} s ({counts['pending']} layer benchmarks waiting "
                f"for it); start one (AGENT_MACHINE_TYPE={m} python -m gpu_agent) or enable the fleet, then "
                "submit the job again"
            )
    return None


def _finish(job_id: uuid.UUID, *, status: str, error: str | None, progress: dict[str, Any]) -> None:
    with transaction() as cur:
        cur.execute(
            FINISH_JOB, {"id": job_id, "status": status, "result": None, "error": error, "progress": Json(progress)}
        )

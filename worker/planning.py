"""Turn a job into layer benchmark work, track its progress, and finish it when all is in."""

import logging
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from shared import cnns, layers, logs, machines, ops, tasks
from shared.db import Json, transaction
from shared.errors import TraincastError
from shared.schemas import JobRequest
from shared.settings import get_settings
from shared.transient import is_transient
from worker import assemble, coverage, progress, withdrawal

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
# Layer and op failures differ only in their table, signature column and configuration key.
_FAILED_TOO_OFTEN = """
SELECT {sig} AS signature_id, machine_type, count(*) AS n, (array_agg(error ORDER BY failed_at DESC))[1] AS error
FROM {table}
WHERE {sig} = ANY(%(sigs)s) AND machine_type = ANY(%(machines)s) AND {key}
  AND failed_at >= %(since)s
GROUP BY {sig}, machine_type
HAVING count(*) >= %(limit)s
ORDER BY {sig}, machine_type
LIMIT 1"""
SELECT_LAYER_FAILED_TOO_OFTEN = _FAILED_TOO_OFTEN.format(
    table="layer_failures", sig="signature_id", key="precision = %(precision)s"
)
# An op signature is only ever measured in one of the two variants (an optimizer step in optimizer_variant).
SELECT_OP_FAILED_TOO_OFTEN = _FAILED_TOO_OFTEN.format(
    table="op_failures", sig="op_signature_id", key="variant IN (%(op_variant)s, %(optimizer_variant)s)"
)
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
        plan |= _op_plan(request)
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
    gaps, op_gaps = coverage.missing(plan, request), coverage.missing_ops(plan, request)
    counts = progress.of(plan, request, gaps, op_gaps)
    sent, sent_ops = coverage.routed(gaps, plan), coverage.routed(op_gaps, plan)
    # Issue 13: what this job asks agents to measure, charged to its key's benchmark seconds (shared/jobs.py):
    # three phases a conv point, two an op point at half a phase's cap (gpu_agent/app.py OP_CAP_FACTOR).
    cap = get_settings().bench_time_cap_s
    plan["bench_seconds"] = (sum(map(len, sent.values())) * 3 + sum(map(len, sent_ops.values()))) * cap
    with transaction() as cur:
        cur.execute(START_JOB, {"id": job_id, "plan": Json(plan), "progress": Json(counts)})
        if cur.fetchone() is None:
            log.info("job %s was canceled while it was planned: nothing sent", job_id)
            return
    _send(sent, sent_ops, request, job_id)
    log.info(
        "job %s planned: %d layer and %d op benchmark points sent to agents",
        job_id,
        sum(map(len, sent.values())),
        sum(map(len, sent_ops.values())),
    )
    with transaction() as cur:
        cur.execute(SELECT_STATUS, (job_id,))
        job = cur.fetchone()
    if job is not None and job["status"] != "running":
        # Canceled while its work was being sent: take it back (later cancels: the reconciler).
        withdrawal.withdraw_jobs([dict(job)])
    elif not (coverage.waited_for(gaps, plan) or coverage.waited_for(op_gaps, plan)):
        finish_if_complete(job_id)


def _op_plan(request: JobRequest) -> dict[str, Any]:
    """The plan's op signatures per CNN (stored by layers.register) and which of them are optimizer steps."""
    per_cnn = {
        name: ops.members(
            name=name, image_size=request.image_size, num_classes=cnns.variant_classes(name, request.num_classes)
        )
        for name in request.cnns
    }
    return {
        "ops": {name: [[sig, count] for sig, _spec, count in members] for name, members in per_cnn.items()},
        "optimizers": sorted(
            {sig for members in per_cnn.values() for sig, spec, _c in members if ops.is_optimizer(spec)}
        ),
    }


def _send(gaps: coverage.Missing, op_gaps: coverage.Missing, request: JobRequest, job_id: uuid.UUID) -> None:
    training = request.training()
    jobs = [str(job_id)]
    coverage.send_work(gaps, training.layer_precision, training.channels_last, job_ids=jobs)
    coverage.send_op_work(op_gaps, training, job_ids=jobs)


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
        gaps, op_gaps = coverage.missing(job["plan"], request), coverage.missing_ops(job["plan"], request)
        counts = progress.of(job["plan"], request, gaps, op_gaps, previous=job["progress"])
        waited = coverage.waited_for(gaps, job["plan"])
        ops_waited = coverage.waited_for(op_gaps, job["plan"])
        expired = progress.waited_too_long(counts) or _failed_too_often(job, request, waited, ops_waited)
        if (waited or ops_waited) and not expired:
            cur.execute(SET_PROGRESS, {"id": job_id, "progress": Json(counts)})
            return False
        if expired:
            result, status, error = None, "failed", expired
        else:
            try:
                result = assemble.result(request=request, plan=job["plan"], incomplete=set(gaps) | set(op_gaps))
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
                "progress": Json(counts),
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
    op_gaps = coverage.waited_for(coverage.missing_ops(job["plan"], request), job["plan"])
    lost_ops = withdrawal.lost(op_gaps, task=tasks.BENCH_OPS)
    _send(lost, lost_ops, request, job_id)
    return sum(len({s for s, _b in gap}) for gap in (*lost.values(), *lost_ops.values()))


def _failed_too_often(
    job: dict[str, Any], request: JobRequest, waited: coverage.Missing, ops_waited: coverage.Missing
) -> str | None:
    """The failure reason when a missing layer or op benchmark raised BENCH_MAX_FAILURES times since the job started."""
    common = {"since": job["started_at"], "limit": get_settings().bench_max_failures}
    training = request.training()
    layer = _failures(SELECT_LAYER_FAILED_TOO_OFTEN, waited, common | {"precision": training.layer_precision})
    if layer is not None:
        return f"the layer benchmark of signature {layer['signature_id']} {_failed(layer)}"
    variants = {"op_variant": training.op_variant, "optimizer_variant": training.optimizer_variant}
    op = _failures(SELECT_OP_FAILED_TOO_OFTEN, ops_waited, common | variants)
    if op is None:
        return None
    sig = ops.signature(ops.specs(signature_ids=[op["signature_id"]])[op["signature_id"]]["spec"])
    what = " ".join([sig.op, "×".join(map(str, sig.shape))]).strip()
    return f"the op benchmark of signature {op['signature_id']} ({what}) {_failed(op)}"


def _failures(sql: str, waited: coverage.Missing, params: dict[str, Any]) -> dict[str, Any] | None:
    """The first missing signature whose failures reached the limit (sql: a _FAILED_TOO_OFTEN), if any."""
    if not waited:
        return None
    sigs = sorted({s for gap in waited.values() for s, _b in gap})
    with transaction() as cur:
        cur.execute(sql, params | {"sigs": sigs, "machines": sorted(waited)})
        row = cur.fetchone()
    return None if row is None else dict(row)


def _failed(row: dict[str, Any]) -> str:
    return f"failed {row['n']} times on {row['machine_type']}: {row['error']}"


def _finish(job_id: uuid.UUID, *, status: str, error: str | None, progress: dict[str, Any]) -> None:
    with transaction() as cur:
        cur.execute(
            FINISH_JOB, {"id": job_id, "status": status, "result": None, "error": error, "progress": Json(progress)}
        )

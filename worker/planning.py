"""Turn a job into layer benchmark work, track its progress, and finish it when all is in."""

import logging
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar, cast

from celery.exceptions import SoftTimeLimitExceeded

from shared import agents, jobs, keys, machine_types
from shared.cnn import registry as cnns
from shared.core import collector, logs, tasks
from shared.core.errors import OverBudget, RateLimited, TraincastError
from shared.core.settings import get_settings
from shared.core.transient import is_transient
from shared.jobs import JobStatus, Plan, Progress
from shared.jobs.request import JobRequest
from shared.jobs.result import check_result
from shared.machine_types import MachineTypeInfo
from shared.measurements import allreduce, layers, ops
from shared.measurements import inputs as input_rates
from worker import assemble, coverage, progress, withdrawal

T = TypeVar("T")

log = logging.getLogger(__name__)


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
            if isinstance(exc, SoftTimeLimitExceeded):
                log.warning("job %s failed: past the worker task's soft time limit", job_id)
                fail(job_id, "the job took longer than the worker's time limit for one step (planning or assembly)")
                return None
            # The user gets a stable message and an id; the exception (its text may quote SQL or our code) is logged.
            error_id = uuid.uuid4().hex[:12]
            log.exception("job %s failed with an unexpected error (error id %s)", job_id, error_id)
            fail(job_id, f"{INTERNAL_ERROR} (error id {error_id}: the operator finds the details in the worker's log)")
            return None


# What a job failed by a fault of ours says, whatever the fault.
INTERNAL_ERROR = "internal error: the job could not be finished"


def fail(job_id: uuid.UUID, error: str) -> None:
    """Mark an open job failed with the reason and withdraw its queued benchmark work."""
    row = jobs.finish(job_id=job_id, status=JobStatus.FAILED, error=error)
    if row is not None:
        withdrawal.withdraw_jobs([row])


def plan_job(job_id: uuid.UUID) -> None:
    """Plan a job, failing it (not the worker) on an unexpected error."""
    contained(job_id, partial(_plan, job_id))


def _plan(job_id: uuid.UUID) -> None:
    """Plan a queued job unless another process is planning it or it has been planned."""
    with jobs.planning_claim(job_id=job_id) as mine:
        if not mine:
            log.info("job %s is being planned by another process: this plan message is a duplicate", job_id)
            return
        job = jobs.open_job(job_id=job_id)
        # Ended meanwhile, or planned already (a running job's lost work is the reconciler's to re-send).
        if job is not None and job["status"] == JobStatus.QUEUED:
            _plan_queued(job_id, JobRequest.stored(job["request"]), owner=job["owner_key_id"])


def _plan_queued(job_id: uuid.UUID, request: JobRequest, *, owner: str | None = None) -> None:
    """Resolve signatures, send what is missing to the agents; finish at once if nothing is waited for."""
    try:
        cnn_signatures = layers.register_all(
            names=list(request.cnns), image_size=request.image_size, num_classes=request.num_classes
        )
        op_signatures, optimizers = _op_plan(request)
    except TraincastError as exc:
        if is_transient(exc):
            raise
        jobs.finish(job_id=job_id, status=JobStatus.FAILED, error=exc.detail)
        return
    infos = machine_types.by_names(names=list(request.machines))  # read once for the checks below
    uncalibrated = coverage.uncalibrated(request, infos)
    if uncalibrated:
        jobs.finish(job_id=job_id, status=JobStatus.FAILED, error=uncalibrated)
        return
    # Peers and waits_on are fixed once, so the job's answer does not change source while it runs.
    plan = Plan(
        cnns=cnn_signatures,
        ops=op_signatures,
        optimizers=optimizers,
        peers=machine_types.peers_of(names=request.machines),
        waits_on=_waits_on(request, infos),
    )
    gaps, op_gaps = coverage.missing(plan, request), coverage.missing_ops(plan, request)
    listed = coverage.listed_agents() if gaps or op_gaps else []  # read once for progress and routing
    counts = progress.of(plan, request, gaps, op_gaps, listed=listed)
    sent, sent_ops = coverage.routed(plan, gaps, op_gaps, listed=listed)
    started = _start_within_budget(job_id, owner, plan, counts, (sent, sent_ops))
    if started is None:
        return
    sent, sent_ops = started
    _send(sent, sent_ops, request, job_id)
    _ask_measurements(request, infos, listed)
    log.info(
        "job %s planned: %d layer and %d op benchmark points sent to agents",
        job_id,
        sum(map(len, sent.values())),
        sum(map(len, sent_ops.values())),
    )
    if sent or sent_ops:
        job = jobs.get(job_id=job_id)
        if job["status"] != JobStatus.RUNNING:
            # Canceled while its work was being sent: take it back (later cancels: the reconciler).
            withdrawal.withdraw_jobs([job])
            return
    if not (coverage.waited_for(gaps, plan) or coverage.waited_for(op_gaps, plan)):
        # Nothing to wait for: finish with the counts just made rather than recounting every point (a job
        # canceled meanwhile is no longer running, and finish_if_complete leaves it as it is).
        finish_if_complete(job_id, counted=(gaps, op_gaps, counts))


def _start_within_budget(
    job_id: uuid.UUID, owner: str | None, plan: Plan, counts: Progress, work: tuple[coverage.Missing, coverage.Missing]
) -> tuple[coverage.Missing, coverage.Missing] | None:
    """Start the job with its benchmark seconds reserved against its key's daily budget; the work to send, or None.

    Past the budget, work for types the reference answers is not sent (their answers do not wait on it); if what
    the job waits for is past it alone, the job fails saying how much it needs and how much is left.
    """
    budget = keys.bench_budget(key_id=owner) if owner is not None else None
    waited = cast(tuple[coverage.Missing, coverage.Missing], tuple(coverage.waited_for(w, plan) for w in work))
    refused: RateLimited | OverBudget | None = None
    # Same types (keys), same work: comparing the pair sets themselves could walk millions of pairs.
    same = all(set(w) == set(v) for w, v in zip(work, waited, strict=True))
    for attempt in (work,) if same else (work, waited):
        plan.bench_seconds = _charge(*attempt)
        admit = None
        if budget is not None and owner is not None:
            admit = partial(keys.check_charge, key_id=owner, budget_s=budget, charge_s=plan.bench_seconds)
        try:
            if jobs.start(job_id=job_id, plan=plan, progress=counts, owner_key_id=owner, admit=admit):
                return attempt
            log.info("job %s was canceled while it was planned: nothing sent", job_id)
            return None
        except (RateLimited, OverBudget) as exc:
            refused = exc
            log.info("job %s: %s", job_id, exc.detail)
    assert refused is not None
    jobs.finish(job_id=job_id, status=JobStatus.FAILED, error=refused.detail)
    return None


def _charge(sent: coverage.Missing, sent_ops: coverage.Missing) -> float:
    """Benchmark seconds the work charges its key: three phases a conv point, two an op point at half a
    phase's cap (gpu_agent/app.py OP_CAP_FACTOR)."""
    points = sum(map(len, sent.values())) * 3 + sum(map(len, sent_ops.values()))
    return float(points * get_settings().bench_time_cap_s)


def _op_plan(request: JobRequest) -> tuple[dict[str, list[tuple[int, int]]], list[int]]:
    """The plan's op signatures per CNN (stored by layers.register) and which of them are optimizer steps."""
    classes = {name: cnns.variant_classes(name, request.num_classes) for name in request.cnns}
    return ops.counts_of(classes=classes, image_size=request.image_size)


def _send(gaps: coverage.Missing, op_gaps: coverage.Missing, request: JobRequest, job_id: uuid.UUID) -> None:
    training = request.training()
    ids = [str(job_id)]
    coverage.send_work(gaps, training.layer_precision, training.channels_last, job_ids=ids)
    coverage.send_op_work(op_gaps, training, job_ids=ids)


def _ask_measurements(request: JobRequest, infos: dict[str, MachineTypeInfo], listed: list[agents.AgentListed]) -> None:
    """Ask live agents for the host measurements this job's answer would use but that are not stored:
    the input rate of each type when it decodes JPEGs, the all-reduce of each multi-GPU type it spreads over.

    Not waited for: until stored, input rates come from other types (labelled reference), all-reduce is modelled.
    listed: the agents as planning read them (read here if empty).
    """
    wanted: dict[str, set[str]] = {}
    if request.decodes_input:
        wanted[tasks.BENCH_INPUT] = set(request.machines) - set(input_rates.newest())
    gpus = {m: infos[m].get("gpu_count") or 0 for m in request.machines if m in infos}
    if spread := [m for m, n in gpus.items() if n >= 2 and request.spreads(n)]:
        wanted[tasks.BENCH_ALLREDUCE] = set(spread) - {m for m, _ in allreduce.largest(machine_types=spread)}
    if not any(wanted.values()):
        return
    alive = {a["machine_type"] for a in listed or coverage.listed_agents() if a["alive"]}
    for task, types in wanted.items():
        for machine_type in sorted(types & alive):
            tasks.send(task, queue=tasks.bench_queue(machine_type), machine_type=machine_type)


def _waits_on(request: JobRequest, infos: dict[str, MachineTypeInfo]) -> list[str]:
    """Machine types the job waits for benchmarks on: all if asked, else those the reference cannot answer."""
    if request.wait_for_benchmarks:
        return list(request.machines)
    return [m for m in request.machines if m not in infos or not machine_types.reference_can_answer(infos[m])]


def advance_jobs(machine_type: str) -> None:
    """Update the progress of running jobs that wait on a machine type; finish complete ones."""
    # Benchmarks stored for one type serve every type with its GPU model.
    for job_id in jobs.running_on(machine_types=machine_types.peers_of(names=[machine_type])[machine_type]):
        # One job's bad data must not keep the others from finishing.
        contained(job_id, partial(finish_if_complete, job_id))


def finish_if_complete(
    job_id: uuid.UUID, counted: tuple[coverage.Missing, coverage.Missing, Progress] | None = None
) -> bool:
    """Recount a running job's benchmarks; assemble its result when none is missing.

    counted: (gaps, op gaps, progress) the planner has just counted, used instead of a recount.
    """
    # The result is built, checked, stored and committed with the cyclic collector paused, and freed after the
    # commit (a large one's ~10^6 objects take a while to free, which the job's readers need not wait for).
    with collector.paused():
        return _finish_if_complete(job_id, counted)


def _finish_if_complete(job_id: uuid.UUID, counted: tuple[coverage.Missing, coverage.Missing, Progress] | None) -> bool:
    # One assembler per job; the row itself is locked only to read it and to store progress, never while the result
    # is built, so a cancel never waits on an assembly.
    with jobs.assembly_claim(job_id=job_id) as mine:
        return mine and _assemble_if_complete(job_id, counted)


def _assemble_if_complete(
    job_id: uuid.UUID, counted: tuple[coverage.Missing, coverage.Missing, Progress] | None
) -> bool:
    with jobs.locked_open(job_id=job_id) as (cur, job):
        if job is None or job["status"] != JobStatus.RUNNING:
            return False
        request = JobRequest.stored(job["request"])
        training = request.training()
        plan = Plan.model_validate(job["plan"])
        if counted is None:
            gaps, op_gaps = coverage.missing(plan, request), coverage.missing_ops(plan, request)
            previous = Progress.model_validate(job["progress"]) if job["progress"] else None
            counts = progress.of(plan, request, gaps, op_gaps, previous=previous)
        else:
            gaps, op_gaps, counts = counted
        waited, ops_waited = coverage.waited_for(gaps, plan), coverage.waited_for(op_gaps, plan)
        since = job["started_at"] or job["created_at"]
        expired = progress.expired(counts, training=training, since=since, waited=waited, ops_waited=ops_waited)
        if (waited or ops_waited) and not expired:
            jobs.set_progress(cur=cur, job_id=job_id, progress=counts)
            return False
    result: dict[str, Any] | None = None
    status, error = JobStatus.FAILED, expired
    if not expired:
        try:
            # Checked against Result before it is stored, so every reader may trust its shape.
            incomplete = set(gaps) | set(op_gaps)
            result = check_result(assemble.result(request=request, peers=plan.peers, incomplete=incomplete))
            status = JobStatus.SUCCEEDED
        except TraincastError as exc:
            if is_transient(exc):
                raise  # an outage, not this job's fault
            error = exc.detail
    finished = jobs.finish(job_id=job_id, status=status, result=result, error=error, progress=counts)
    if finished is None:
        log.info("job %s ended while its result was assembled (canceled): the result is dropped", job_id)
        return True
    log.info("job %s %s", job_id, status)
    if status == JobStatus.FAILED and finished is not None:
        withdrawal.withdraw_jobs([finished])
    return True


def resend_missing(job_id: uuid.UUID) -> int:
    """Send again the missing benchmarks of a running job that are neither queued nor being measured."""
    job = jobs.running(job_id=job_id)
    if job is None or finish_if_complete(job_id):
        return 0  # finished (complete, or failed after waiting too long for an agent)
    request = JobRequest.stored(job["request"])
    plan = Plan.model_validate(job["plan"])
    lost = withdrawal.lost(coverage.waited_for(coverage.missing(plan, request), plan))
    op_gaps = coverage.waited_for(coverage.missing_ops(plan, request), plan)
    lost_ops = withdrawal.lost(op_gaps, task=tasks.BENCH_OPS)
    _send(lost, lost_ops, request, job_id)
    return sum(len({s for s, _b in gap}) for gap in (*lost.values(), *lost_ops.values()))

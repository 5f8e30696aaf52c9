"""The worker's Celery app: `celery -A worker.app worker -Q jobs`, and one `celery -A worker.app beat`."""

import logging
import os
import sys
import uuid
from typing import Any

from celery.signals import worker_init, worker_ready

from prediction.reference.model import file_version, stored_version
from shared.core import logs, secrets, tasks
from shared.core.settings import get_settings
from worker import planning, reconcile, reference_store, refit, warmup

# Before the broker URL is read: with TRAINCAST_SSM_PATH set, DATABASE_URL and REDIS_URL come from SSM.
secrets.load_from_environment()
# Celery's logging setup replaced by ours: JSON lines with each task's job fields (shared/core/logs.py).
logs.connect_celery("beat" if "beat" in sys.argv else "worker")
app = tasks.make_app("traincast-worker")
app.conf.beat_schedule = {
    "reconcile": {"task": tasks.RECONCILE, "schedule": get_settings().reconcile_every_s},
}
# Past the soft limit the task's job fails with the reason (planning.contained); the hard limit
# ends a child that ignores it. A job whose worker died is taken up again by the reconciler.
LIMITS = {
    "soft_time_limit": get_settings().worker_task_soft_time_limit_s,
    "time_limit": get_settings().worker_task_time_limit_s,
}


@app.task(name=tasks.PLAN_JOB, **LIMITS)
def plan_job(job_id: str) -> None:
    """Plan a job: resolve its layers and send missing benchmarks to the agents."""
    planning.plan_job(uuid.UUID(job_id))


@app.task(name=tasks.ADVANCE_JOBS, **LIMITS)
def advance_jobs(machine_type: str) -> None:
    """Benchmarks were stored on a machine type: move its jobs forward."""
    planning.advance_jobs(machine_type)


@app.task(name=tasks.RECONCILE, **LIMITS)
def reconcile_jobs() -> None:
    """Re-send work for jobs that stopped moving (lost messages, restarts); withdraw work of ended jobs."""
    reconcile.run()


@app.task(name=tasks.REFIT, **LIMITS)
def refit_models(machine_types: list[str]) -> None:
    """Measurements were imported: fit each machine type's models from its whole steps."""
    for fitted in refit.refit(machine_types=machine_types):
        logging.getLogger(__name__).info("refit after import", extra=fitted)


@app.task(name=tasks.WARM, **LIMITS)
def warm(step: int) -> None:
    """One step of the warm-up (worker/warmup.py); then the next, below any job."""
    if warmup.timing_here():
        tasks.send(tasks.WARM, args=[step], priority=warmup.PRIORITY, countdown=warmup.YIELD_S)
        return
    following = warmup.run_step(step)
    if following is not None:
        tasks.send(tasks.WARM, args=[following], priority=warmup.PRIORITY)


@worker_init.connect
def lower_priority(**_kwargs: Any) -> None:
    """The worker's batch work yields the CPU to the API's interactive answers where they share a host (`make up`):
    assembling a 96,000-point result on the API's two cores held /healthz 110 ms. Its pool children inherit it."""
    os.nice(get_settings().worker_nice)


@worker_init.connect
def import_the_tracer(**_kwargs: Any) -> None:
    """torch and torchvision imported once, before the pool forks: every child that plans a CNN reads it with them,
    and importing them in each child took 3-14 s of CPU a child (two children often both plan at a worker's start)."""
    import torch  # noqa: F401
    import torchvision.models  # noqa: F401


@worker_ready.connect
def prune_reference_predictions(**_kwargs: Any) -> None:
    """At start, the stored reference predictions of older model versions (or older code computing them) go."""
    removed = reference_store.prune(version=stored_version(file_version()))
    if removed:
        logging.getLogger(__name__).info("deleted %d reference conv predictions of older model versions", removed)


@worker_ready.connect
def start_warm_up(**_kwargs: Any) -> None:
    """At start, the warm-up's first step (a no-op per step where everything is stored already)."""
    settings = get_settings()
    if settings.warm_on_start:
        if passed := sorted(set(settings.warm_cnns) - set(warmup.names())):
            logging.getLogger(__name__).warning(
                "WARM_CNNS: not warmed, not built-ins that run at %d px: %s", warmup.IMAGE_SIZE, ", ".join(passed)
            )
        tasks.send(tasks.WARM, args=[0], priority=warmup.PRIORITY)

"""Celery wiring all processes share, and sending tasks by name.

The API never imports worker or agent code: it sends tasks by the names below.
"""

from typing import Any

from celery import Celery

from shared.settings import get_settings

PLAN_JOB = "worker.plan_job"
ADVANCE_JOBS = "worker.advance_jobs"
RECONCILE = "worker.reconcile"
BENCH_LAYERS = "gpu_agent.bench_layers"
MEASURE_STEPS = "gpu_agent.measure_steps"


def bench_queue(machine_type: str) -> str:
    """The queue the agents of a machine type consume."""
    return f"bench.{machine_type}"


def make_app(name: str) -> Celery:
    """A Celery app on our broker, with the delivery guarantees every process relies on."""
    settings = get_settings()
    app = Celery(name, broker=settings.redis_url)
    app.conf.update(
        # Job state lives in PostgreSQL; Celery results are never read.
        task_ignore_result=True,
        # Acknowledge after the work is stored, so a crash redelivers instead of losing it.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        broker_transport_options={"visibility_timeout": settings.visibility_timeout_s},
        broker_connection_retry_on_startup=True,
        task_default_queue=settings.jobs_queue,
        task_serializer="json",
        accept_content=["json"],
        worker_hijack_root_logger=False,
    )
    return app


_client: Celery | None = None


def send(task: str, *, queue: str | None = None, args: list[Any] | None = None, **kwargs: Any) -> None:
    """Send a task by name; the caller does not need the code that runs it."""
    global _client
    if _client is None:
        _client = make_app("traincast-client")
    _client.send_task(
        task,
        args=args or [],
        kwargs=kwargs,
        queue=queue or get_settings().jobs_queue,
        # Fail fast when the broker is down: callers keep state in PostgreSQL and resend later.
        retry=True,
        retry_policy={"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 1},
    )

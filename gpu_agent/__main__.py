"""Start a benchmark agent for the configured machine type: `python -m gpu_agent`."""

import logging
import socket
import sys

from shared.core import logs, secrets
from shared.core.settings import get_settings

log = logging.getLogger("gpu_agent")


def longest_task_s() -> float:
    """A rough bound on one task: the most batch sizes a job may ask for, each a whole step at its longest cap."""
    from gpu_agent.app import STEP_CAP_FACTOR
    from gpu_agent.timing import Policy

    policy = Policy.from_settings(STEP_CAP_FACTOR)
    return get_settings().max_batch_sizes * policy.time_cap_s * policy.busy_cap_factor


def gpu_missing(machine_type: str) -> str | None:
    """Why this agent must not start: a GPU machine type with no usable CUDA device, else None."""
    required = get_settings().agent_require_gpu
    if required is None:
        required = machine_type != "local"
    if not required:
        return None
    from gpu_agent import environment

    dev = environment.device()
    if dev.type == "cuda":
        return None
    import torch

    return (
        f"no usable CUDA device for machine type {machine_type!r} (torch {torch.__version__}, built for CUDA "
        f"{torch.version.cuda or 'none'}; device {dev}): timings measured here would be stored under {machine_type!r}. "
        "Check the NVIDIA driver (nvidia-smi) and torch's CUDA build, or set AGENT_REQUIRE_GPU=false "
        "for a CPU machine type."
    )


def main() -> None:
    """Run one Celery worker on bench.<machine type>, one measurement at a time."""
    # First, before any setting is read: DATABASE_URL / REDIS_URL may come from SSM. Imported only
    # afterwards, because gpu_agent.app builds its Celery app (the broker URL) at import.
    if loaded := secrets.load_from_environment():
        # Celery configures logging only later; names only, never values.
        print(f"loaded {', '.join(loaded)} from SSM", file=sys.stderr)
    from shared.core import tasks

    # Ours instead of Celery's (JSON lines with each task's machine type, signature and jobs), also into
    # AGENT_LOG_FILE (as JSON) when set, for the CloudWatch agent to ship.
    logs.setup("agent", file=get_settings().agent_log_file)
    logs.connect_celery("agent", file=get_settings().agent_log_file)
    if not tasks.valid_machine_type(machine_type := get_settings().agent_machine_type):
        print(f"error: AGENT_MACHINE_TYPE={machine_type[:80]!r} is not a machine type name", file=sys.stderr)
        sys.exit(2)
    from gpu_agent import app as agent
    from gpu_agent.app import app

    settings = get_settings()
    if reason := gpu_missing(machine_type):
        print(f"error: {reason}", file=sys.stderr)
        sys.exit(3)
    if settings.visibility_timeout_s < longest_task_s():
        log.warning(
            "VISIBILITY_TIMEOUT_S=%s is shorter than a long task may take (~%.0f s): Redis would hand a task "
            "still running here to another agent (harmless, since writes are idempotent, but wasted work)",
            settings.visibility_timeout_s,
            longest_task_s(),
        )
    agent.connect_signals()
    app.worker_main(
        [
            "worker",
            "--queues",
            tasks.bench_queue(machine_type),
            # One task at a time in this process: concurrent measurements would disturb each other.
            "--pool",
            "solo",
            "--concurrency",
            "1",
            "--prefetch-multiplier",
            "1",
            *tasks.WORKER_FLAGS,
            "--hostname",
            f"agent-{machine_type}@{socket.gethostname()}",
            "--loglevel",
            "INFO",
        ]
    )


if __name__ == "__main__":
    main()

"""Start a benchmark agent for the configured machine type: `python -m gpu_agent`."""

import socket

from gpu_agent.app import app
from shared import tasks
from shared.settings import get_settings


def main() -> None:
    """Run one Celery worker on bench.<machine type>, one measurement at a time."""
    machine = get_settings().agent_machine_type
    app.worker_main(
        [
            "worker",
            "--queues",
            tasks.bench_queue(machine),
            # One task at a time in this process: concurrent measurements would disturb each other.
            "--pool",
            "solo",
            "--concurrency",
            "1",
            "--prefetch-multiplier",
            "1",
            "--hostname",
            f"agent-{machine}@{socket.gethostname()}",
            "--loglevel",
            "INFO",
        ]
    )


if __name__ == "__main__":
    main()

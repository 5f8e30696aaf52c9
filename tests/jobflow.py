"""Helpers that drive the job path in-process: the same functions the Celery tasks call."""

import json
from typing import Any

from gpu_agent import app as agent
from shared import jobs
from shared.schemas import JobRequest
from tests.conftest import broker


def submit(**overrides: Any) -> dict[str, Any]:
    """Store a job as the API does (without sending it)."""
    body = {"cnns": ["resnet18"], "machines": ["local"], "batch_sizes": [1, 2], "image_size": 32} | overrides
    job, _ = jobs.create(request=JobRequest.model_validate(body))
    return job


def take_queued(task: str, machine: str = "local") -> dict[str, Any]:
    """Take a task's first queued message off the machine's queue (layer and op work share it); its kwargs."""
    key = f"bench.{machine}"
    for raw in broker().lrange(key, 0, -1):
        message = json.loads(raw)
        if message["headers"]["task"] == task:
            broker().lrem(key, 1, raw)
            _args, kwargs, _embed = json.loads(_body(message))
            return dict(kwargs)
    raise AssertionError(f"no {task} message in {key}")


def drain_agent_queue(machine: str = "local") -> int:
    """Consume the machine's queued benchmark messages by running the agent's task on each."""
    count = 0
    while (raw := broker().lpop(f"bench.{machine}")) is not None:
        message = json.loads(raw)
        task = {
            "gpu_agent.bench_layers": agent.bench_layers,
            "gpu_agent.measure_steps": agent.measure_steps,
            "gpu_agent.bench_ops": agent.bench_ops,
        }
        _args, kwargs, _embed = json.loads(_body(message))
        task[message["headers"]["task"]](**kwargs)
        count += 1
    return count


def calibrate_as(
    machine: str, monkeypatch: Any, cnns: tuple[str, ...] = ("resnet18", "squeezenet1_1")
) -> dict[str, Any]:
    """Calibrate a machine type in-process with this CPU standing in for its agent; the fitted model.

    The rows carry this CPU's environment: a test stands in for, e.g., a T4 of g4dn.xlarge.
    """
    from shared.settings import get_settings
    from worker import calibrate, predictor

    monkeypatch.setenv("AGENT_MACHINE_TYPE", machine)
    get_settings.cache_clear()
    try:
        calibrate.send(calibrate.Plan(machine=machine, cnns=cnns, batch_sizes=(2,), image_size=32))
        drain_agent_queue(machine)
        return predictor.train(machine=machine)
    finally:
        monkeypatch.delenv("AGENT_MACHINE_TYPE")
        get_settings.cache_clear()


def _body(message: dict[str, Any]) -> str:
    import base64

    return base64.b64decode(message["body"]).decode()

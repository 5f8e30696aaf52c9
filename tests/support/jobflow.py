"""Helpers that drive the job path in-process: the same functions the Celery tasks call."""

import json
from typing import TYPE_CHECKING, Any

from gpu_agent import app as agent
from shared import jobs
from shared.core.db import transaction
from shared.jobs.request import JobRequest
from shared.jobs.store import JobRow
from tests.support.stack import broker

if TYPE_CHECKING:
    from worker.predictor import PredictorModel

# conv_ms from the stored rows, as the definition says: Σ count × (forward + backward data + backward weight).
STORED_CONV_MS = """
SELECT b.batch_size, sum(m.count) AS convs,
       sum(m.count * (b.forward_ms + b.backward_data_ms + b.backward_weight_ms)) AS conv_ms
FROM cnn_layers m JOIN layer_benchmarks b ON b.signature_id = m.signature_id
WHERE m.cnn_name = %s AND m.image_size = %s AND m.num_classes = 1000 AND b.machine_type = %s
  AND b.precision = 'fp32' AND NOT b.channels_last AND NOT b.oom
GROUP BY b.batch_size ORDER BY b.batch_size"""


def submit(**overrides: Any) -> JobRow:
    """Store a job as the API does (without sending it)."""
    body = {"cnns": ["resnet18"], "machines": ["local"], "batch_sizes": [1, 2], "image_size": 32} | overrides
    job, _ = jobs.create(request=JobRequest.model_validate(body))
    return job


def take_queued(task: str, machine_type: str = "local") -> dict[str, Any]:
    """Take a task's first queued message off the machine's queue (layer and op work share it); its kwargs."""
    key = f"bench.{machine_type}"
    raws: list[bytes] = broker().lrange(key, 0, -1)  # type: ignore[assignment]  # bytes: no decode_responses
    for raw in raws:
        message = json.loads(raw)
        if message["headers"]["task"] == task:
            broker().lrem(key, 1, raw)  # type: ignore[arg-type]  # the hint says str; Redis takes the bytes it gave
            _args, kwargs, _embed = json.loads(message_body(message))
            return dict(kwargs)
    raise AssertionError(f"no {task} message in {key}")


def drain_agent_queue(machine_type: str = "local") -> int:
    """Consume the machine's queued benchmark messages by running the agent's task on each."""
    count = 0
    while (raw := broker().lpop(f"bench.{machine_type}")) is not None:
        message = json.loads(raw)  # type: ignore[arg-type]  # one element: bytes, not the hint's list
        task = {
            "gpu_agent.bench_layers": agent.bench_layers,
            "gpu_agent.measure_steps": agent.measure_steps,
            "gpu_agent.bench_ops": agent.bench_ops,
        }
        _args, kwargs, _embed = json.loads(message_body(message))
        task[message["headers"]["task"]](**kwargs)
        count += 1
    return count


def calibrate_as(
    machine_type: str, monkeypatch: Any, cnns: tuple[str, ...] = ("resnet18", "squeezenet1_1")
) -> "PredictorModel":
    """Calibrate a machine type in-process with this CPU standing in for its agent; the fitted model.

    The rows carry this CPU's environment: a test stands in for, e.g., a T4 of g4dn.xlarge.
    """
    from calibration import run as calibrate
    from shared.core.settings import get_settings
    from worker import predictor

    monkeypatch.setenv("AGENT_MACHINE_TYPE", machine_type)
    get_settings.cache_clear()
    try:
        calibrate.send(calibrate.Plan(machine_type=machine_type, cnns=cnns, batch_sizes=(2,), image_size=32))
        drain_agent_queue(machine_type)
        return predictor.train(machine_type=machine_type)
    finally:
        monkeypatch.delenv("AGENT_MACHINE_TYPE")
        get_settings.cache_clear()


def message_body(message: dict[str, Any]) -> str:
    """The JSON text of a Celery message body as it sits in a Redis list."""
    import base64

    return base64.b64decode(message["body"]).decode()


def stored_conv_ms(cnn: str, image_size: int, machine_type: str = "local") -> dict[int, tuple[int, float]]:
    """Per batch size: the convs counted and Σ count × (fwd + bwd data + bwd weight) of the stored rows."""
    with transaction() as cur:
        cur.execute(STORED_CONV_MS, (cnn, image_size, machine_type))
        return {r["batch_size"]: (int(r["convs"]), float(r["conv_ms"])) for r in cur.fetchall()}

"""The agent's Celery app and tasks; start it with `python -m gpu_agent`."""

import logging
from typing import Any

from gpu_agent import environment, layer_bench, step_bench, store
from shared import tasks
from shared.errors import InvalidRequest
from shared.settings import get_settings
from shared.signatures import ConvSignature

log = logging.getLogger(__name__)
app = tasks.make_app("traincast-agent")


def _check_machine(machine_type: str) -> None:
    mine = get_settings().agent_machine_type
    if machine_type != mine:
        # A misrouted task must not store another machine's timings under this one.
        raise InvalidRequest(f"agent for {mine!r} received work for {machine_type!r}")


@app.task(name=tasks.BENCH_LAYERS)
def bench_layers(machine_type: str, precision: str, items: list[dict[str, Any]]) -> int:
    """Measure conv signatures at their batch sizes; skip what is stored. Returns rows written."""
    _check_machine(machine_type)
    dev = environment.device()
    env_id = environment.environment_id(str(dev))
    cap = get_settings().bench_time_cap_s
    written = 0
    for item in items:
        sig = ConvSignature.from_json(item["spec"])
        done = store.layer_batch_sizes_done(
            signature_id=item["signature_id"], machine=machine_type, precision=precision, environment_id=env_id
        )
        for bs in sorted(set(item["batch_sizes"]) - done):
            result = layer_bench.run(sig, bs, precision, dev, time_cap_s=cap)
            store.save_layer(
                signature_id=item["signature_id"],
                machine=machine_type,
                batch_size=bs,
                precision=precision,
                environment_id=env_id,
                result=result,
            )
            written += 1
        # Tell the worker after each signature, so job progress moves while we measure.
        tasks.send(tasks.ADVANCE_JOBS, machine_type=machine_type)
    return written


@app.task(name=tasks.MEASURE_STEPS)
def measure_steps(
    machine_type: str, cnn: str, image_size: int, optimizer: str, precision: str, batch_sizes: list[int]
) -> int:
    """Time whole training steps of a CNN at several batch sizes; skip what is stored."""
    _check_machine(machine_type)
    dev = environment.device()
    env_id = environment.environment_id(str(dev))
    done = store.step_batch_sizes_done(
        cnn=cnn,
        machine=machine_type,
        image_size=image_size,
        optimizer=optimizer,
        precision=precision,
        environment_id=env_id,
    )
    written = 0
    for bs in sorted(set(batch_sizes) - done):
        result = step_bench.run(
            cnn, bs, image_size, optimizer, precision, dev, time_cap_s=4 * get_settings().bench_time_cap_s
        )
        store.save_step(
            cnn=cnn,
            machine=machine_type,
            batch_size=bs,
            image_size=image_size,
            optimizer=optimizer,
            precision=precision,
            environment_id=env_id,
            result=result,
        )
        written += 1
    return written

"""Calibration: measure whole training steps of a few CNNs on a machine type, then fit its model."""

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shared import layers, tasks
from shared.db import one, transaction
from shared.errors import TraincastError
from worker import planning, predictor

# Families that behave differently: plain, residual, dense, depthwise, inverted residual, fire.
DEFAULT_CNNS = ("alexnet", "vgg11", "resnet18", "densenet121", "mobilenet_v2", "squeezenet1_1")
DEFAULT_BATCH_SIZES = (4, 8)

COUNT_STEPS = """
SELECT count(DISTINCT (cnn_name, batch_size)) AS n FROM step_measurements
WHERE machine_type = %s AND image_size = %s AND optimizer = %s AND precision = %s
  AND cnn_name = ANY(%s) AND batch_size = ANY(%s)"""


@dataclass(frozen=True)
class Plan:
    """What a calibration measures."""

    machine: str
    cnns: tuple[str, ...] = DEFAULT_CNNS
    batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES
    image_size: int = 224
    optimizer: str = "sgd"
    precision: str = "fp32"


def send(plan: Plan) -> tuple[list[int], int]:
    """Register the CNNs and send their missing layer and step work; returns (signature ids, steps wanted)."""
    sig_ids: set[int] = set()
    for cnn in plan.cnns:
        sig_ids.update(s for s, _ in layers.register_builtin(name=cnn, image_size=plan.image_size))
    missing = _missing_layers(sorted(sig_ids), plan)
    planning.send_work(missing, plan.precision)
    for cnn in plan.cnns:
        tasks.send(
            tasks.MEASURE_STEPS,
            queue=tasks.bench_queue(plan.machine),
            machine_type=plan.machine,
            cnn=cnn,
            image_size=plan.image_size,
            optimizer=plan.optimizer,
            precision=plan.precision,
            batch_sizes=list(plan.batch_sizes),
        )
    return sorted(sig_ids), len(plan.cnns) * len(plan.batch_sizes)


def progress(plan: Plan, sig_ids: list[int]) -> tuple[int, int]:
    """(done, needed) over layer benchmarks and whole steps together."""
    layers_needed = len(sig_ids) * len(plan.batch_sizes)
    layers_missing = len(_missing_layers(sig_ids, plan))
    with transaction() as cur:
        cur.execute(
            COUNT_STEPS,
            (plan.machine, plan.image_size, plan.optimizer, plan.precision, list(plan.cnns), list(plan.batch_sizes)),
        )
        steps_done = int(one(cur)["n"])
    needed = layers_needed + len(plan.cnns) * len(plan.batch_sizes)
    return layers_needed - layers_missing + steps_done, needed


def run(plan: Plan, *, timeout_s: float, on_progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Send the work, wait until it is stored, then train and store a model version."""
    sig_ids, _ = send(plan)
    deadline = time.monotonic() + timeout_s
    while True:
        done, needed = progress(plan, sig_ids)
        if on_progress:
            on_progress(done, needed)
        if done >= needed:
            break
        if time.monotonic() > deadline:
            raise TraincastError(
                f"calibration of {plan.machine} timed out after {timeout_s:.0f} s with {done}/{needed} "
                f"measurements stored; is an agent for {plan.machine} running?"
            )
        time.sleep(1.0)
    return predictor.train(machine=plan.machine)


def _missing_layers(sig_ids: list[int], plan: Plan) -> set[tuple[int, str, int]]:
    wanted = {(s, plan.machine, b) for s in sig_ids for b in plan.batch_sizes}
    done = layers.measured(
        signature_ids=sig_ids, machines=[plan.machine], batch_sizes=list(plan.batch_sizes), precision=plan.precision
    )
    return wanted - done

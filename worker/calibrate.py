"""Calibration: measure whole training steps of a CNN set on a machine type, then fit its model."""

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shared import agents, layers, machines, ops, tasks
from shared.db import transaction
from shared.errors import TraincastError
from shared.settings import get_settings
from shared.training import TrainConfig
from worker import coverage, predictor

# Families that behave differently: plain (alexnet, vgg), residual (resnet), dense (densenet),
# inverted residual (mobilenet_v2), depthwise with channel shuffle (shufflenet), fire (squeezenet).
DEFAULT_CNNS = (
    "alexnet",
    "vgg11",
    "resnet18",
    "densenet121",
    "mobilenet_v2",
    "shufflenet_v2_x1_0",
    "squeezenet1_1",
)
# Enough CNNs of enough families for a leave-one-CNN-out evaluation to mean something (issue 5).
FULL_CNNS = (
    *DEFAULT_CNNS,
    "vgg16",
    "resnet50",
    "resnext50_32x4d",
    "densenet169",
    "mobilenet_v3_small",
    "mobilenet_v3_large",
    "efficientnet_b0",
    "mnasnet1_0",
    "regnet_x_400mf",
    "regnet_y_400mf",
    "googlenet",
    # A second member of each family, sized apart, so a held-out CNN always has relatives.
    "vgg13",
    "vgg19",
    "resnet34",
    "resnet101",
    "wide_resnet50_2",
    "densenet201",
    "mnasnet0_5",
    "shufflenet_v2_x0_5",
    "regnet_x_800mf",
    "efficientnet_b1",
    "squeezenet1_0",
)
SETS = {"default": DEFAULT_CNNS, "full": FULL_CNNS}
DEFAULT_BATCH_SIZES = (4, 8)
# At 224 px the default set takes far over the 15 minutes a CPU calibration may take; 112 px
# still runs every CNN of the set and costs about a quarter.
CPU_IMAGE_SIZE = 112
GPU_IMAGE_SIZE = 224

# Completeness is judged per environment: rows of two environments never make one calibration.
_CONFIG = """optimizer = %(optimizer)s AND momentum = %(momentum)s AND weight_decay = %(weight_decay)s
      AND precision = %(precision)s AND channels_last = %(channels_last)s"""
COUNT_BY_ENVIRONMENT = f"""
SELECT environment_id, sum(n) AS n FROM (
    SELECT environment_id, count(DISTINCT (signature_id, batch_size)) AS n FROM layer_benchmarks
    WHERE machine_type = %(machine)s AND precision = %(layer_precision)s AND channels_last = %(channels_last)s
      AND signature_id = ANY(%(sigs)s) AND batch_size = ANY(%(batch_sizes)s)
    GROUP BY environment_id
    UNION ALL
    SELECT environment_id, count(DISTINCT (op_signature_id, batch_size)) AS n FROM op_benchmarks
    WHERE machine_type = %(machine)s AND op_signature_id = ANY(%(op_sigs)s)
      AND ((batch_size = ANY(%(batch_sizes)s) AND variant = %(op_variant)s)
           OR (batch_size = 0 AND variant = %(optimizer_variant)s))
    GROUP BY environment_id
    UNION ALL
    SELECT environment_id, count(DISTINCT (cnn_name, batch_size)) AS n FROM (
        SELECT environment_id, cnn_name, batch_size, image_size, machine_type, optimizer, momentum, weight_decay,
               precision, channels_last
        FROM step_measurements
        UNION ALL
        SELECT environment_id, cnn_name, batch_size, image_size, machine_type, optimizer, momentum, weight_decay,
               precision, channels_last
        FROM step_failures
    ) s
    WHERE machine_type = %(machine)s AND image_size = %(image_size)s AND {_CONFIG}
      AND cnn_name = ANY(%(cnns)s) AND batch_size = ANY(%(batch_sizes)s)
    GROUP BY environment_id
) per_kind
GROUP BY environment_id
ORDER BY n DESC
LIMIT 1"""
SELECT_FAILURES = f"""
SELECT DISTINCT cnn_name, batch_size, reason FROM step_failures
WHERE machine_type = %(machine)s AND image_size = %(image_size)s AND {_CONFIG}
  AND cnn_name = ANY(%(cnns)s) AND batch_size = ANY(%(batch_sizes)s)
ORDER BY cnn_name, batch_size"""


@dataclass(frozen=True)
class Plan:
    """What a calibration measures."""

    machine: str
    cnns: tuple[str, ...] = DEFAULT_CNNS
    batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES
    image_size: int = GPU_IMAGE_SIZE
    config: TrainConfig = TrainConfig()  # SGD without momentum in fp32: what a request asks by default

    def params(self, sig_ids: list[int] | None = None) -> dict[str, Any]:
        """Query parameters naming this plan's rows."""
        return {
            **self.config.model_dump(),
            "layer_precision": self.config.layer_precision,
            "op_variant": self.config.op_variant,
            "optimizer_variant": self.config.optimizer_variant,
            "op_sigs": [],
            "machine": self.machine,
            "image_size": self.image_size,
            "cnns": list(self.cnns),
            "batch_sizes": list(self.batch_sizes),
            "sigs": sig_ids or [],
        }


def default_image_size(machine: str) -> int:
    """112 px for a machine type without a GPU (a CPU calibration must finish in minutes), else 224."""
    return CPU_IMAGE_SIZE if machines.get_by_name(name=machine)["gpu"] is None else GPU_IMAGE_SIZE


def send(plan: Plan) -> tuple[list[int], int]:
    """Register the CNNs and send their layer and step work; returns (signature ids, steps wanted)."""
    sig_ids: set[int] = set()
    for cnn in plan.cnns:
        sig_ids.update(s for s, _ in layers.register_builtin(name=cnn, image_size=plan.image_size))
    # Everything, not just what some environment has: the agent skips what its own has stored.
    config = plan.config
    coverage.send_work(
        {plan.machine: {(s, b) for s in sig_ids for b in plan.batch_sizes}},
        config.layer_precision,
        config.channels_last,
    )
    coverage.send_op_work({plan.machine: op_points(plan)}, config)
    for cnn in plan.cnns:
        tasks.send(
            tasks.MEASURE_STEPS,
            queue=tasks.bench_queue(plan.machine),
            machine_type=plan.machine,
            cnn=cnn,
            image_size=plan.image_size,
            optimizer=plan.config.optimizer,
            precision=plan.config.precision,
            batch_sizes=list(plan.batch_sizes),
            config=plan.config.model_dump(),
        )
    return sorted(sig_ids), len(plan.cnns) * len(plan.batch_sizes)


def op_points(plan: Plan) -> set[tuple[int, int]]:
    """(op signature, batch size) pairs of the plan's CNNs: every op at each batch size, each optimizer step at 0."""
    members = [m for cnn in plan.cnns for m in ops.members(name=cnn, image_size=plan.image_size, num_classes=1000)]
    return {(sig, b) for sig, spec, _count in members for b in ops.points(spec, list(plan.batch_sizes))}


def progress(plan: Plan, sig_ids: list[int]) -> tuple[int, int]:
    """(done, needed) over layer and op benchmarks and whole steps, in the most complete environment."""
    points = op_points(plan)
    needed = (len(sig_ids) + len(plan.cnns)) * len(plan.batch_sizes) + len(points)
    with transaction() as cur:
        cur.execute(COUNT_BY_ENVIRONMENT, plan.params(sig_ids) | {"op_sigs": sorted({s for s, _b in points})})
        row = cur.fetchone()
    return (int(row["n"]) if row else 0), needed


def failures(plan: Plan) -> list[dict[str, Any]]:
    """The (CNN, batch size) steps the agent found the CNN cannot take, with torch's reason."""
    with transaction() as cur:
        cur.execute(SELECT_FAILURES, plan.params())
        return [dict(r) for r in cur.fetchall()]


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
                f"measurements stored in one environment; {_agents_hint(plan.machine)}"
            )
        time.sleep(1.0)
    return predictor.train(machine=plan.machine, config=plan.config)


def _agents_hint(machine: str) -> str:
    rows = agents.list_all(alive_after_s=get_settings().agent_alive_after_s, machine=machine, limit=20)
    alive = [a for a in rows if a["alive"]]
    if not alive:
        return f"no agent for {machine} is alive (GET /v1/agents); start one with `python -m gpu_agent`"
    errors = [f"{a['host']} pid {a['pid']}: {a['last_error']}" for a in alive if a["last_error"]]
    return "last agent failures: " + "; ".join(errors) if errors else f"{len(alive)} agent(s) alive, still measuring"

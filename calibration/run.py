"""Calibration: measure whole training steps of a CNN set on a machine type, then fit its model(s).

One calibration may span several settings (image size × batch sizes) and training configurations: every
configuration gets its own model, learnt from its steps at every setting, so a prediction at a setting
it did not measure is evaluated (prediction/validation.py) and holds.
"""

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from pydantic import ValidationError

from shared import agents, machine_types
from shared.core import tasks
from shared.core.errors import InvalidRequest, TraincastError
from shared.core.settings import get_settings
from shared.measurements import environments, layers, ops, steps
from shared.training import PRECISIONS, TrainConfig, config_of
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
# Enough CNNs of enough families for a leave-one-CNN-out evaluation to mean something.
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
Setting = tuple[int, tuple[int, ...]]  # (image size, its batch sizes)
# A default calibration spreads image sizes and batch sizes, so that a setting left out of a fit can be
# scored (prediction/validation.py: batch sizes 2-8 fit, 16 and 32 held out). Each (image size, batch size)
# costs its own layer benchmarks (signatures change with the image size), so a CPU measures five, fewer
# where a step is dearer (larger images), the large batches where it is cheap: 259 s for the default set
# on 2 idle cores (760 layer rows, 35 steps; docs/PERFORMANCE.md), 116 s at 112 px × batch 4, 8 alone.
CPU_SETTINGS: tuple[Setting, ...] = ((64, (8, 32)), (112, (4, 16)), (160, (2,)))
GPU_SETTINGS: tuple[Setting, ...] = ((160, (16, 64)), (224, (8, 32, 128)))

# What `sgd+momentum` and `sgd+wd` stand for in --configs: any non-zero value is the same work (cost key).
KEY_MOMENTUM = 0.9
KEY_WEIGHT_DECAY = 1e-4


def config_from_key(key: str, precision: str = "fp32") -> TrainConfig:
    """'sgd', 'sgd+momentum', 'adamw', 'adam+wd/amp_bf16', 'sgd/fp32/channels_last/cudnn_benchmark' → a configuration of
    that key.

    precision: the one used when the key names none. Raises InvalidRequest naming the key.
    """
    head, *rest = key.strip().split("/")
    optimizer, *extras = head.split("+")
    unknown = [e for e in extras if e not in ("momentum", "wd")]
    unknown += [r for r in rest if r not in (*PRECISIONS, "channels_last", "cudnn_benchmark")]
    if unknown or not optimizer:
        raise InvalidRequest(
            f"training configuration {key!r}: write "
            "optimizer[+momentum][+wd][/precision][/channels_last][/cudnn_benchmark], "
            f"e.g. sgd+momentum/amp_bf16 (unknown: {', '.join(unknown) or 'no optimizer'})"
        )
    try:
        return config_of(
            optimizer=optimizer, precision=next((r for r in rest if r in PRECISIONS), precision),
            momentum=KEY_MOMENTUM if "momentum" in extras else 0.0,
            weight_decay=KEY_WEIGHT_DECAY if "wd" in extras else None, channels_last="channels_last" in rest,
            cudnn_benchmark="cudnn_benchmark" in rest,
        )  # fmt: skip
    except ValidationError as exc:
        reasons = "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())
        raise InvalidRequest(f"training configuration {key!r}: {reasons}") from None


@dataclass(frozen=True)
class Plan:
    """What a calibration measures: one setting and configuration, or (settings, configs) several."""

    machine_type: str
    cnns: tuple[str, ...] = DEFAULT_CNNS
    batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES
    image_size: int = GPU_IMAGE_SIZE
    config: TrainConfig = TrainConfig()  # SGD without momentum in fp32: what a request asks by default
    settings: tuple[Setting, ...] = ()  # every (image size, batch sizes); empty: (image_size, batch_sizes)
    configs: tuple[TrainConfig, ...] = ()  # every configuration; empty: config

    def grid(self) -> tuple[Setting, ...]:
        """Every (image size, batch sizes) measured."""
        return self.settings or ((self.image_size, self.batch_sizes),)

    def every_config(self) -> tuple[TrainConfig, ...]:
        """Every training configuration measured (each gets a model)."""
        return tuple(dict.fromkeys(self.configs)) or (self.config,)

    def units(self) -> list["Plan"]:
        """One plan per configuration × setting, each of one image size and one configuration."""
        return [
            replace(self, image_size=size, batch_sizes=sizes, config=config, settings=(), configs=())
            for config in self.every_config() for size, sizes in self.grid()
        ]  # fmt: skip

    def describe(self) -> str:
        """E.g. '7 CNNs at 64 px batch 8,32; 112 px batch 4,16; 160 px batch 2 (the CPU spread); sgd/fp32'."""
        grid = "; ".join(f"{size} px batch {','.join(map(str, sizes))}" for size, sizes in self.grid())
        spread = {CPU_SETTINGS: " (the CPU spread)", GPU_SETTINGS: " (the GPU spread)"}.get(self.grid(), "")
        return f"{len(self.cnns)} CNNs at {grid}{spread}; {', '.join(c.cost_key() for c in self.every_config())}"

    def params(self, sig_ids: list[int] | None = None) -> dict[str, Any]:
        """Query parameters naming this plan's rows (of one unit: its image size and configuration)."""
        return {
            **self.config.model_dump(),
            "layer_precision": self.config.layer_precision,
            "op_variant": self.config.op_variant,
            "optimizer_variant": self.config.optimizer_variant,
            "op_sigs": [],
            "machine_type": self.machine_type,
            "image_size": self.image_size,
            "cnns": list(self.cnns),
            "batch_sizes": list(self.batch_sizes),
            "sigs": sig_ids or [],
        }


def default_image_size(machine_type: str) -> int:
    """112 px for a machine type without a GPU in the catalog (a CPU calibration must finish in minutes), else 224."""
    return CPU_IMAGE_SIZE if machine_types.get_by_name(name=machine_type)["gpu"] is None else GPU_IMAGE_SIZE


def default_settings(machine_type: str) -> tuple[Setting, ...]:
    """The spread a calibration spans by default: the GPU one where the catalog gives the type a GPU, else the CPU one.

    `local` has a GPU once an agent of it on a CUDA host registered (shared/local_machine.py).
    """
    return CPU_SETTINGS if machine_types.get_by_name(name=machine_type)["gpu"] is None else GPU_SETTINGS


def send(plan: Plan) -> tuple[list[int], int]:
    """Register the CNNs and send their layer and step work; returns (signature ids, steps wanted)."""
    sent = send_units(plan)
    return sorted({s for sigs in sent.values() for s in sigs}), sum(len(u.cnns) * len(u.batch_sizes) for u in sent)


def send_units(plan: Plan) -> dict[Plan, list[int]]:
    """Send every unit's layer and step work (layer work once per precision); unit → its signature ids."""
    sent: dict[Plan, list[int]] = {}
    layer_work: dict[tuple[str, bool], set[tuple[int, int]]] = defaultdict(set)
    for unit in plan.units():
        sig_ids: set[int] = set()
        for cnn in unit.cnns:
            sig_ids.update(s for s, _ in layers.register_builtin(name=cnn, image_size=unit.image_size))
        key = (unit.config.layer_precision, unit.config.channels_last)
        layer_work[key] |= {(s, b) for s in sig_ids for b in unit.batch_sizes}
        sent[unit] = sorted(sig_ids)
    # Everything, not just what some environment has: the agent skips what its own has stored.
    for (precision, channels_last), work in layer_work.items():
        coverage.send_work({plan.machine_type: work}, precision, channels_last)
    for unit in sent:
        coverage.send_op_work({unit.machine_type: op_points(unit)}, unit.config)
        for cnn in unit.cnns:
            tasks.send(
                tasks.MEASURE_STEPS,
                queue=tasks.bench_queue(unit.machine_type),
                machine_type=unit.machine_type,
                cnn=cnn,
                image_size=unit.image_size,
                optimizer=unit.config.optimizer,
                precision=unit.config.precision,
                batch_sizes=list(unit.batch_sizes),
                config=unit.config.wire(),
            )
    return sent


def progress_of(sent: dict[Plan, list[int]]) -> tuple[int, int]:
    """(done, needed) summed over the units send_units sent."""
    counts = [progress(unit, sig_ids) for unit, sig_ids in sent.items()]
    return sum(c[0] for c in counts), sum(c[1] for c in counts)


def op_points(plan: Plan) -> set[tuple[int, int]]:
    """(op signature, batch size) pairs of the plan's CNNs: every op at each batch size, each optimizer step at 0."""
    members = [m for cnn in plan.cnns for m in ops.members(name=cnn, image_size=plan.image_size, num_classes=1000)]
    return {(sig, b) for sig, spec, _count in members for b in ops.points(spec, list(plan.batch_sizes))}


def progress(plan: Plan, sig_ids: list[int]) -> tuple[int, int]:
    """(done, needed) of one unit over layer and op benchmarks and whole steps, in the most complete environment."""
    points = op_points(plan)
    needed = (len(sig_ids) + len(plan.cnns)) * len(plan.batch_sizes) + len(points)
    batch_sizes, config = list(plan.batch_sizes), plan.config
    # Completeness is judged per environment: rows of two environments never make one calibration.
    done = environments.most_complete([
        layers.count_by_environment(
            machine_type=plan.machine_type, precision=config.layer_precision, channels_last=config.channels_last,
            signature_ids=sig_ids, batch_sizes=batch_sizes,
        ),
        ops.count_by_environment(
            machine_type=plan.machine_type, signature_ids=sorted({s for s, _b in points}), batch_sizes=batch_sizes,
            config=config,
        ),
        steps.count_by_environment(
            machine_type=plan.machine_type, image_size=plan.image_size, config=config, cnns=list(plan.cnns),
            batch_sizes=batch_sizes,
        ),
    ])  # fmt: skip
    return done, needed


def failures(plan: Plan) -> list[dict[str, Any]]:
    """The (CNN, batch size) steps the agent found the CNN cannot take, with torch's reason (and setting)."""
    found = []
    for unit in plan.units():
        rows = steps.failures(
            machine_type=unit.machine_type, image_size=unit.image_size, config=unit.config, cnns=list(unit.cnns),
            batch_sizes=list(unit.batch_sizes),
        )  # fmt: skip
        found += [{**r, "image_size": unit.image_size, "training": unit.config.cost_key()} for r in rows]
    return found


def run(
    plan: Plan, *, timeout_s: float, on_progress: Callable[[int, int], None] | None = None
) -> list[predictor.PredictorModel]:
    """Send the work, wait until it is stored, then train and store a model version per configuration."""
    sent = send_units(plan)
    deadline = time.monotonic() + timeout_s
    while True:
        done, needed = progress_of(sent)
        if on_progress:
            on_progress(done, needed)
        if done >= needed:
            break
        if time.monotonic() > deadline:
            raise TraincastError(
                f"calibration of {plan.machine_type} timed out after {timeout_s:.0f} s with {done}/{needed} "
                f"measurements stored in one environment; {_agents_hint(plan.machine_type)}"
            )
        time.sleep(1.0)
    return [predictor.train(machine_type=plan.machine_type, config=config) for config in plan.every_config()]


def _agents_hint(machine_type: str) -> str:
    rows = agents.list_all(alive_after_s=get_settings().agent_alive_after_s, machine_type=machine_type, limit=20)
    alive = [a for a in rows if a["alive"]]
    if not alive:
        return f"no agent for {machine_type} is alive (GET /v1/agents); start one with `python -m gpu_agent`"
    errors = [f"{a['host']} pid {a['pid']}: {a['last_error']}" for a in alive if a["last_error"]]
    return "last agent failures: " + "; ".join(errors) if errors else f"{len(alive)} agent(s) alive, still measuring"

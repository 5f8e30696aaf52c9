"""Assembling a result, stage 1 of 4 (worker/assemble.py): everything a job needs, read once.

A `Gathered` holds the request's machine types (catalog row, peers, model, whether it is answered by its own
benchmarks or by the reference predictor, its input rate) and CNNs (layer members, workload, memory memo), so
that the later stages read nothing more than the benchmark rows of the machine types they estimate.
"""

from collections.abc import Collection
from dataclasses import dataclass, field

from prediction import input_pipeline, memory_model, reference
from shared import machine_types
from shared.cnn import registry as cnns
from shared.cnn.workload import WorkloadJson
from shared.jobs.request import JobRequest
from shared.machine_types import MachineTypeInfo
from shared.measurements import allreduce, layers, ops
from shared.measurements import inputs as input_rates
from shared.measurements.allreduce import Measured
from shared.measurements.members import Member
from shared.training import TrainConfig
from worker import predictor, reference_store, step_cache

# A CNN's layers (or operators): (signature id, spec, count).
Members = list[Member]


@dataclass(frozen=True)
class Cnn:
    """One CNN of the request: its layers, its workload and this process's memo of its memory peaks."""

    name: str
    members: Members
    work: WorkloadJson
    digest: bytes  # of its workload (worker/step_cache.py)
    memo: memory_model.Memo


@dataclass(frozen=True)
class Machine:
    """One machine type of the request and how it is answered."""

    name: str
    info: MachineTypeInfo
    peers: list[str]  # machine types whose benchmarks it may use (the same GPU model), itself first
    measured: bool  # True: its benchmarks and whole-step model ("benchmarked"); False: the reference predictor
    layers_measured: bool  # none of its layer benchmarks are missing
    model: predictor.PredictorModel | None
    fitted_on: str | None  # the peer whose model answers it
    other_keys: list[str]  # training configurations its peers have models for (none for this one)
    fed: input_pipeline.Sourced | None  # its input rate, when the request decodes its input
    # GPU count → the all-reduce its agent measured over that many GPUs (NCCL); none: modelled.
    allreduce: dict[int, Measured] = field(default_factory=dict)


@dataclass(frozen=True)
class Gathered:
    """A job's request and all it reads before estimating (stage 1's output)."""

    request: JobRequest
    training: TrainConfig
    sizes: list[int]
    classes: dict[str, int]  # CNN → its num_classes
    cnns: tuple[Cnn, ...]  # request order: the plan is jsonb, whose keys PostgreSQL reorders
    machines: tuple[Machine, ...]  # request order
    op_members: dict[str, Members]  # by CNN; read only when some machine type is measured
    reference: reference.ReferenceModel | None  # loaded only when some machine type is answered by it


def gather(*, request: JobRequest, peers: dict[str, list[str]] | None, incomplete: Collection[str]) -> Gathered:
    """Read what the job needs. incomplete: machine types some of whose layer benchmarks are missing."""
    peers = peers or {m: [m] for m in request.machines}
    infos = machine_types.by_names(names=list(request.machines))
    classes = {cnn: cnns.variant_classes(cnn, request.num_classes) for cnn in request.cnns}
    variants = layers.variants(classes=classes, image_size=request.image_size)
    training = request.training()
    everyone = sorted({p for m in request.machines for p in peers[m]})
    # Only a model fitted for this training configuration's work answers it (shared/training.py).
    models = predictor.latest_of(machine_types=everyone, cost_key=training.cost_key())
    other_keys = predictor.keys_of(machine_types=everyone)
    rates = input_rates.newest() if request.decodes_input else None
    spread = [m for m in request.machines if request.spreads(infos[m].get("gpu_count") or 0)]
    timed = allreduce.largest(machine_types=spread) if spread else {}
    machines = []
    for name in request.machines:
        info = infos[name]
        fitted_on = next((p for p in peers[name] if p in models), None)
        model = models.get(fitted_on) if fitted_on else None
        measured = name not in incomplete and (model is not None or not machine_types.reference_can_answer(info))
        machines.append(
            Machine(
                name=name, info=info, peers=peers[name], measured=measured, layers_measured=name not in incomplete,
                model=model, fitted_on=fitted_on,
                other_keys=sorted({k for p in peers[name] for k in other_keys.get(p, [])}),
                fed=input_pipeline.sourced(name, rates) if rates is not None else None,
                allreduce={gpus: m for (machine, gpus), m in timed.items() if machine == name},
            )
        )  # fmt: skip
    by_cnn = []
    for cnn in request.cnns:
        members, work = variants[cnn]
        # Its peaks and largest batch sizes are kept by this process for later jobs.
        digest = step_cache.digest(work)
        by_cnn.append(Cnn(cnn, members, work, digest, memory_model.memo(digest, request)))
    any_measured = any(m.measured for m in machines)
    return Gathered(
        request=request, training=training, sizes=request.batch_size_list(), classes=classes, cnns=tuple(by_cnn),
        machines=tuple(machines),
        op_members=ops.members_of(classes=classes, image_size=request.image_size) if any_measured else {},
        reference=None if all(m.measured for m in machines) else reference_store.attached(reference.load()),
    )  # fmt: skip

"""The input pipeline: a point's step as the slower of its upstream (reading, decoding, augmenting the
batch on the machine's CPUs) and its downstream (the GPUs' step), and what data echoing would gain.

Upstream per step = images a step takes on one machine (per-GPU batch x GPUs) x a CPU's time per image with every
CPU busy (measured by the machine type's agent, gpu_agent/input_bench.py) / the workers that run (DataLoader
workers per GPU x GPUs, at most the vCPUs; where the CPU's threads per core are known, workers that leave cores
free each decode at a whole core's rate), or the time to read those images over network_gbps, whichever is
longer (the two overlap). Data echoing (Choi et al., 2019, arXiv:1907.05550): reusing each upstream batch e times
makes a step max(upstream / e, downstream).
"""

import json
import math
import statistics
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import cast

import numpy as np

from prediction.points import fill_many, iteration_ms
from shared import machine_cpus
from shared.jobs.point import PointDict
from shared.jobs.request import InputSpec, JobRequest
from shared.jobs.result import InputSummaryDict
from shared.machine_cpus import HostCpu
from shared.machine_types import MachineTypeInfo
from shared.measurements.inputs import PIPELINE, InputRate

AUGMENT_PX = 224  # the crop the agent's augmentation produced; other sizes scale its share by pixels
# Where no machine type of an installation has measured its input rate: one our agent's input bench measured on a
# host of ours (`python -m gpu_agent.input_bench --ship ...`), with its environment, answered as a reference.
SHIPPED_RATE = Path(__file__).resolve().parents[1] / "data" / "reference" / "input_rate.json"
MAX_ECHO = 64
NOTE = (
    "input: a point's step is the slower of its input pipeline (input_ms: reading, decoding and augmenting one step's "
    "images with DataLoader workers on the machine's vCPUs, at the rate its agent measured with every CPU busy; a "
    "worker with a core to itself at the whole core's rate) and "
    "its GPU step; input_bound says which, input_bound_ratio by how much. echo_factor: the data echoing factor e "
    "(Choi et al. 2019: each batch reused e times, after augmentation; batch and example echoing cost the same) "
    "that removes the bottleneck, echo_speedup its gain per step; echo_total_seconds is the best case (echoed "
    "examples as useful as fresh ones), while the worst case (worth nothing) is total_seconds: more epochs may be "
    "needed. echo_factor_before_augmentation: the same when only reading and decoding are reused (null when "
    "augmentation alone is the bottleneck). Local disk reads are not modelled (page cache or NVMe assumed)"
)


@dataclass(frozen=True)
class Sourced:
    """The rate a machine type's points use, and where it comes from."""

    rate: InputRate | None
    source: str  # "measured", or "reference" (other machine types', or the shipped rate where none measured)
    detail: str
    per_cpu: float | None  # images per second per CPU, every CPU busy
    cpu: HostCpu | None = None  # the machine type's host CPU, where the catalog knows it


def host_cpu(rate: InputRate) -> HostCpu | None:
    """The CPUs a rate was measured on: the catalog's for its machine type, else what its agent recorded."""
    known = machine_cpus.of(rate.machine_type)
    if known is not None:
        return known
    threads, ghz = rate.stats.get("threads_per_core"), rate.stats.get("cpu_ghz")
    if threads is None and ghz is None:
        return None
    return HostCpu(cpu="its agent's host", threads_per_core=threads, ghz=ghz, ghz_kind="nominal",
                   source=f"recorded by its agent (environment {rate.environment_id})")  # fmt: skip


def scaled(rate: InputRate, to: HostCpu | None) -> tuple[float, list[str]]:
    """A measured per-vCPU rate moved to another machine's vCPUs: by threads per core and clock where both are known."""
    per_cpu, said = rate.per_cpu, list[str]()
    if to is None:
        return per_cpu, said
    src = host_cpu(rate)
    if src is not None and src.per_vcpu is not None and to.per_vcpu is not None and src.per_vcpu != to.per_vcpu:
        per_cpu *= to.per_vcpu / src.per_vcpu
        said.append("threads per core")
    if src is not None and src.ghz and to.ghz and src.ghz != to.ghz:
        per_cpu *= to.ghz / src.ghz
        said.append("clock")
    return per_cpu, said


def sourced(machine_type: str, rates: dict[str, InputRate]) -> Sourced:
    """The machine type's own measured rate, else the median of the measured types' rates moved to its CPUs."""
    own, cpu = rates.get(machine_type), machine_cpus.of(machine_type)
    if own is not None:
        detail = (
            f"measured on {machine_type} by its agent (environment {own.environment_id}, {own.host_cpus} CPUs, "
            f"{own.per_cpu:.0f} images/s per CPU with all busy; {PIPELINE})"
        )
        return Sourced(own, "measured", detail, own.per_cpu, cpu)
    shipped = not rates
    if shipped:
        rate = shipped_rate()
        rates = {rate.machine_type: rate}
    moved = {name: scaled(r, cpu) for name, r in rates.items()}
    per_cpu = statistics.median(v for v, _ in moved.values())
    ref = min(rates.values(), key=lambda r: abs(moved[r.machine_type][0] - per_cpu))
    how = sorted({s for _, said in moved.values() for s in said})
    if cpu is None:
        to = f"{machine_type}'s CPU model is not in the catalog: not scaled to it"
    elif how:
        to = f"scaled by {' and '.join(how)} to {machine_type}'s vCPUs ({cpu.words()}; {cpu.source})"
    else:
        to = f"{machine_type}'s vCPUs ({cpu.words()}) taken as equal to theirs"
    if shipped:
        env = shipped_environment()
        whence = (
            f"no machine type here has measured its input rate yet: reference from the rate Traincast ships (our "
            f"agent's input bench, {env['cpu']}, {env['host_cpus']} CPUs, {env['measured_at'][:10]}; "
            "data/reference/input_rate.json)"
        )
    else:
        whence = (
            f"not measured on {machine_type} yet: reference from {len(rates)} measured machine type(s) "
            f"({', '.join(sorted(rates))})"
        )
    median = "" if shipped else "their median; "
    detail = (
        f"{whence}, {to}: {per_cpu:.0f} images/s per vCPU ({median}core generation not modelled); its agent "
        "measures its own when a job asks (bench_input)"
    )
    return Sourced(ref, "reference", detail, per_cpu, cpu)


@cache
def _shipped() -> dict[str, object]:
    doc: dict[str, object] = json.loads(SHIPPED_RATE.read_text())
    return doc


@cache
def shipped_rate() -> InputRate:
    """The input rate Traincast ships (data/reference/input_rate.json), as measured."""
    return InputRate.model_validate(_shipped()["rate"])


def shipped_environment() -> dict[str, str]:
    """Where and when the shipped rate was measured: CPU, CPUs, the date and the software."""
    env = cast(dict[str, object], _shipped()["environment"])
    return {k: str(v) for k, v in env.items()} | {"measured_at": str(_shipped()["measured_at"])}


def summary(src: Sourced, info: MachineTypeInfo, spec: InputSpec) -> InputSummaryDict:
    """What a result says of a machine type's input pipeline."""
    return {
        "source": src.source,
        "detail": src.detail,
        "images_per_s_per_cpu": None if src.per_cpu is None else round(src.per_cpu, 1),
        "vcpus": _vcpus(info, src),
        "environment_id": src.rate.environment_id if src.source == "measured" and src.rate else None,
        "pipeline": PIPELINE,
        "input": spec.source,
        "cpu": src.cpu.words() if src.cpu else None,
        "cpu_source": src.cpu.source if src.cpu else None,
    }


def _vcpus(info: MachineTypeInfo, src: Sourced) -> int | None:
    if info.get("vcpus"):
        return int(info["vcpus"] or 0)
    # A user's own machine (`local`) has no catalog vCPUs: its agent's host CPUs, when it measured them itself.
    return src.rate.host_cpus if src.source == "measured" and src.rate else None


def apply(points: list[PointDict], *, info: MachineTypeInfo, request: JobRequest, src: Sourced) -> None:
    """Set each timed GPU point's input figures; the step becomes max(input, GPU step), its times and cost again."""
    spec = request.input
    if spec is None or not request.decodes_input:
        return
    vcpus, timed, rows, cpu = _vcpus(info, src), [], [], _cpu(src)
    known = src.rate is not None and src.per_cpu is not None and bool(vcpus)
    decode, augment = _per_image_ms(src, request.image_size) if known else (0.0, 0.0)
    for point in points:
        point.update({"input_ms": None, "input_bound": None, "input_bound_ratio": None, "input_limit": None,
                      "dataloader_workers": None,
                      "echo_factor": None, "echo_factor_before_augmentation": None, "echo_speedup": None,
                      "echo_total_seconds": None})  # fmt: skip
        gpus = point["gpus_used"]
        if not gpus or point["iteration_seconds"] is None or not known or vcpus is None:
            continue  # a CPU trains on the cores that decode: not modelled
        workers = spec.dataloader_workers or max(1, vcpus // gpus)
        images = point["batch_size"] * gpus
        capacity = decoding_vcpus(workers * gpus, vcpus, cpu)
        cpu_ms = images * (decode + augment) / capacity
        read_ms = images * spec.jpeg_kb * 8e3 / (spec.network_gbps * 1e9) * 1e3 if spec.network_gbps else 0.0
        upstream = max(cpu_ms, read_ms)
        ms = iteration_ms(point)
        down = ms[1]
        point["input_ms"] = round(upstream, 3)
        point["dataloader_workers"] = workers
        point["input_bound"] = upstream > down
        point["input_bound_ratio"] = round(upstream / down, 3)
        point["input_limit"] = "network" if read_ms > cpu_ms else "decode_cpus"
        if upstream > down:
            e = math.ceil(upstream / down)
            point["echo_factor"] = e
            point["echo_speedup"] = round(upstream / max(upstream / e, down), 3)
            point["echo_factor_before_augmentation"] = _echo_before(
                images * decode / capacity, images * augment / capacity, read_ms, down
            )
        timed.append(point)
        rows.append([max(upstream, m) for m in ms])
    if timed:
        fill_many(timed, np.array(rows, dtype=float), info, request)
        for point in timed:
            if speedup := point["echo_speedup"]:
                point["echo_total_seconds"] = round(cast(float, point["total_seconds"]) / speedup, 6)


def decoding_vcpus(workers: int, vcpus: int, cpu: HostCpu | None) -> float:
    """The workers' decoding throughput in vCPUs with every CPU busy (the unit the rates are in): a worker alone on a
    core decodes at the whole core's rate, each further thread on it adds only its share of SMT_YIELD - 1."""
    busy = min(workers, vcpus)
    threads = cpu.threads_per_core if cpu is not None else None
    if cpu is None or cpu.per_vcpu is None or threads is None or threads <= 1:
        return float(busy)
    whole = min(busy, vcpus / threads)
    return (whole + (busy - whole) * (machine_cpus.SMT_YIELD - 1) / (threads - 1)) / cpu.per_vcpu


def _cpu(src: Sourced) -> HostCpu | None:
    """The CPUs the points' workers run on: a measured rate's host (host_cpu: the catalog's, else what its agent
    recorded), else the catalog's for the machine type."""
    return host_cpu(src.rate) if src.source == "measured" and src.rate is not None else src.cpu


def _per_image_ms(src: Sourced, image_size: int) -> tuple[float, float]:
    """A CPU's decode and augment time per image with every CPU busy, the augment share scaled to the image size."""
    assert src.rate is not None and src.per_cpu is not None
    busy_ms = 1000 / src.per_cpu
    share = src.rate.augment_ms / (src.rate.decode_ms + src.rate.augment_ms)
    return busy_ms * (1 - share), busy_ms * share * (image_size / AUGMENT_PX) ** 2


def _echo_before(decode_ms: float, augment_ms: float, read_ms: float, down: float) -> int | None:
    """The least e that makes max(read / e, decode / e + augment) no slower than the GPU step, or None."""
    if augment_ms >= down:
        return None
    for e in range(1, MAX_ECHO + 1):
        if max(read_ms / e, decode_ms / e + augment_ms) <= down:
            return e
    return None

"""Data-parallel layouts: a CNN's one-GPU points spread over the GPU and node counts a job asks for.

A point's compute is its one-GPU step at the per-GPU batch (measured or reference); each layout adds the part of
the gradient all-reduce that backward does not hide (prediction/parallel.py, from the machine type's links in
data/interconnect.csv) and DDP's other losses (prediction/ddp_losses.py), and its times, cost and energy are worked
out again for the global batch.
"""

from dataclasses import replace

import numpy as np

from prediction import ddp_losses, parallel
from prediction.points import fill_many, iteration_ms_many
from shared import interconnect
from shared.jobs.point import PointDict
from shared.jobs.request import JobRequest
from shared.machine_types import MachineTypeInfo
from shared.measurements.allreduce import Measured

# Backward is about two thirds of a step's compute (twice the forward's work: gradients of inputs and weights); DDP
# overlaps the all-reduce of each gradient bucket with the backward still to come.
BACKWARD_FRACTION = 2 / 3
# Gradients are all-reduced in the parameters' dtype: fp32 under autocast too (its parameters stay fp32).
GRADIENT_BYTES_PER_PARAMETER = 4
# A user's own machine type registered without links: its GPUs on PCIe 4.0 x16 (NCCL's 24 GB/s).
PCIE_DEFAULT = interconnect.Links(
    intra_link="pcie", intra_gbs=interconnect.PCIE_GBS, network_gbps=None, network_kind="unknown",
    source="assumed: PCIe 4.0 x16 (no row in data/interconnect.csv, none given at registration)",
)  # fmt: skip
NOTE = (
    "batch_size is per GPU; a point trains on gpus_used GPUs of each of `nodes` machines (data parallel, as PyTorch "
    "DDP): its step is the one-GPU step at that batch plus the exposed part of the gradient all-reduce "
    "(exposed_allreduce_ms, modelled from the machine type's links, data/interconnect.csv, with the bus bandwidth its "
    "agent measured within the machine where allreduce_source is 'measured', and between machines at internode_gbps: "
    "the job's figure where it gives one, else the catalog's or the NICs its owner registered, NCCL over TCP "
    "getting 40% of the line rate where RDMA gets 96%), plus what DDP loses besides (ddp_losses_ms: its bucket "
    "copies, NCCL's kernels slowing the backward they overlap, and, where images are decoded, the wait for the "
    "slowest replica); cost_usd is every node's price for that time"
)


def fewer_gpus(machine_gpus: dict[str, int], request: JobRequest) -> str | None:
    """A sentence naming the machine types answered for only some of the GPU counts asked (they have fewer), or None."""
    said = []
    for name, gpus in machine_gpus.items():
        asked, held = request.gpu_counts(gpus), request.gpu_counts_on(gpus)
        if held != asked:
            counts = ", ".join(map(str, held))
            said.append(f"{name} has {gpus} GPU{'s' if gpus != 1 else ''}, so it is answered for gpus {counts} only")
    return "; ".join(said) or None


def spread(
    points: list[PointDict], *, machine_type: str, info: MachineTypeInfo, request: JobRequest, parameters: float,
    measured: dict[int, Measured] | None = None,
) -> list[PointDict]:  # fmt: skip
    """The points for every (GPUs, nodes) layout the request asks of this machine type, one-GPU ones first.

    measured: GPU count → the all-reduce this type's agent timed over that many GPUs; its bus bandwidth replaces the
    catalog's within the machine.
    """
    machine_gpus = info.get("gpu_count") or 0
    layouts = [(g, n) for g in request.gpu_counts_on(machine_gpus) for n in request.node_counts()]
    if not machine_gpus or layouts == [(1, 1)]:
        for point in points:  # a CPU, or one GPU: nothing to exchange
            point["allreduce_ms"] = point["exposed_allreduce_ms"] = 0.0 if point["iteration_seconds"] else None
            point["scaling_efficiency"] = 1.0 if point["iteration_seconds"] else None
        return points
    links = interconnect.links_of(machine_type, info) or PCIE_DEFAULT
    if request.internode_gbps is not None:
        links = replace(links, network_gbps=request.internode_gbps, network_kind="the job's internode_gbps", rdma=None)
    out: list[PointDict] = []
    for i, (gpus, nodes) in enumerate(layouts):
        timing = (measured or {}).get(gpus)
        links_here = parallel.with_measured(links, timing)
        # The last layout takes the points themselves: every earlier one has copied them by then.
        copies = points if i == len(layouts) - 1 else [_copy(p) for p in points]
        for point in copies:
            point["gpus_used"], point["nodes"] = gpus, nodes
            point["global_batch_size"] = point["batch_size"] * gpus * nodes
            if gpus * nodes > 1:
                point["allreduce_source"] = "measured" if timing is not None else "modelled"
            if nodes > 1:
                point["internode_gbps"] = links.network_gbps
                point["internode_network"] = links.network_kind
        timed = [p for p in copies if p["iteration_seconds"] is not None]
        if timed:
            compute = iteration_ms_many(timed)
            gradient = parameters * GRADIENT_BYTES_PER_PARAMETER
            total, exposed = parallel.exposed_many(
                compute[:, 1], backward_fraction=BACKWARD_FRACTION, gradient_bytes=gradient, gpus_per_node=gpus,
                nodes=nodes, links=links_here, algorithm=request.allreduce, grid_x=request.torus_x,
            )  # fmt: skip
            algorithm = parallel.algorithm_run(gradient, gpus_per_node=gpus, nodes=nodes, links=links_here,
                                               algorithm=request.allreduce, grid_x=request.torus_x)  # fmt: skip
            bus, _ = parallel.bus_bandwidth(gpus_per_node=gpus, nodes=nodes, links=links_here)
            copy_ms, contention, stragglers = ddp_losses.losses_many(
                compute[:, 1], exposed, allreduce_ms=total, replicas=gpus * nodes, gradient_bytes=gradient,
                bus_gbs=bus, intra_link=links_here.intra_link, sm_count=info.get("gpu_sm_count"),
                mem_bandwidth_gbs=info.get("gpu_mem_bandwidth_gbs"),
                cv=ddp_losses.STRAGGLER_CV["decoded" if request.decodes_input else "memory"],
            )  # fmt: skip
            added = exposed + copy_ms + contention + stragglers
            # Rounded as arrays: four round() calls per point were a tenth of this stage in a large job.
            efficiency = np.round(compute[:, 1] / (compute[:, 1] + added), 4)
            rows = zip(timed, np.round(exposed, 3).tolist(), np.round(contention, 3).tolist(),
                       np.round(stragglers, 3).tolist(), efficiency.tolist(), strict=True)  # fmt: skip
            multi = gpus * nodes > 1
            total_ms, copies_ms = round(total, 3), round(copy_ms, 3)
            for point, late, held, waited, kept in rows:
                point["allreduce_ms"] = total_ms
                point["allreduce_algorithm"] = algorithm
                point["exposed_allreduce_ms"] = late
                if multi:
                    point["ddp_losses_ms"] = {"bucket_copies": copies_ms, "contention": held, "stragglers": waited}
                point["scaling_efficiency"] = kept
            fill_many(timed, compute + added[:, None], info, request, layout=(gpus, nodes))
        out.extend(copies)
    return out


def _copy(point: PointDict) -> PointDict:
    """A point for another layout: its own lists."""
    copy = point.copy()
    copy["layer_environments"], copy["measured_on"] = list(point["layer_environments"]), list(point["measured_on"])
    return copy

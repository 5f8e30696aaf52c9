"""Data-parallel (PyTorch DDP) step time: a one-GPU step plus the part of the gradient all-reduce backward can't hide.

Pure functions: no database, no torch. The all-reduce follows NCCL's own cost model (src/graph/tuning.cc: a time of
latency + bytes / bandwidth per algorithm, the fastest algorithm picked per call) with per-GPU bus bandwidths from
data/interconnect.csv (sources in data/interconnect.md):

- one machine: ring all-reduce over the GPUs' links, 2(p-1)/p x bytes over the bus bandwidth, 2(p-1) latency steps;
- several machines: NCCL's rings go through each machine's GPUs and cross each machine's network once per ring, so a
  machine's NICs carry 2(p-1)/p x bytes, as in the hierarchical reduce-scatter / all-reduce across machines /
  all-gather decomposition, but pipelined: the slower of the GPU links and the network sets the pace. NCCL's tree
  (double binary tree across machines, a chain inside each) moves 2 x bytes per GPU at 90% of that bandwidth with
  log2(machines) network steps; it is taken where faster (small buckets, many machines).

DDP overlap: gradients are all-reduced in buckets of `bucket_bytes` in reverse layer order; a bucket is ready once
backward has produced its gradients (at an even rate over backward), runs after the previous bucket on one
communication stream, and overlaps the backward still to come. The last bucket is ready only when backward ends, so
its all-reduce is always exposed. DDP puts 1 MiB in its first bucket and leaves the remainder in its last; here the
remainder is the first bucket and every later one is full: the last bucket is then never smaller than DDP's (the worse
case), and a bigger gradient never gives a shorter step.

Other algorithms, as a job may ask (`allreduce`): "hierarchical" reduce-scatters within each machine over its GPU
links, all-reduces each GPU's shard across machines (a machine's NICs carry 2(n-1)/n x bytes), then all-gathers
within the machine, one phase after another; "torus_2d" (Mikami et al. 2018, arXiv:1811.05233) lays the GPUs out as
an X x Y grid, reduce-scatters along X, all-reduces each shard along Y and all-gathers along X. X is a whole number of
machines' GPUs (the machine's by default: then it is "hierarchical" with the same links); when X spans machines its
rings cross each machine's network once, and the Y rings of a machine's GPUs share its NICs. Both cost fewer latency
steps than one ring over every GPU, and the slowest link of each phase sets its pace.

Not modelled here: NCCL's LL/LL128 protocols (they matter below ~1 MB, DDP buckets are larger) and NVLink SHARP
(NVLS). DDP's other losses (bucket copies, communication slowing the compute it overlaps, stragglers) are
prediction/ddp_losses.py's.
"""

import math
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from shared.interconnect import Links, links_for
from shared.measurements.allreduce import Measured

__all__ = [
    "Links",
    "LinkFigures",
    "ParallelStep",
    "allreduce_ms",
    "buckets",
    "bus_bandwidth",
    "data_parallel_step",
    "links_for",
    "with_measured",
]


# PyTorch DDP's default bucket_cap_mb=25 (MiB).
BUCKET_BYTES = 25 * 2**20
# NCCL src/graph/topo.h NET_BW: 12 GB/s modelled for a 100 Gbit NIC, i.e. 96% of the nominal 12.5 GB/s. The GPU-link
# figures in data/interconnect.csv are already NCCL's per-link figures (20 GB/s per 25 GB/s NVLink, 12 GB/s per
# PCIe 3.0 x16), so no fraction is applied to them here.
NETWORK_EFFICIENCY = 12.0 / 12.5
# NCCL over TCP sockets (no RDMA): 4-6 GB/s bus bandwidth for large all-reduces over 100 Gbit/s Ethernet between four
# 8-V100 machines, the best of a tuning search (github.com/NVIDIA/nccl/issues/450): 5 of 12.5 GB/s.
TCP_EFFICIENCY = 5.0 / 12.5
# NVIDIA/nccl src/graph/tuning.cc @01afd20a (tree, ring and CollNet only: before NVLS, the era of the validation
# data), Simple protocol, in microseconds: a base latency per call and a hardware latency per ring step or tree hop.
RING_BASE_US = 8.4
TREE_BASE_US = 0.0
RING_STEP_US = {"nvlink": 3.4, "pcie": 5.7, "network": 9.6}
TREE_STEP_US = {"nvlink": 28.0, "pcie": 28.0, "network": 50.0}
# tuning.cc: a ring across machines has its latency multiplied by 1.9 for large messages ("plateau effect of ring").
RING_MULTI_NODE_LATENCY = 1.9
# tuning.cc: tree bus bandwidth is 90% of the links' and at most 110 GB/s (2 machines) or 80 GB/s (more), Simple.
TREE_BANDWIDTH_FRACTION = 0.9
TREE_MAX_BUS_GBS_TWO_NODES = 110.0
TREE_MAX_BUS_GBS = 80.0


class LinkFigures(Protocol):
    """What the model reads of a machine type's links (shared.interconnect.Links)."""

    @property
    def intra_link(self) -> str: ...
    @property
    def intra_gbs(self) -> float | None: ...
    @property
    def network_gbps(self) -> float | None: ...
    @property
    def rdma(self) -> bool | None: ...


def network_gbs(links: LinkFigures) -> float:
    """GB/s an all-reduce gets from a machine's network: NCCL's NIC figure over RDMA, less over TCP sockets."""
    assert links.network_gbps
    return links.network_gbps / 8 * (TCP_EFFICIENCY if links.rdma is False else NETWORK_EFFICIENCY)


@dataclass(frozen=True)
class ParallelStep:
    """One data-parallel step: its time, the all-reduce's, and the part of it backward does not hide."""

    step_ms: float  # compute_ms + exposed_ms
    compute_ms: float  # the one-GPU step at the same per-GPU batch
    allreduce_ms: float  # all buckets' all-reduce time, end to end on the communication stream
    exposed_ms: float  # what runs after backward ends: the step's extra time
    scaling_efficiency: float  # compute_ms / step_ms: per-GPU throughput relative to one GPU, in (0, 1]
    algorithm: str  # none, ring or tree (the largest bucket's)
    bottleneck: str  # none, intra (the GPUs' links) or network
    bus_gbs: float  # per-GPU bus bandwidth used, GB/s (0 when nothing is exchanged)
    buckets: int


def _layout_gbs(gpus_per_node: int, nodes: int, links: LinkFigures) -> tuple[float, float]:
    """GB/s of the GPU links and of a machine's network that the layout uses (inf where it uses none)."""
    intra = math.inf
    if gpus_per_node > 1:
        if not links.intra_gbs:
            raise ValueError(f"{gpus_per_node} GPUs per machine but no GPU-link bandwidth ({links.intra_link})")
        intra = links.intra_gbs
    network = math.inf
    if nodes > 1:
        if not links.network_gbps:
            raise ValueError(f"{nodes} machines but no published network bandwidth")
        network = network_gbs(links)
    return intra, network


def bus_bandwidth(*, gpus_per_node: int, nodes: int, links: LinkFigures) -> tuple[float, str]:
    """The per-GPU bus bandwidth (GB/s) an all-reduce over this layout gets, and which link limits it."""
    # A machine's NICs carry as much ring traffic as each GPU's link does, so their whole bandwidth counts.
    intra, network = _layout_gbs(gpus_per_node, nodes, links)
    return (intra, "intra") if intra <= network else (network, "network")


ALGORITHMS = ("nccl", "hierarchical", "torus_2d")


def torus_x(gpus_per_node: int, nodes: int, wanted: int | None) -> int:
    """The grid's X for a layout: the wanted one where it is whole machines' GPUs dividing the layout, else the
    machine's GPUs."""
    ranks = gpus_per_node * nodes
    if wanted and wanted % gpus_per_node == 0 and ranks % wanted == 0:
        return wanted
    return gpus_per_node


def allreduce_ms(
    nbytes: float, *, gpus_per_node: int, nodes: int, links: LinkFigures, algorithm: str = "nccl",
    grid_x: int | None = None,
) -> tuple[float, str]:  # fmt: skip
    """Time (ms) of one all-reduce of `nbytes` and the algorithm run: NCCL's pick (ring or tree), or the
    hierarchical or 2D-torus one asked (grid_x: the torus's X, whole machines' GPUs)."""
    ranks = gpus_per_node * nodes
    if ranks == 1 or nbytes <= 0:
        return 0.0, "none"
    if algorithm in ("hierarchical", "torus_2d"):
        x = torus_x(gpus_per_node, nodes, grid_x if algorithm == "torus_2d" else None)
        label = "hierarchical" if algorithm == "hierarchical" else f"torus_2d {x}x{ranks // x}"
        return _two_level(nbytes, x, gpus_per_node, nodes, links), label
    bus, _ = bus_bandwidth(gpus_per_node=gpus_per_node, nodes=nodes, links=links)
    intra_kind = "nvlink" if links.intra_link in ("nvlink", "nvswitch") else "pcie"
    intra_steps = 2 * (ranks - 1) - 2 * (nodes - 1)
    ring_us = RING_BASE_US + intra_steps * RING_STEP_US[intra_kind] + 2 * (nodes - 1) * RING_STEP_US["network"]
    if nodes > 1:
        ring_us *= RING_MULTI_NODE_LATENCY
    # GB/s = 1e6 bytes per ms.
    ring = 2 * (ranks - 1) / ranks * nbytes / (bus * 1e6) + ring_us / 1000
    if nodes == 1:
        return ring, "ring"
    tree_bus = min(bus * TREE_BANDWIDTH_FRACTION, TREE_MAX_BUS_GBS_TWO_NODES if nodes == 2 else TREE_MAX_BUS_GBS)
    tree_us = TREE_BASE_US + 2 * (
        (gpus_per_node - 1) * TREE_STEP_US[intra_kind] + math.floor(math.log2(nodes)) * TREE_STEP_US["network"]
    )
    tree = 2 * nbytes / (tree_bus * 1e6) + tree_us / 1000
    return (tree, "tree") if tree < ring else (ring, "ring")


def _two_level(nbytes: float, x: int, gpus_per_node: int, nodes: int, links: LinkFigures) -> float:
    """Reduce-scatter along X, all-reduce of each 1/X shard along Y, all-gather along X (ms)."""
    y = gpus_per_node * nodes // x
    intra, network = _layout_gbs(gpus_per_node, nodes, links)
    intra_kind = "nvlink" if links.intra_link in ("nvlink", "nvswitch") else "pcie"
    # X within a machine runs on its GPU links; X across machines crosses each machine's network once per ring.
    x_bus, x_step = (
        (intra, RING_STEP_US[intra_kind]) if x <= gpus_per_node else (min(intra, network), RING_STEP_US["network"])
    )
    # Y rings join one GPU of each X group: across machines, a machine's GPUs' rings share its NICs.
    y_bus = network / gpus_per_node if nodes > 1 else intra
    y_step = RING_STEP_US["network"] if nodes > 1 else RING_STEP_US[intra_kind]
    ms = 0.0
    if x > 1:
        ms += 2 * (x - 1) / x * nbytes / (x_bus * 1e6) + (RING_BASE_US + 2 * (x - 1) * x_step) / 1000
    if y > 1:
        ms += 2 * (y - 1) / y * (nbytes / x) / (y_bus * 1e6) + (RING_BASE_US + 2 * (y - 1) * y_step) / 1000
    return ms


def buckets(gradient_bytes: float, bucket_bytes: float = BUCKET_BYTES) -> list[float]:
    """Gradient buckets in the order they become ready: the remainder, then full buckets of bucket_bytes."""
    if gradient_bytes <= 0:
        return []
    full = math.floor(gradient_bytes / bucket_bytes)
    remainder = gradient_bytes - full * bucket_bytes
    return ([remainder] if remainder > 0 else []) + [float(bucket_bytes)] * full


def data_parallel_step(
    *,
    compute_ms: float,
    backward_fraction: float,
    gradient_bytes: float,
    gpus_per_node: int,
    nodes: int,
    links: LinkFigures,
    bucket_bytes: float = BUCKET_BYTES,
) -> ParallelStep:
    """One DDP step on gpus_per_node x nodes GPUs at the per-GPU batch whose one-GPU step takes compute_ms."""
    if compute_ms <= 0 or not 0 < backward_fraction <= 1 or gradient_bytes < 0 or bucket_bytes <= 0:
        raise ValueError("compute_ms and bucket_bytes must be > 0, backward_fraction in (0, 1], gradient_bytes >= 0")
    if gpus_per_node < 1 or nodes < 1:
        raise ValueError("gpus_per_node and nodes must be >= 1")
    sizes = buckets(gradient_bytes, bucket_bytes) if gpus_per_node * nodes > 1 else []
    if not sizes:
        return ParallelStep(compute_ms, compute_ms, 0.0, 0.0, 1.0, "none", "none", 0.0, 0)
    bus, bottleneck = bus_bandwidth(gpus_per_node=gpus_per_node, nodes=nodes, links=links)
    busy, late = exposed_many(
        np.array([compute_ms]), backward_fraction=backward_fraction, gradient_bytes=gradient_bytes,
        gpus_per_node=gpus_per_node, nodes=nodes, links=links, bucket_bytes=bucket_bytes,
    )  # fmt: skip
    algorithm = algorithm_run(gradient_bytes, gpus_per_node=gpus_per_node, nodes=nodes, links=links,
                              bucket_bytes=bucket_bytes)  # fmt: skip
    exposed = float(late[0])
    step = compute_ms + exposed
    return ParallelStep(step, compute_ms, busy, exposed, compute_ms / step, algorithm, bottleneck, bus, len(sizes))


def algorithm_run(
    gradient_bytes: float, *, gpus_per_node: int, nodes: int, links: LinkFigures, bucket_bytes: float = BUCKET_BYTES,
    algorithm: str = "nccl", grid_x: int | None = None,
) -> str:  # fmt: skip
    """What the all-reduce of the gradient's largest bucket runs ('none' on one GPU): the step's algorithm."""
    sizes = buckets(gradient_bytes, bucket_bytes) if gpus_per_node * nodes > 1 else []
    if not sizes:
        return "none"
    return allreduce_ms(max(sizes), gpus_per_node=gpus_per_node, nodes=nodes, links=links, algorithm=algorithm,
                        grid_x=grid_x)[1]  # fmt: skip


def exposed_many(
    compute_ms: np.ndarray,
    *,
    backward_fraction: float,
    gradient_bytes: float,
    gpus_per_node: int,
    nodes: int,
    links: LinkFigures,
    bucket_bytes: float = BUCKET_BYTES,
    algorithm: str = "nccl",
    grid_x: int | None = None,
) -> tuple[float, np.ndarray]:
    """The all-reduce of many one-GPU steps of one CNN and layout at once: (allreduce_ms, exposed_ms per step).

    The buckets' all-reduce times do not depend on the step, so they are worked out once (a large job has tens of
    thousands of points)."""
    sizes = buckets(gradient_bytes, bucket_bytes) if gpus_per_node * nodes > 1 else []
    if not sizes:
        return 0.0, np.zeros_like(compute_ms, dtype=float)
    costs = [
        allreduce_ms(size, gpus_per_node=gpus_per_node, nodes=nodes, links=links, algorithm=algorithm, grid_x=grid_x)[0]
        for size in sizes
    ]
    backward = np.asarray(compute_ms, dtype=float) * backward_fraction
    done = np.zeros_like(backward)
    produced = 0.0
    for size, cost in zip(sizes, costs, strict=True):
        produced += size
        # One communication stream: a bucket starts once it is ready and the one before it is done.
        done = np.maximum(backward * produced / gradient_bytes, done) + cost
    return float(sum(costs)), np.maximum(0.0, done - backward)


def with_measured(links: Links, measured: Measured | None) -> Links:
    """The links with the bus bandwidth an agent measured within the machine in place of the catalog's."""
    if measured is None:
        return links
    source = (
        f"measured: all-reduce of {measured.bytes / 2**20:.0f} MiB over {measured.gpus} GPUs in {measured.ms:.3g} ms "
        f"(environment {measured.environment_id}), {measured.bus_gbs:.1f} GB/s bus bandwidth"
    )
    return replace(links, intra_gbs=measured.bus_gbs, source=source)

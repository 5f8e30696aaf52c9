"""What a data-parallel (PyTorch DDP) step loses besides the exposed all-reduce: named terms, each with its source.

Pure functions: no database, no torch. prediction/parallel.py gives the all-reduce and the part of it backward does
not hide (the tail); the terms here are added to the one-GPU step beside it:

- bucket copies: DDP (gradient_as_bucket_view off, its default) copies each gradient into its bucket as backward
  produces it, divides the bucket by the world size before the all-reduce (the default comm hook) and copies the
  reduced bucket back into the gradients: about 6 passes of the gradient's bytes through the GPU's memory, on the
  compute stream;
- communication contention: NCCL's kernels hold SMs and memory bandwidth while they overlap backward, so backward
  runs slower for as long as they run; the share taken is the larger of NCCL's CTAs over the GPU's SMs and the ring's
  memory traffic over the GPU's memory bandwidth;
- stragglers: every bucket waits for the slowest replica, so a step is the slowest of N draws of a one-GPU step;
  with step times spread with coefficient of variation cv, the expected maximum of N is the mean plus cv x the
  expected maximum of N standard normals (Gumbel's order statistics: 0.56 for 2, 1.42 for 8, 2.34 for 64).

AMP's GradScaler checks the gradients for inf/NaN and synchronises the host once a step (`found_inf.item()`): a one-
GPU step under autocast does the same, so the one-GPU step it starts from already holds it. The host's cores that N
replicas share for decoding are prediction/input_pipeline.py's (the input rate, not a loss here; bench/ddp_losses.py
sets it beside the real-data clusters' one-machine rows).
"""

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

__all__ = [
    "Losses",
    "STRAGGLER_CV",
    "bucket_copies_ms",
    "contention_ms",
    "contention_share",
    "expected_max",
    "losses",
    "losses_many",
    "straggler_fraction",
    "stragglers_ms",
]

# PyTorch torch/csrc/distributed/c10d/reducer.cpp: copy into the bucket (read + write), the default hook's div_ by
# the world size (read + write), copy back after the all-reduce (read + write).
COPY_PASSES = 6
# NCCL's ring all-reduce reads the local and received chunk and writes the result for every chunk it moves: about
# three memory accesses per byte on the bus.
RING_MEMORY_PASSES = 3
# CTAs (one per channel) an all-reduce holds. ASSUMED, not published per machine: NCCL's topology search opens more
# rings where the GPUs have more NVLinks (its MAXCHANNELS is 32); over PCIe or a network it settles on a few.
NCCL_CHANNELS = {"nvlink": 16, "nvswitch": 16, "pcie": 4}
# Step-time coefficient of variation by how images reach the GPU. memory: Lambda's synthetic-data runs lose the same
# at 2 as at 8 GPUs (docs/PERFORMANCE.md, "Data-parallel scaling, synthetic data"), so nothing there grows like a
# maximum of N draws: 0. Decoded JPEGs: fitted on Pollux's and Sia's real-data runs (bench/scaling.py; each cluster's
# own score comes from a fit without it), loader workers making some steps wait for their batch.
STRAGGLER_CV = {"memory": 0.0, "decoded": 0.07}


@lru_cache(maxsize=256)
def expected_max(n: int) -> float:
    """E[max of n independent standard normals] (0 for one), by quadrature of n x phi(x) x Phi(x)^(n-1) x x."""
    if n <= 1:
        return 0.0
    step = 0.01
    total = 0.0
    for i in range(-1000, 1001):
        x = i * step
        pdf = math.exp(-x * x / 2) / math.sqrt(2 * math.pi)
        cdf = 0.5 * (1 + math.erf(x / math.sqrt(2)))
        total += x * n * pdf * cdf ** (n - 1) * step
    return total


def bucket_copies_ms(gradient_bytes: float, mem_bandwidth_gbs: float | None) -> float:
    """DDP's copies of the gradient into and out of its buckets and the division by the world size (ms)."""
    if not mem_bandwidth_gbs or gradient_bytes <= 0:
        return 0.0
    return COPY_PASSES * gradient_bytes / (mem_bandwidth_gbs * 1e6)


def contention_share(
    *, bus_gbs: float, intra_link: str, sm_count: int | None, mem_bandwidth_gbs: float | None
) -> float:
    """The share of the GPU NCCL's kernels hold while they run: the larger of its CTAs over the SMs and the ring's
    memory traffic over the memory bandwidth."""
    sm_share = NCCL_CHANNELS.get(intra_link, 4) / sm_count if sm_count else 0.0
    memory_share = RING_MEMORY_PASSES * bus_gbs / mem_bandwidth_gbs if mem_bandwidth_gbs else 0.0
    return min(1.0, max(sm_share, memory_share))


def contention_ms(
    *, overlapped_ms: float, bus_gbs: float, intra_link: str, sm_count: int | None, mem_bandwidth_gbs: float | None
) -> float:
    """Backward's slowdown while NCCL's kernels run beside it: the overlapped time x the GPU's share they hold (ms)."""
    share = contention_share(bus_gbs=bus_gbs, intra_link=intra_link, sm_count=sm_count,
                             mem_bandwidth_gbs=mem_bandwidth_gbs)  # fmt: skip
    return max(0.0, overlapped_ms) * share


def straggler_fraction(replicas: int, cv: float) -> float:
    """The wait for the slowest of `replicas` steps spread with coefficient of variation cv, per ms of step."""
    return cv * expected_max(replicas)


def stragglers_ms(compute_ms: float, replicas: int, cv: float) -> float:
    """The wait for the slowest of `replicas` steps spread with coefficient of variation cv (ms)."""
    return compute_ms * straggler_fraction(replicas, cv)


@dataclass(frozen=True)
class Losses:
    """The terms a DDP step adds to the one-GPU step besides the exposed all-reduce (ms)."""

    bucket_copies_ms: float
    contention_ms: float
    stragglers_ms: float

    @property
    def total_ms(self) -> float:
        """All of them."""
        return self.bucket_copies_ms + self.contention_ms + self.stragglers_ms


def losses(
    *, compute_ms: float, allreduce_ms: float, exposed_ms: float, replicas: int, gradient_bytes: float, bus_gbs: float,
    intra_link: str, sm_count: int | None, mem_bandwidth_gbs: float | None, cv: float,
) -> Losses:  # fmt: skip
    """Each term for one step on `replicas` GPUs (none on one GPU)."""
    copies, contention, stragglers = losses_many(
        np.array([compute_ms]), np.array([exposed_ms]), allreduce_ms=allreduce_ms, replicas=replicas,
        gradient_bytes=gradient_bytes, bus_gbs=bus_gbs, intra_link=intra_link, sm_count=sm_count,
        mem_bandwidth_gbs=mem_bandwidth_gbs, cv=cv,
    )  # fmt: skip
    return Losses(copies, float(contention[0]), float(stragglers[0]))


def losses_many(
    compute_ms: np.ndarray, exposed_ms: np.ndarray, *, allreduce_ms: float, replicas: int, gradient_bytes: float,
    bus_gbs: float, intra_link: str, sm_count: int | None, mem_bandwidth_gbs: float | None, cv: float,
) -> tuple[float, np.ndarray, np.ndarray]:  # fmt: skip
    """The terms for many steps of one CNN and layout at once: (bucket copies, contention per step, stragglers per
    step), ms; none on one GPU."""
    compute = np.asarray(compute_ms, dtype=float)
    if replicas <= 1:
        return 0.0, np.zeros_like(compute), np.zeros_like(compute)
    overlapped = np.maximum(0.0, allreduce_ms - np.asarray(exposed_ms, dtype=float))
    share = contention_share(bus_gbs=bus_gbs, intra_link=intra_link, sm_count=sm_count,
                             mem_bandwidth_gbs=mem_bandwidth_gbs)  # fmt: skip
    copies = bucket_copies_ms(gradient_bytes, mem_bandwidth_gbs)
    return copies, overlapped * share, compute * straggler_fraction(replicas, cv)

"""All-reduce across a host's GPUs, as DDP runs it: one process per GPU, NCCL, buckets of DDP's sizes.

Each size is warmed up, then timed `rounds` times between a barrier and a device synchronise on every rank; rank 0's
median is stored. On a host without two GPUs there is nothing DDP would do; gloo over CPU processes runs the same
code path (the tests use it) and is stored under its own backend, which the worker never reads.
"""

import multiprocessing as mp
import os
import socket
import statistics
import time
from typing import Any

import torch
import torch.distributed as dist

# DDP's first bucket (1 MiB), its default bucket (25 MiB), and a large one: the bus bandwidth a big bucket sees.
SIZES = (1 * 2**20, 25 * 2**20, 100 * 2**20)
ROUNDS = 10
WARMUP = 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rank(rank: int, world: int, port: int, backend: str, sizes: tuple[int, ...], rounds: int, out: Any) -> None:
    torch.set_num_threads(1)
    cuda = backend == "nccl"
    if cuda:
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    try:
        for size in sizes:
            x = torch.ones(size // 4, dtype=torch.float32, device=device)
            for _ in range(WARMUP):
                dist.all_reduce(x)
            sync()
            times = []
            for _ in range(rounds):
                dist.barrier()
                sync()
                start = time.perf_counter()
                dist.all_reduce(x)
                sync()
                times.append((time.perf_counter() - start) * 1000)
            if rank == 0:
                out.put((size, statistics.median(times), times))
    finally:
        dist.destroy_process_group()


def measure(
    *, world: int, backend: str, sizes: tuple[int, ...] = SIZES, rounds: int = ROUNDS
) -> list[tuple[int, float, list[float]]]:
    """(bytes, median ms, every round's ms) of an all-reduce over `world` processes, one per GPU with nccl."""
    # spawn: a forked child cannot use CUDA once the parent has (the agent has).
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_rank, args=(r, world, port, backend, sizes, rounds, out)) for r in range(world)]
    for p in procs:
        p.start()
    try:
        results = [out.get(timeout=300) for _ in sizes]
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    failed = [p.exitcode for p in procs if p.exitcode]
    if failed:
        raise RuntimeError(f"all-reduce ranks exited with {failed}")
    return sorted(results)


def local_gpus() -> int:
    """CUDA devices this agent may use (0 on a CPU host)."""
    # Here, not at the top: every spawned rank imports this module, and environment brings in torchvision.
    from gpu_agent import environment

    return torch.cuda.device_count() if environment.device().type == "cuda" else 0


def gpu_counts(available: int) -> list[int]:
    """The GPU counts a host with `available` GPUs measures: 2, 4, 8, … up to all of them."""
    counts, n = [], 2
    while n <= available:
        counts.append(n)
        n *= 2
    if available >= 2 and available not in counts:
        counts.append(available)
    return counts


def environment_note() -> dict[str, Any]:
    """What the timings depend on beyond the stored environment: NCCL's version and its settings."""
    nccl = ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None
    return {"nccl": nccl, **{k: v for k, v in os.environ.items() if k.startswith("NCCL_")}}

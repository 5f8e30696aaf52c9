"""`local` described by its agent's device: a GPU by data/gpus.csv's figures for its CUDA name, or what CUDA reports.

The agent of `local` sends a `LocalDevice` with its registration (agents.device_description); the database applies
it to `local`'s catalog row and to no other (migrations/0026_local_device.sql), so the agent's role never writes the
catalog itself.
"""

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from shared import machine_types

GIB = 2**30


class LocalDevice(BaseModel):
    """What `local` is, as its agent saw it; the gpu_ fields are machine_types columns of one GPU. gpu None: a CPU."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    device: str = Field(min_length=1, max_length=300)  # e.g. "cuda:0 'NVIDIA H100 80GB HBM3'", "cpu 'AMD EPYC 7B13'"
    gpu: str | None = Field(default=None, min_length=1, max_length=120)  # data/gpus.csv's name, else CUDA's
    gpu_memory_gib: float | None = Field(default=None, gt=0)
    gpu_sm_count: int | None = Field(default=None, ge=1)
    gpu_compute_capability: str | None = Field(default=None, pattern=r"^\d{1,2}\.\d{1,2}$")
    gpu_fp32_tflops: float | None = Field(default=None, gt=0)
    gpu_tf32_tflops: float | None = Field(default=None, gt=0)
    gpu_fp16_tflops: float | None = Field(default=None, gt=0)
    gpu_fp16_acc16_tflops: float | None = Field(default=None, gt=0)
    gpu_mem_bandwidth_gbs: float | None = Field(default=None, gt=0)
    gpu_l2_mib: float | None = Field(default=None, gt=0)
    gpu_tdp_watts: float | None = Field(default=None, gt=0)
    gpu_bf16: bool | None = None
    specs_source: str | None = Field(default=None, max_length=2000)


def cpu(*, model: str) -> LocalDevice:
    """`local` as a CPU (no GPU figures)."""
    return LocalDevice(device=f"cpu {model!r}"[:300])


def gpu(*, device: str, cuda_name: str, memory_bytes: int, sm_count: int, compute_capability: str) -> LocalDevice:
    """`local` as the GPU CUDA reports: memory, SMs and compute capability as reported, the rest from data/gpus.csv.

    A GPU data/gpus.csv does not know (by name or alias), or a MIG slice, keeps only what CUDA reports: its other
    figures stay empty rather than guessed.
    """
    reported: dict[str, Any] = {
        "device": f"{device} {cuda_name!r}"[:300],
        "gpu_memory_gib": round(memory_bytes / GIB, 2),
        "gpu_sm_count": sm_count,
        "gpu_compute_capability": compute_capability,
    }
    facts = f"CUDA reports {cuda_name!r}: {memory_bytes / GIB:.1f} GiB, {sm_count} SMs, compute capability "
    facts += compute_capability
    row = gpu_row(cuda_name)
    if row is None:
        return LocalDevice.model_validate(
            reported | {"gpu": cuda_name[:120], "specs_source": f"{facts}; not in data/gpus.csv"}
        )
    figures = {
        column: machine_types.number(row.get(key, ""))
        for key, column in machine_types.GPU_COLUMNS.items()
        if column not in reported
    }
    source = f"{facts}; other figures data/gpus.csv ({row['gpu']}): {row.get('source', '')}"
    bf16 = row["bf16"].lower() == "true" if row.get("bf16") else None
    return LocalDevice.model_validate(
        reported | figures | {"gpu": row["gpu"], "gpu_bf16": bf16, "specs_source": source[:2000]}
    )


def gpu_row(cuda_name: str) -> dict[str, str] | None:
    """data/gpus.csv's row of the GPU CUDA names so (its name or an alias; case, spaces and underscores aside)."""
    wanted = _key(cuda_name)
    for row in machine_types.gpu_rows():
        if wanted in {_key(n) for n in [row["gpu"], *row.get("aliases", "").split(";")] if n.strip()}:
            return row
    return None


def _key(name: str) -> str:
    return name.strip().replace("_", " ").lower()

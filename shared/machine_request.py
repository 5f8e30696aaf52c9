"""The request that registers a machine type by its GPU's figures (POST /v1/machines), validated once at the API."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from shared import gpu_catalog
from shared.jobs.request import MACHINE_NAME, few_fields

# The GPU figures a machine type cannot be predicted without (given, or a known GPU's).
REQUIRED_FIGURES = (
    "gpu_memory_gib", "gpu_fp32_tflops", "gpu_fp16_tflops", "gpu_mem_bandwidth_gbs", "gpu_sm_count", "gpu_l2_mib",
    "gpu_tdp_watts",
)  # fmt: skip


class MachineCreate(BaseModel):
    """A machine type registered by its GPU's figures (POST /v1/machines)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    _bounded = model_validator(mode="before")(few_fields)

    name: str = Field(pattern=MACHINE_NAME)
    gpu: str = Field(
        min_length=1, max_length=64, pattern=r"^[^\x00-\x1f\x7f]+$",
        description="the GPU model; one data/gpus.csv knows (by name or alias) fills the figures left out",
    )  # fmt: skip
    gpu_count: int = Field(ge=1, le=64)
    # Required unless `gpu` is a GPU data/gpus.csv knows: then each one left out is its figure there.
    gpu_memory_gib: float | None = Field(default=None, ge=0.25, le=4096, description="memory of one GPU")
    gpu_fp32_tflops: float | None = Field(default=None, ge=0.01, le=10_000)
    gpu_fp16_tflops: float | None = Field(
        default=None, ge=0.01, le=100_000, description="dense tensor-core FP16, FP32 accumulate"
    )
    gpu_mem_bandwidth_gbs: float | None = Field(default=None, ge=1, le=1_000_000)
    gpu_sm_count: int | None = Field(default=None, ge=1, le=10_000)
    gpu_l2_mib: float | None = Field(default=None, ge=0.01, le=100_000)
    gpu_tdp_watts: float | None = Field(default=None, ge=1, le=10_000)
    price_usd_per_hour: float = Field(ge=0, le=100_000)
    gpu_compute_capability: str | None = Field(default=None, pattern=r"^\d{1,2}\.\d{1,2}$")
    gpu_tf32_tflops: float | None = Field(default=None, ge=0.01, le=100_000)
    gpu_fp16_acc16_tflops: float | None = Field(
        default=None, ge=0.01, le=100_000,
        description="dense tensor-core FP16 with FP16 accumulate, where the datasheet gives it apart (GeForce: twice "
        "gpu_fp16_tflops)",
    )  # fmt: skip
    # None: true when gpu_compute_capability is 8.0 or more (Ampere and later have bf16), else false.
    gpu_bf16: bool | None = None
    vcpus: int | None = Field(default=None, ge=1, le=100_000)
    memory_gib: float | None = Field(default=None, gt=0, le=1_000_000)
    provider: str | None = Field(default=None, min_length=1, max_length=32, pattern=r"^[a-z0-9][a-z0-9_-]*$")
    gpu_link: Literal["nvswitch", "nvlink", "pcie", "none"] | None = Field(
        default=None, description="how the GPUs reach each other within the machine (default: pcie when several)"
    )
    gpu_link_gbs: float | None = Field(
        default=None, ge=0.1, le=100_000,
        description="GB/s an all-reduce within the machine gets per GPU, each way (NCCL's bus bandwidth; "
        "default for pcie: 24, PCIe 4.0 x16); needed for nvlink and nvswitch",
    )  # fmt: skip
    nics: int | None = Field(default=None, ge=1, le=64, description="network interfaces to other machines")
    nic_gbps: float | None = Field(default=None, ge=0.1, le=10_000, description="Gbit/s of each interface")
    network_rdma: bool | None = Field(
        default=None, description="true: RDMA (InfiniBand, RoCE, EFA); false: TCP sockets; needed with nics"
    )

    # Where the figures came from (machine_types.specs_source): the user, or data/gpus.csv for those left out.
    _specs_source: str = PrivateAttr(default="given by the user")

    @model_validator(mode="after")
    def _known_gpu(self) -> "MachineCreate":
        missing = [f for f in REQUIRED_FIGURES if getattr(self, f) is None]
        if not missing:
            return self
        known = gpu_catalog.find(self.gpu)
        if known is None:
            near = gpu_catalog.nearest(self.gpu)
            hint = f" (did you mean {', '.join(map(repr, near))}?)" if near else ""
            raise ValueError(
                f"gpu {self.gpu!r} is not one Traincast knows by its figures{hint}: give {', '.join(missing)}, or "
                "name a GPU of data/gpus.csv to take its figures"
            )
        filled = []
        for field, column in gpu_catalog.FIGURES.items():
            if getattr(self, field) is None and known[column]:
                value = float(known[column])
                setattr(self, field, int(value) if field == "gpu_sm_count" else value)
                filled.append(field)
        if self.gpu_compute_capability is None and known["compute_capability"]:
            self.gpu_compute_capability = known["compute_capability"]
        if self.gpu_bf16 is None and known["bf16"]:
            self.gpu_bf16 = known["bf16"].lower() == "true"
        self.gpu = known["gpu"]
        given = [f for f in gpu_catalog.FIGURES if f not in filled and getattr(self, f) is not None]
        taken = f"data/gpus.csv ({known['gpu']}: {known['source']})"
        self._specs_source = (f"{', '.join(given)} given by the user; the rest from {taken}" if given else taken)[:2000]
        return self

    def specs_source(self) -> str:
        """Where the GPU's figures came from."""
        return self._specs_source

    @model_validator(mode="after")
    def _links(self) -> "MachineCreate":
        if self.gpu_link in ("nvlink", "nvswitch") and self.gpu_link_gbs is None:
            raise ValueError(f"gpu_link {self.gpu_link} needs gpu_link_gbs, the GB/s each GPU gets (no default)")
        if self.gpu_link == "none" and self.gpu_count > 1:
            raise ValueError("gpu_link none is for one GPU; several GPUs reach each other over pcie at least")
        if self.gpu_link_gbs is not None and self.gpu_link in (None, "none") and self.gpu_count == 1:
            raise ValueError("gpu_link_gbs is for machines with several GPUs")
        given = [f for f in ("nics", "nic_gbps", "network_rdma") if getattr(self, f) is not None]
        if given and len(given) < 3:
            missing = [f for f in ("nics", "nic_gbps", "network_rdma") if f not in given]
            raise ValueError(f"a network to other machines needs nics, nic_gbps and network_rdma; missing {missing}")
        return self

    @model_validator(mode="after")
    def _reserved_provider(self) -> "MachineCreate":
        if self.provider in {"local", "aws", "gcp", "azure"}:
            raise ValueError(f"provider {self.provider!r} is the catalog's own; name your own (default 'own')")
        fp16, fp32 = self.gpu_fp16_tflops, self.gpu_fp32_tflops
        if fp16 is not None and fp32 is not None and fp16 < fp32 / 64:
            raise ValueError("gpu_fp16_tflops is below 1/64 of gpu_fp32_tflops: check the figures")
        if self.gpu_fp16_acc16_tflops is not None and fp16 is not None and self.gpu_fp16_acc16_tflops < fp16:
            raise ValueError("gpu_fp16_acc16_tflops (FP16 accumulate) is below gpu_fp16_tflops (FP32 accumulate)")
        if self.gpu_bf16 is None:
            self.gpu_bf16 = self.gpu_compute_capability is not None and float(self.gpu_compute_capability) >= 8.0
        return self

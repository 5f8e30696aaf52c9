"""What a measurement ran on, stored once and referenced by every row it produced."""

import ast
import importlib.util
import os
import platform
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import torch

from gpu_agent import __version__
from shared import local_machine
from shared.core.settings import get_settings
from shared.local_machine import LocalDevice
from shared.measurements import environments

# Part of the environment: rows timed by another method are not comparable and must not mix.
TIMING_METHOD = "interleaved-rounds/3"


@cache
def configure() -> None:
    """Fix what timings depend on for this process: torch's thread count, cuDNN's algorithm search."""
    settings = get_settings()
    wanted = settings.agent_threads or len(os.sched_getaffinity(0))
    # Set explicitly, not left to torch's guess, so every row can say what it ran with.
    torch.set_num_threads(wanted)
    # The layer and op benchmarks' setting, recorded in their environment. Off (PyTorch's default, cuDNN's heuristics)
    # unless asked: the search, once per shape and batch size, was 81% of a GPU calibration's time on an H200.
    torch.backends.cudnn.benchmark = settings.agent_cudnn_benchmark


@cache
def torchvision_version() -> str:
    """torchvision's __version__ (local part included, as stored environments have it), read from its version.py
    without importing the package: its import pulls torch._dynamo (~1.3 s of every agent's start)."""
    spec = importlib.util.find_spec("torchvision")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        source = Path(folder, "version.py")
        if source.is_file():
            for node in ast.parse(source.read_text()).body:
                if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["__version__"]:
                    return str(ast.literal_eval(node.value))
    import torchvision  # a layout without version.py: import it after all

    return str(torchvision.__version__)


def device() -> torch.device:
    """The device this agent measures on: the setting, else CUDA if present, else CPU."""
    configure()
    wanted = get_settings().agent_device
    if wanted:
        return torch.device(wanted)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def describe(dev: torch.device) -> dict[str, Any]:
    """Library versions, device and agent version: everything a timing depends on that we can name."""
    configure()
    details: dict[str, Any] = {
        "agent_version": __version__,
        "timing_method": TIMING_METHOD,
        "torch": torch.__version__,
        "torchvision": torchvision_version(),
        "python": platform.python_version(),
        "device_type": dev.type,
        "cpu": cpu_model(),
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
    }
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        details.update(
            gpu=props.name,
            gpu_memory_bytes=props.total_memory,
            cuda=torch.version.cuda,
            cudnn=torch.backends.cudnn.version(),
            cudnn_benchmark=torch.backends.cudnn.benchmark,
            driver=_nvidia_driver(),
        )
    return details


@dataclass(frozen=True)
class CudaDevice:
    """What CUDA reports of a device (torch.cuda.get_device_properties), as `local`'s description needs it."""

    name: str
    total_memory: int  # bytes
    multi_processor_count: int
    major: int
    minor: int


def cuda_properties(dev: torch.device) -> CudaDevice | None:
    """What CUDA reports of the device this agent measures on; None for a CPU."""
    if dev.type != "cuda":
        return None
    props = torch.cuda.get_device_properties(dev)
    return CudaDevice(props.name, props.total_memory, props.multi_processor_count, props.major, props.minor)


def local_device(dev: torch.device) -> LocalDevice:
    """`local` as this agent's device: its GPU by name (data/gpus.csv's figures) and CUDA's report, or its CPU."""
    props = cuda_properties(dev)
    if props is None:
        return local_machine.cpu(model=cpu_model())
    return local_machine.gpu(
        device=str(dev), cuda_name=props.name, memory_bytes=props.total_memory,
        sm_count=props.multi_processor_count, compute_capability=f"{props.major}.{props.minor}",
    )  # fmt: skip


@cache
def environment_id(dev_str: str) -> int:
    """Store this process's environment (once) and return its id."""
    details = describe(torch.device(dev_str))
    return environments.store(details=details)


def cpu_model() -> str:
    """The host CPU's model name as Linux gives it."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _nvidia_driver() -> str | None:
    path = "/proc/driver/nvidia/version"
    if os.path.exists(path):
        with open(path) as f:
            return f.readline().strip()
    return None

"""A stand-in CUDA device for tests on a machine without one: what CUDA would report of an H100 SXM.

`python -m tests.support.standin_gpu` runs a real agent process whose device description is this stand-in (it still
measures on the CPU: nothing here pretends to time a GPU). In-process tests patch `environment.cuda_properties` with
`report`.
"""

import runpy

import torch

from gpu_agent import environment

# As torch.cuda.get_device_properties reports an H100 SXM5 80GB (nvidia-smi: 81559 MiB).
STANDIN_H100 = environment.CudaDevice(
    name="NVIDIA H100 80GB HBM3", total_memory=81559 * 2**20, multi_processor_count=132, major=9, minor=0
)


def report(dev: torch.device) -> environment.CudaDevice:
    """The stand-in H100's properties, whatever the device (the agent itself measures on the CPU)."""
    return STANDIN_H100


if __name__ == "__main__":
    environment.cuda_properties = report
    runpy.run_module("gpu_agent", run_name="__main__")

"""The benchmark agent: measures conv layers and whole training steps on one machine type."""

import os

# Part of each measurement's environment (gpu_agent/environment.py): raised when what the agent times changes, so
# rows of two versions never mix (0.2.1: a 16-bit batch norm with fp32 parameters, as autocast trains it).
__version__ = "0.2.1"

# torch.profiler (peak memory on a CPU, gpu_agent/memory.py; kernel counts, layer_bench.py) otherwise prints kineto's
# "USDT: profiler_start/stop" lines and, on a machine without CUDA, "ERROR: gpuGetDeviceCount failed" for every
# measurement. Read when the profiler first starts; an operator's own KINETO_LOG_LEVEL wins.
os.environ.setdefault("KINETO_LOG_LEVEL", "6")

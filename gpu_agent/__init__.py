"""The benchmark agent: measures conv layers and whole training steps on one machine type."""

import os

__version__ = "0.2.0"

# torch.profiler (peak memory on a CPU, gpu_agent/memory.py; kernel counts, layer_bench.py) otherwise prints kineto's
# "USDT: profiler_start/stop" lines and, on a machine without CUDA, "ERROR: gpuGetDeviceCount failed" for every
# measurement. Read when the profiler first starts; an operator's own KINETO_LOG_LEVEL wins.
os.environ.setdefault("KINETO_LOG_LEVEL", "6")

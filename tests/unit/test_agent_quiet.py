"""The agent's log carries its own lines, not kineto's for every profiled measurement."""

import subprocess
import sys

PROFILE = """
import gpu_agent  # noqa: F401 - sets what the profiler reads
import torch
from torch.profiler import ProfilerActivity, profile

with profile(activities=[ProfilerActivity.CPU], profile_memory=True):
    torch.ones(8) * 2
print("profiled")
"""


def test_profiling_in_the_agent_prints_nothing_of_kineto() -> None:
    """A CPU profile, as the agent takes per measured step, leaves stderr empty (it printed USDT and ERROR lines)."""
    done = subprocess.run([sys.executable, "-c", PROFILE], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "profiled"
    assert "USDT" not in done.stderr and "ERROR" not in done.stderr, done.stderr

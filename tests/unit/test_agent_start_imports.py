"""An agent starts without torchvision (its import pulls torch._dynamo, ~1.3 s of every start) and still records
torchvision's version, local part included, exactly as torchvision itself says it."""

import subprocess
import sys

PROBE = """
import sys
import gpu_agent.app
from gpu_agent import environment
read = environment.torchvision_version()
print("torchvision" in sys.modules, "torch._dynamo" in sys.modules)
import torchvision
print(read == torchvision.__version__, read)
"""


def test_the_agent_imports_no_torchvision_and_reads_its_version_as_torchvision_does() -> None:
    """Importing the agent's app leaves torchvision and dynamo out; the version read from the file is the module's."""
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True)
    imported, same = done.stdout.splitlines()
    assert imported == "False False"
    assert same.startswith("True ") and len(same.split()[1]) >= 5, same

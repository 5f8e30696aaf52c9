"""The CLI's errors without a server: one line on stderr, exit 1."""

import os
import subprocess
import sys
from pathlib import Path

TRAINCAST = str(Path(sys.executable).parent / "traincast")


def test_cli_errors_are_one_line() -> None:
    """An unreachable API and a bad argument give one line on stderr and exit 1."""
    env = {**os.environ, "TRAINCAST_API_URL": "http://127.0.0.1:9"}
    down = subprocess.run([TRAINCAST, "jobs"], env=env, capture_output=True, text=True, timeout=60)
    assert down.returncode == 1 and down.stderr.count("\n") == 1 and "cannot reach the Traincast API" in down.stderr
    bad = subprocess.run(
        [TRAINCAST, "predict", "resnet18", "--batch-sizes", "a,b"], env=env, capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 1 and bad.stderr.startswith("error: --batch-sizes")

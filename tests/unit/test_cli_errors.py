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


def test_usage_mistakes_are_one_line_that_says_where_the_usage_is() -> None:
    """argparse's refusals (an unknown choice, a missing argument) are one line, exit 2; the CLI's own checks of a
    flag's text are one `error:` line, exit 1, like every other failure."""
    env = {**os.environ, "TRAINCAST_API_URL": "http://127.0.0.1:9"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([TRAINCAST, *args], env=env, capture_output=True, text=True, timeout=60)

    choice = run("predict", "resnet18", "--optimizer", "sgdd")
    assert choice.returncode == 2 and choice.stderr.count("\n") == 1, choice.stderr
    assert choice.stderr.startswith("error: argument --optimizer: invalid choice: 'sgdd'")
    assert choice.stderr.rstrip().endswith("(see `traincast predict --help`)")
    missing = run("predict")
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "required: cnns" in missing.stderr
    for flag, value in (("--gpus", "a"), ("--nodes", ","), ("--schedule", "5x256,x")):
        bad = run("predict", "resnet18", "--machine", "local", flag, value)
        assert bad.returncode == 1 and bad.stderr.count("\n") == 1, bad.stderr
        assert bad.stderr.startswith(f"error: {flag} "), bad.stderr

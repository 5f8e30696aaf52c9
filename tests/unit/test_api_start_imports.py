"""The API, the worker and the CLI start without the onnx package (~0.3 s of every start; only reading an ONNX
CNN needs it) and the API without torch; reading an ONNX upload still loads it."""

import subprocess
import sys

PROBE = """
import sys
import {module}
print("onnx" in sys.modules, "torch" in sys.modules)
"""

READS = """
import sys
from shared.cnn import registry
try:
    registry.checked_onnx(b"not an onnx file")
except Exception as exc:
    print(type(exc).__name__, "onnx" in sys.modules)
"""


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return done.stdout.strip()


def test_the_api_worker_and_cli_import_no_onnx_and_the_api_no_torch() -> None:
    """Importing each process's entry module leaves onnx out (and torch, for the API)."""
    assert _run(PROBE.format(module="api.main")) == "False False"
    assert _run(PROBE.format(module="worker.app")).startswith("False ")
    assert _run(PROBE.format(module="cli.main")).startswith("False ")


def test_an_onnx_upload_is_still_read_with_the_onnx_package() -> None:
    """checked_onnx loads the reader when it is called and refuses bytes that are not a model with a clear error."""
    assert _run(READS) == "ExtractionError True"

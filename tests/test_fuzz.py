"""Fuzzing the running API from its own OpenAPI document (schemathesis), with an admin key: no 5xx.

Bounded: a fixed number of generated requests per operation and a fixed seed, so the run takes
about a minute and a failure reproduces. Every operation is exercised, admin ones included (fleet,
machine types), against this run's own database; no worker runs, so submitted jobs only queue.
schemathesis runs as its command-line tool (its pytest plugin does not support this pytest).
"""

import os
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

from tests.conftest import Stack, http

EXAMPLES_PER_OPERATION = 20
SEED = 13


def test_no_request_gets_a_server_error(api_only: Stack, tmp_path: Path) -> None:
    """Whatever schemathesis sends to each operation, the API answers below 500."""
    cmd = [
        str(Path(sys.executable).parent / "schemathesis"),
        "run",
        f"{api_only.url}/openapi.json",
        "--checks",
        "not_a_server_error",
        "--header",
        f"Authorization: Bearer {os.environ['TRAINCAST_API_KEY']}",
        "--max-examples",
        str(EXAMPLES_PER_OPERATION),
        "--seed",
        str(SEED),
        "--phases",
        "examples,coverage,fuzzing",
        "--workers",
        "1",
        "--request-timeout",
        "60",
        "--report",
        "junit",
        "--report-dir",
        str(tmp_path),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env={**os.environ, "NO_COLOR": "1"})
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    # Every operation of the document was run, and none failed.
    spec = http.get(f"{api_only.url}/openapi.json").json()
    operations = {f"{m.upper()} {path}" for path, item in spec["paths"].items() for m in item}
    [report] = tmp_path.glob("junit-*.xml")
    suite = ElementTree.parse(report).getroot()
    ran = {case.get("name") for case in suite.iter("testcase")}
    assert ran == operations and suite.get("failures") == "0" and suite.get("errors") == "0"

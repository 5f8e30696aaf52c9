"""Fuzzing the running API from its own OpenAPI document (schemathesis), with an admin key: no 5xx.

Query and path parameters and JSON and multipart bodies (uploads) are generated from the document.
Bounded: a fixed number of generated requests per operation and a fixed seed, so the run takes
about a minute and a failure reproduces. Every operation is exercised, admin ones included (fleet,
machine types), against a database of its own (what it registers would otherwise reach the other
tests); no worker runs, so submitted jobs only queue.
schemathesis runs as its command-line tool (its pytest plugin does not support this pytest).
"""

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from xml.etree import ElementTree

import httpx
import pytest

from shared.core.migrate import migrate
from tests.support.services import fresh_database, server_urls
from tests.support.stack import Stack

EXAMPLES_PER_OPERATION = 20
SEED = 13


@pytest.fixture
def fuzzed(service_env: dict[str, str], tmp_path: Path) -> Iterator[tuple[Stack, str]]:
    """An API on a fresh, migrated database, and an admin key of that database."""
    with fresh_database(server_urls()[0]) as db_url:
        migrate(db_url)
        env = {**os.environ, "DATABASE_URL": db_url}
        made = subprocess.run([str(Path(sys.executable).parent / "traincast"), "keys", "create", "--name", "fuzz",
                               "--scope", "admin", "--rate", "10000"], env=env, capture_output=True, text=True,
                              check=True)  # fmt: skip
        stack = Stack({**service_env, "DATABASE_URL": db_url}, tmp_path)
        stack.start("api")
        try:
            stack.wait_ready()
            yield stack, made.stdout.strip().splitlines()[-1]
        finally:
            stack.stop("api")


def test_no_request_gets_a_server_error(fuzzed: tuple[Stack, str], tmp_path: Path) -> None:
    """Whatever schemathesis sends to each operation, the API answers below 500."""
    api_only, key = fuzzed
    cmd = [
        str(Path(sys.executable).parent / "schemathesis"),
        "run",
        f"{api_only.url}/openapi.json",
        "--checks",
        "not_a_server_error",
        "--header",
        f"Authorization: Bearer {key}",
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
    spec = httpx.get(f"{api_only.url}/openapi.json", timeout=30).json()
    # Uploads are fuzzed as the multipart forms they are (undeclared, schemathesis sent POST /v1/cnns no body at all).
    assert "multipart/form-data" in spec["paths"]["/v1/cnns"]["post"]["requestBody"]["content"]
    operations = {f"{m.upper()} {path}" for path, item in spec["paths"].items() for m in item}
    [report] = tmp_path.glob("junit-*.xml")
    suite = ElementTree.parse(report).getroot()
    ran = {case.get("name") for case in suite.iter("testcase")}
    assert ran == operations and suite.get("failures") == "0" and suite.get("errors") == "0"

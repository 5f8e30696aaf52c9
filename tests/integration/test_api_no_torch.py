"""The API process never imports torch, torchvision, worker or agent code, even after serving jobs and CNNs."""

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.stack import ROOT, Stack, http

FORBIDDEN = ("torch", "torchvision", "worker", "gpu_agent")
JOB: dict[str, Any] = {"cnns": ["resnet18"], "machines": ["local"], "batch_sizes": [8, 16], "image_size": 64}
# Serve what touches CNNs in a fresh interpreter, then list what it imported (one JSON line on stdout).
EXERCISE = """
import json, os, sys
import api.main
from fastapi.testclient import TestClient

statuses = {}
with TestClient(api.main.app, headers={"Authorization": "Bearer " + os.environ["TRAINCAST_API_KEY"]}) as client:
    statuses["list"] = client.get("/v1/cnns").status_code
    statuses["job"] = client.post("/v1/jobs", json=%(job)s).status_code
    statuses["too_small"] = client.post("/v1/jobs", json={**%(job)s, "cnns": ["inception_v3"]}).status_code
    statuses["described"] = client.get("/v1/cnns/resnet18", params={"image_size": 64}).status_code
print(json.dumps({"statuses": statuses, "modules": sorted(sys.modules)}))
"""


def forbidden(modules: list[str]) -> list[str]:
    """The modules of the packages the API must not import."""
    return [m for m in modules if m.split(".")[0] in FORBIDDEN]


def run_python(code: str) -> Any:
    """Run code in a fresh interpreter (this run's settings in its environment) and parse its last stdout line."""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result: Any = json.loads(done.stdout.strip().splitlines()[-1])  # a list or an object, as the code prints
    return result


def test_importing_the_app_imports_no_torch(service_env: dict[str, str]) -> None:
    """`import api.main` in a fresh interpreter loads none of torch, torchvision, worker, gpu_agent."""
    modules = run_python("import json, sys, api.main; print(json.dumps(sorted(sys.modules)))")
    assert "api.routers.jobs" in modules and "shared.cnn.registry" in modules  # the check sees what was imported
    assert forbidden(modules) == []


def test_serving_jobs_and_cnns_imports_no_torch(service_env: dict[str, str]) -> None:
    """After GET /v1/cnns, a job, a refused job and a described built-in CNN, still no torch in the process."""
    out = run_python(EXERCISE % {"job": repr(JOB)})
    assert out["statuses"] == {"list": 200, "job": 202, "too_small": 422, "described": 200}
    assert forbidden(out["modules"]) == []


def mapped_files(pid: int) -> set[str]:
    """The files a process has mapped (its shared libraries and extension modules)."""
    lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
    return {line.split()[-1] for line in lines if len(line.split()) >= 6}


def test_running_api_maps_no_torch(api_only: Stack) -> None:
    """A real uvicorn API process, after serving the same requests and a refused describe, has no torch mapped."""
    assert http.get(f"{api_only.url}/v1/cnns").status_code == 200
    assert http.post(f"{api_only.url}/v1/jobs", json=JOB).status_code == 202
    assert http.post(f"{api_only.url}/v1/jobs", json={**JOB, "cnns": ["inception_v3"]}).status_code == 422
    described = http.get(f"{api_only.url}/v1/cnns/resnet18", params={"image_size": 64})
    assert described.status_code == 200 and described.json()["conv_count"] == 20
    # A size the registry does not know maxvit_t cannot take: the child's tracing says so, as a 422 problem.
    refused = http.get(f"{api_only.url}/v1/cnns/maxvit_t", params={"image_size": 288})
    assert refused.status_code == 422 and "maxvit_t cannot run on 288x288" in refused.json()["detail"]
    files = mapped_files(api_only.procs["api"].pid)
    assert any("pydantic_core" in f for f in files)  # the check sees the process's extension modules
    assert [f for f in files if "/torch" in f or "libtorch" in f] == []

"""The GPU host as a machine type: an agent of `local` on a CUDA device (a stand-in here) makes `local` that GPU.

Registration goes through the real path (gpu_agent.lifecycle, the agent's own database login, the migration's
trigger) and a real agent process; only the CUDA device is a stand-in (tests/support/standin_gpu.py).
"""

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg2.errors
import pytest

from calibration import run as calibrate
from cli.admin import calibration_plan
from cli.main import build_parser
from gpu_agent import environment, lifecycle
from shared import agents, local_machine, machine_types
from shared.core.db import one, transaction
from shared.core.settings import get_settings
from tests.integration.test_reference_jobs import run
from tests.support import standin_gpu
from tests.support.agent_role import agent_url
from tests.support.stack import ROOT, Stack, http
from tests.support.wait import wait_until

GPU_COLUMNS = (
    "gpu", "gpu_count", "gpu_memory_gib", "gpu_fp32_tflops", "gpu_tf32_tflops", "gpu_fp16_tflops",
    "gpu_mem_bandwidth_gbs", "gpu_sm_count", "gpu_l2_mib", "gpu_compute_capability", "gpu_bf16", "gpu_tdp_watts",
    "source", "specs_source", "specs_read_at", "described_at",
)  # fmt: skip
LOCAL_ROW = "SELECT * FROM machine_types WHERE name = 'local'"
RESTORE = "UPDATE machine_types SET {} WHERE name = 'local'".format(", ".join(f"{c} = %({c})s" for c in GPU_COLUMNS))
# A login of the agent's role mapped to g4dn.xlarge only: it must not describe `local`.
OTHER_ONLY = "traincast_agent_g4dn_only"
H100 = "H100-SXM5-80GB"  # data/gpus.csv's name of the GPU CUDA calls "NVIDIA H100 80GB HBM3"


def local_row(owner: str) -> dict[str, Any]:
    """`local`'s catalog row, read as the owner (whoever this process's agent code connects as)."""
    with transaction(owner) as cur:
        cur.execute(LOCAL_ROW)
        return one(cur)


@pytest.fixture
def local_restored(service_env: dict[str, str]) -> Iterator[dict[str, Any]]:
    """`local` as it was before the test, put back afterwards (every other test expects it a CPU); yields it."""
    before = local_row(service_env["DATABASE_URL"])
    yield before
    with transaction(service_env["DATABASE_URL"]) as cur:
        cur.execute(RESTORE, before)
    get_settings.cache_clear()  # monkeypatch put DATABASE_URL back


def use(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """This process's code connects as url's login from now on."""
    monkeypatch.setenv("DATABASE_URL", url)
    get_settings.cache_clear()


def register(*, machine_type: str, device: str) -> lifecycle.Identity:
    """Register an agent in this process the way the agent process does at start, then stop it."""
    me = lifecycle.start(
        machine_type=machine_type, device=device, environment_id=environment.environment_id("cpu"), interval_s=60
    )
    lifecycle.stop()
    return me


def test_an_agent_of_local_on_a_gpu_makes_local_that_gpu(
    local_restored: dict[str, Any], service_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As its least-privilege login: the H100 stand-in describes local; other types' agents cannot; a CPU undoes it."""
    owner, agent = service_env["DATABASE_URL"], agent_url(service_env["DATABASE_URL"])
    assert local_restored["gpu"] is None and calibrate.default_settings("local") == calibrate.CPU_SETTINGS
    real_cuda = environment.cuda_properties
    monkeypatch.setattr(environment, "cuda_properties", standin_gpu.report)
    use(agent, monkeypatch)
    me = register(machine_type="local", device="cuda:0")

    use(owner, monkeypatch)
    row = local_row(owner)
    h100 = machine_types.get_by_name(name="a3-highgpu-1g")  # a cloud type with the same GPU, seeded from gpus.csv
    assert row["gpu"] == h100["gpu"] == H100 and row["gpu_count"] == 1
    assert float(row["gpu_memory_gib"]) == pytest.approx(standin_gpu.STANDIN_H100.total_memory / 2**30, abs=0.01)
    for column in ("gpu_fp32_tflops", "gpu_fp16_tflops", "gpu_tf32_tflops", "gpu_mem_bandwidth_gbs", "gpu_l2_mib"):
        assert float(row[column]) == h100[column], column
    assert (row["gpu_sm_count"], row["gpu_compute_capability"], row["gpu_bf16"]) == (132, "9.0", True)
    assert f"described by its agent {me.id}" in row["source"] and "NVIDIA H100 80GB HBM3" in row["source"]
    assert row["described_at"] is not None and "data/gpus.csv" in row["specs_source"]
    assert (row["name"], row["provider"], row["price_usd_per_hour"]) == ("local", "local", 0)
    peers = machine_types.peers_of(names=["local"])["local"]
    assert peers[0] == "local" and "a3-highgpu-1g" in peers  # measurements of one serve the other

    # Calibration takes the GPU spread and says so.
    assert calibrate.default_settings("local") == calibrate.GPU_SETTINGS
    assert calibrate.default_image_size("local") == calibrate.GPU_IMAGE_SIZE
    plan = calibration_plan(build_parser().parse_args(["calibrate", "--machine", "local"]))
    assert plan.grid() == calibrate.GPU_SETTINGS and "(the GPU spread)" in plan.describe()

    # Only `local`, and only by a login mapped to it: an agent of g4dn.xlarge describing itself changes nothing,
    # and a login of g4dn.xlarge alone cannot register for local at all.
    g4dn = machine_types.get_by_name(name="g4dn.xlarge")
    cpu_of_local = local_machine.cpu(model="made up")
    beat: dict[str, Any] = {"host": "local-gpu-test", "pid": 1, "device": "cpu", "started_at": datetime.now(UTC)}
    beat |= {"environment_id": environment.environment_id("cpu"), "instance_id": None}
    use(agent, monkeypatch)
    agents.beat(agent_id=uuid.uuid4(), machine_type="g4dn.xlarge", device_description=cpu_of_local, **beat)
    use(agent_url(owner, machine_types=("g4dn.xlarge",), login=OTHER_ONLY), monkeypatch)
    with pytest.raises(psycopg2.errors.InsufficientPrivilege, match="row-level security"):
        agents.beat(agent_id=uuid.uuid4(), machine_type="local", device_description=cpu_of_local, **beat)
    use(owner, monkeypatch)
    assert local_row(owner) == row and machine_types.get_by_name(name="g4dn.xlarge") == g4dn

    # An agent of local on a CPU makes it a CPU again.
    monkeypatch.setattr(environment, "cuda_properties", real_cuda)  # None for the CPU
    use(agent, monkeypatch)
    cpu_agent = register(machine_type="local", device="cpu")
    use(owner, monkeypatch)
    again = local_row(owner)
    assert again["gpu"] is None and again["gpu_count"] == 0
    assert all(again[c] is None for c in GPU_COLUMNS if c.startswith("gpu_") and c != "gpu_count")
    assert f"described by its agent {cpu_agent.id}" in again["source"] and again["described_at"] > row["described_at"]
    assert calibrate.default_settings("local") == calibrate.CPU_SETTINGS


def test_a_gpu_agent_process_shows_local_as_its_gpu_and_jobs_get_gpu_answers(
    api_only: Stack, clean_db: None, local_restored: dict[str, Any], tmp_path: Path
) -> None:
    """A real agent process with the stand-in device: GET /v1/machines shows local as an H100, jobs are GPU answers."""
    log = tmp_path / "agent.log"
    env = {**api_only.env, "DATABASE_URL": agent_url(api_only.env["DATABASE_URL"])}
    with log.open("ab") as out:
        agent = subprocess.Popen(
            [sys.executable, "-m", "tests.support.standin_gpu"], cwd=ROOT, env=env, stdout=out, stderr=out
        )
    try:

        def described() -> dict[str, Any] | None:
            # By this agent: earlier tests' CPU agents of local described it too (as a CPU).
            local = http.get(f"{api_only.url}/v1/machines/local").json()
            return local if local["described_at"] and local["gpu"] == H100 else None

        local = wait_until(described, 120, "the agent to describe local", log=log.read_text)
    finally:
        agent.terminate()
        assert agent.wait(60) == 0
    listed = {m["name"]: m for m in http.get(f"{api_only.url}/v1/machines").json()["machines"]}
    assert listed["local"] == local and local["gpu"] == H100 and local["gpu_count"] == 1
    assert local["gpu_memory_gib"] == pytest.approx(standin_gpu.STANDIN_H100.total_memory / 2**30, abs=0.01)
    assert (
        "described by its agent" in local["source"]
        and local["gpu_fp32_tflops"] == listed["a3-highgpu-1g"]["gpu_fp32_tflops"]
    )
    assert "local described as H100-SXM5-80GB" in log.read_text()

    # No model of local yet: answered at once like a cloud type with its GPU (memory: the H100's, not this host's RAM).
    job = run(cnns=["resnet18"], machines=["local", "a3-highgpu-1g"], batch_sizes=[64], image_size=224)
    assert job["status"] == "succeeded", job["error"]
    assert job["result"] is not None
    points = {p["machine"]: p for p in job["result"]["predictions"]}
    assert {m["status"] for m in job["result"]["models"].values()} == {"reference"}
    assert points["local"]["source"] == "reference" and points["local"]["fits_in_memory"] is True
    assert points["local"]["iteration_seconds"] == pytest.approx(points["a3-highgpu-1g"]["iteration_seconds"])
    # Beyond this host's RAM but within the H100's memory: fits; beyond the H100's: does not.
    host_ram_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    sizes = run(cnns=["resnet18"], machines=["local"], batch_sizes=[1024, 4096], image_size=224)["result"]
    assert sizes is not None
    big, huge = sorted(sizes["predictions"], key=lambda p: p["batch_size"])
    assert host_ram_gib < big["peak_memory_gib"] < local["gpu_memory_gib"] and big["fits_in_memory"] is True
    assert huge["peak_memory_gib"] > local["gpu_memory_gib"] and huge["fits_in_memory"] is False

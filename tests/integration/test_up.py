"""`make up` / `make down` (scripts/up.sh, down.sh): each process is restarted when it dies; down leaves nothing."""

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from shared.core.db import transaction
from tests.support.stack import ROOT, bearer, free_port
from tests.support.wait import wait_until

NAMES = ("api", "worker", "beat", "agent")
# Answered by the reference predictor (no agent for it): a job the worker alone finishes.
JOB = {"cnns": ["resnet18"], "machines": ["g4dn.xlarge"], "batch_sizes": [32], "image_size": 64}


def until(what: str, check: Callable[[], bool], timeout: float) -> None:
    """Poll `check()` until it is true, else fail naming `what`."""
    wait_until(check, timeout, what, interval=0.3)


def alive(pid: int) -> bool:
    """True while a process with this pid exists (and is not a zombie)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def in_group(pgid: int) -> list[int]:
    """Pids of the live processes of a process group (a zombie is dead, awaiting its parent)."""
    out = subprocess.run(["ps", "-eo", "pid=,pgid="], capture_output=True, text=True, check=True).stdout
    return [int(p) for p, g in (line.split() for line in out.splitlines()) if int(g) == pgid and alive(int(p))]


@pytest.fixture
def up(service_env: dict[str, str], tmp_path: Path) -> Iterator[tuple[Path, str, dict[str, str]]]:
    """scripts/up.sh with a run folder and port of this test's own; scripts/down.sh afterwards, whatever happened."""
    run = tmp_path / "run"
    port = free_port()
    env = {
        **os.environ,
        **service_env,
        "TRAINCAST_RUN_DIR": str(run),
        "API_PORT": str(port),
        "VENV": str(Path(sys.executable).parent.parent),
    }
    try:
        started = subprocess.run([str(ROOT / "scripts/up.sh")], env=env, capture_output=True, text=True, timeout=240)
        assert started.returncode == 0, started.stdout + started.stderr
        yield run, f"http://127.0.0.1:{port}", env
    finally:
        subprocess.run([str(ROOT / "scripts/down.sh")], env=env, capture_output=True, timeout=300)


def test_a_killed_worker_is_restarted_and_down_leaves_nothing(up: tuple[Path, str, dict[str, str]]) -> None:
    """kill -9 of the worker: its supervisor starts a new one (logged) that finishes a job; down.sh stops every
    supervisor and process (SIGTERM reaches the agent, which records a clean stop) and leaves no process."""
    run, url, env = up
    supervisors = {name: int((run / f"{name}.pid").read_text()) for name in NAMES}
    children = {name: int((run / f"{name}.child.pid").read_text()) for name in NAMES}
    assert all(alive(pid) for pid in [*supervisors.values(), *children.values()])
    # The worker's batch work runs below the API (WORKER_NICE); the agent's timings are at the host's own priority.
    base = os.getpriority(os.PRIO_PROCESS, 0)
    until(
        "the worker to lower its priority", lambda: os.getpriority(os.PRIO_PROCESS, children["worker"]) == base + 10, 30
    )
    assert (
        os.getpriority(os.PRIO_PROCESS, children["agent"]) == os.getpriority(os.PRIO_PROCESS, children["api"]) == base
    )
    old = children["worker"]
    os.kill(old, signal.SIGKILL)

    def restarted() -> bool:
        now = int((run / "worker.child.pid").read_text() or 0)
        return now != old and alive(now)

    until("a new worker", restarted, 30)
    log = (run / "worker.log").read_text()
    assert "supervise: worker exited with code 137" in log and "restarting in 1 s" in log

    key = (run / "admin.key").read_text().strip()
    with httpx.Client(base_url=url, headers=bearer(key), timeout=30) as client:
        job_id = client.post("/v1/jobs", json=JOB).raise_for_status().json()["id"]
        until("the job to finish", lambda: client.get(f"/v1/jobs/{job_id}").json()["status"] == "succeeded", 120)

    down = subprocess.run([str(ROOT / "scripts/down.sh")], env=env, capture_output=True, text=True, timeout=300)
    assert down.returncode == 0 and all(f"{name} stopped" in down.stdout for name in NAMES), down.stdout
    leftovers = {name: in_group(pgid) for name, pgid in supervisors.items() if in_group(pgid)}
    assert leftovers == {}
    assert not any(alive(pid) for pid in [old, *supervisors.values(), *children.values()])
    assert not list(run.glob("*.pid"))
    for name in NAMES:
        assert f"supervise: {name} stopped (exit code" in (run / f"{name}.log").read_text()
    with transaction() as cur:
        cur.execute("SELECT stopped_at, stop_reason FROM agents WHERE pid = %s", (children["agent"],))
        agent = cur.fetchone()
    assert agent is not None and agent["stopped_at"] is not None and agent["stop_reason"] == "stop signal"


def test_up_again_after_a_lost_supervisor_never_runs_a_second_copy(up: tuple[Path, str, dict[str, str]]) -> None:
    """The worker's supervisor killed (its worker runs on, unsupervised): `make up` again stops that worker and starts
    one supervised copy, so exactly one worker process consumes the jobs queue (there were two)."""
    run, _url, env = up
    supervisor = int((run / "worker.pid").read_text())
    orphan = int((run / "worker.child.pid").read_text())
    os.kill(supervisor, signal.SIGKILL)
    until("the supervisor to go", lambda: not alive(supervisor), 10)
    assert alive(orphan)
    again = subprocess.run([str(ROOT / "scripts/up.sh")], env=env, capture_output=True, text=True, timeout=240)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "worker: stopping what its lost supervisor left running" in again.stdout, again.stdout
    assert "api already running" in again.stdout  # the others were left as they were
    until("the orphaned worker to stop", lambda: not alive(orphan), 30)
    assert in_group(supervisor) == []  # nothing left of the lost supervisor's group (the pool's children included)
    new = int((run / "worker.pid").read_text())
    until("one supervised worker", lambda: (run / "worker.child.pid").exists() and len(in_group(new)) >= 2, 30)

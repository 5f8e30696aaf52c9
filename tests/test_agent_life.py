"""A real agent process: registration and heartbeats, SIGTERM mid-task, kill -9 and redelivery."""

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest

from shared import agents, layers, tasks
from tests.conftest import Stack, http, queued_tasks
from tests.test_agent import rows

T = TypeVar("T")
BATCH_SIZES = [2, 3, 4, 5]
# One batch size per window, each window running to its time cap (never stable, and not waiting
# for a quiet machine): the task stores a row about every second, so a signal lands mid-window.
SLOW_AGENT = {
    "BENCH_WINDOW_POINTS": "1",
    "BENCH_TIME_CAP_S": "1",
    "BENCH_TARGET_SPREAD": "-1",
    "BENCH_QUIET_WAIT": "inf",
}


@pytest.fixture
def stack(service_env: dict[str, str], tmp_path: Path) -> Iterator[Stack]:
    """Processes started by the test, stopped afterwards."""
    s = Stack(service_env, tmp_path)
    s.env.update(SLOW_AGENT, AGENT_HEARTBEAT_S="1")
    yield s
    for name in list(s.procs):
        s.stop(name, signal.SIGKILL)


def wait_until(check: Callable[[], T | None], what: str, stack: Stack, timeout: float = 90) -> T:
    """Poll until check() returns something truthy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}; agent log:\n{stack.log('agent')[-3000:]}")


def send_first_conv() -> int:
    """Send one layer task (ResNet-18's first conv at 224 px, four batch sizes); returns its signature id."""
    sig_id = layers.register_builtin(name="resnet18", image_size=224)[0][0]
    item = {"signature_id": sig_id, **layers.specs(signature_ids=[sig_id])[sig_id], "batch_sizes": BATCH_SIZES}
    tasks.send(
        tasks.BENCH_LAYERS, queue=tasks.bench_queue("local"), machine_type="local", precision="fp32", items=[item]
    )
    return sig_id


def stored() -> list[dict[str, Any]]:
    """Layer rows in the order they were written."""
    return rows("SELECT id, batch_size, measured_at, forward_ms FROM layer_benchmarks ORDER BY id")


def listed(stack: Stack, pid: int) -> dict[str, Any] | None:
    """This agent as GET /v1/agents shows it."""
    found = http.get(f"{stack.url}/v1/agents", params={"machine": "local"}).json()["agents"]
    return next((a for a in found if a["pid"] == pid), None)


def test_agent_registers_beats_and_shows_its_work(stack: Stack, clean_db: None) -> None:
    """GET /v1/agents lists a started agent as alive, its heartbeat moving, its work, then its stop."""
    stack.start("api")
    stack.start("agent")
    stack.wait_ready()
    pid = stack.procs["agent"].pid
    me = wait_until(lambda: listed(stack, pid), "the agent to register", stack)
    assert me["alive"] and me["device"] == "cpu" and me["current_work"] is None and me["stopped_at"] is None
    assert me["environment"]["threads"] == len(os.sched_getaffinity(0)) and me["environment"]["device_type"] == "cpu"
    time.sleep(2.5)  # idle: only the heartbeat thread writes
    later = listed(stack, pid)
    assert later and datetime.fromisoformat(later["heartbeat_at"]) > datetime.fromisoformat(me["heartbeat_at"])

    # A task that fails (misrouted: another machine type's work) is shown as the agent's last error.
    misrouted = {"cnn": "resnet18", "image_size": 32, "optimizer": "sgd", "precision": "fp32", "batch_sizes": [2]}
    tasks.send(tasks.MEASURE_STEPS, queue=tasks.bench_queue("local"), machine_type="g5.xlarge", **misrouted)
    failed = wait_until(lambda: (a := listed(stack, pid)) and a["last_error"] and a, "the failure to show", stack)
    assert "g5.xlarge" in failed["last_error"] and failed["alive"]

    sig_id = send_first_conv()
    working = wait_until(lambda: (a := listed(stack, pid)) and a["current_work"] and a, "work to show", stack)
    assert working["current_work"]["task"] == tasks.BENCH_LAYERS
    assert working["current_work"]["signature_id"] == sig_id and working["current_work"]["batch_sizes"] == BATCH_SIZES
    env = {**stack.env, "TRAINCAST_API_URL": stack.url}
    cli = subprocess.run(
        [str(Path(sys.executable).parent / "traincast"), "agents"], env=env, capture_output=True, text=True, timeout=60
    )
    assert cli.returncode == 0 and f":{pid}" in cli.stdout and "bench_layers" in cli.stdout

    assert stack.stop("agent") == 0
    gone = listed(stack, pid)
    assert gone and not gone["alive"] and gone["stopped_at"] and gone["current_work"] is None
    assert gone["stop_reason"] == "stop signal" and gone["instance_id"] is None


def test_sigterm_stores_the_current_window_and_requeues_the_rest(stack: Stack, clean_db: None) -> None:
    """SIGTERM mid-task: the window in progress is finished and stored, the message goes back, a new agent resumes."""
    stack.start("agent")
    send_first_conv()
    wait_until(lambda: stored(), "a first row", stack)
    time.sleep(0.3)  # into the second window
    before = stored()
    assert stack.stop("agent") == 0
    at_exit = stored()
    assert len(at_exit) == len(before) + 1 < len(BATCH_SIZES), stack.log("agent")[-3000:]
    assert queued_tasks("bench.local") == [tasks.BENCH_LAYERS]
    assert "handing the rest back to the queue" in stack.log("agent")

    stack.start("agent")
    wait_until(lambda: len(stored()) == len(BATCH_SIZES), "all rows", stack)
    final = stored()
    assert final[: len(at_exit)] == at_exit  # resumed: nothing stored was measured again
    assert sorted(r["batch_size"] for r in final) == BATCH_SIZES


def test_a_killed_agent_is_silent_and_its_task_is_redelivered_once(stack: Stack, clean_db: None) -> None:
    """kill -9 mid-task: Redis redelivers the unacknowledged task; the next agent adds only what is missing."""
    stack.start("agent")
    pid = stack.procs["agent"].pid
    send_first_conv()
    wait_until(lambda: len(stored()) >= 2, "two rows", stack)
    assert stack.stop("agent", signal.SIGKILL) == -signal.SIGKILL
    before = stored()
    assert queued_tasks("bench.local") == []  # unacknowledged, not lost: Redis holds it until the timeout
    time.sleep(1.5)
    dead = next(a for a in agents.list_all(alive_after_s=1.0, machine="local") if a["pid"] == pid)
    assert not dead["alive"] and dead["stopped_at"] is None

    stack.env["VISIBILITY_TIMEOUT_S"] = "2"  # so the test need not wait hours for the redelivery
    stack.start("agent")
    wait_until(lambda: len(stored()) == len(BATCH_SIZES), "all rows", stack)
    time.sleep(2)  # a second delivery of the same message, if any, has time to add rows: it must not
    final = stored()
    assert final[: len(before)] == before and len(final) == len(BATCH_SIZES)
    assert sorted(r["batch_size"] for r in final) == BATCH_SIZES

"""A real agent process: registration and heartbeats, SIGTERM mid-task, kill -9 and redelivery."""

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from shared import agents
from shared.core import tasks
from tests.support.agentkit import BATCH_SIZES, SLOW_AGENT, measured, send_first_conv, until_agent
from tests.support.agentkit import stored_layers as stored
from tests.support.stack import Stack, http, queued_tasks, settled


@pytest.fixture
def stack(service_env: dict[str, str], tmp_path: Path) -> Iterator[Stack]:
    """Processes started by the test, stopped afterwards."""
    s = Stack(service_env, tmp_path)
    s.env.update(SLOW_AGENT, AGENT_HEARTBEAT_S="1")
    yield s
    for name in list(s.procs):
        s.stop(name, signal.SIGKILL)


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
    me = until_agent(lambda: listed(stack, pid), "the agent to register", stack)
    assert me["alive"] and me["device"] == "cpu" and me["current_work"] is None and me["stopped_at"] is None
    assert me["environment"]["threads"] == len(os.sched_getaffinity(0)) and me["environment"]["device_type"] == "cpu"
    # Idle: only the heartbeat thread writes (every AGENT_HEARTBEAT_S = 1 s).
    first_beat = datetime.fromisoformat(me["heartbeat_at"])
    until_agent(
        lambda: (a := listed(stack, pid)) and datetime.fromisoformat(a["heartbeat_at"]) > first_beat,
        "a later heartbeat",
        stack,
        timeout=30,
    )

    # A task that fails (misrouted: another machine type's work) is shown as the agent's last error.
    misrouted: dict[str, Any] = {
        "cnn": "resnet18",
        "image_size": 32,
        "optimizer": "sgd",
        "precision": "fp32",
        "batch_sizes": [2],
    }
    tasks.send(tasks.MEASURE_STEPS, queue=tasks.bench_queue("local"), machine_type="g5.xlarge", **misrouted)
    failed = until_agent(lambda: (a := listed(stack, pid)) and a["last_error"] and a, "the failure to show", stack)
    assert "g5.xlarge" in failed["last_error"] and failed["alive"]

    sig_id = send_first_conv()
    working = until_agent(lambda: (a := listed(stack, pid)) and a["current_work"] and a, "work to show", stack)
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
    # The second window under way: SIGTERM from here on lets it finish and store its row.
    until_agent(lambda: stack.log("agent").count("timing window") >= 2, "the second window", stack)
    before = stored()
    assert stack.stop("agent") == 0
    at_exit = stored()
    assert len(at_exit) == len(before) + 1 < len(BATCH_SIZES), stack.log("agent")[-3000:]
    assert queued_tasks("bench.local") == [tasks.BENCH_LAYERS]

    first_log = len(stack.log("agent"))
    stack.start("agent")
    until_agent(lambda: len(stored()) == len(BATCH_SIZES), "all rows", stack)
    final = stored()
    assert final[: len(at_exit)] == at_exit  # the stored rows untouched (ids, times, timings)
    # Resumed: only the missing batch sizes were measured (rows are written ON CONFLICT DO NOTHING, so a
    # re-measurement would leave the rows as they are: the agent's own account shows it).
    assert measured(stack.log("agent")[first_log:]) == len(BATCH_SIZES) - len(at_exit)
    assert sorted(r["batch_size"] for r in final) == BATCH_SIZES


def test_a_killed_agent_is_silent_and_its_task_is_redelivered_once(stack: Stack, clean_db: None) -> None:
    """kill -9 mid-task: Redis redelivers the unacknowledged task; the next agent adds only what is missing."""
    stack.start("agent")
    pid = stack.procs["agent"].pid
    send_first_conv()
    until_agent(lambda: len(stored()) >= 2, "two rows", stack)
    assert stack.stop("agent", signal.SIGKILL) == -signal.SIGKILL
    before = stored()
    assert queued_tasks("bench.local") == []  # unacknowledged, not lost: Redis holds it until the timeout

    def listed_dead() -> agents.AgentListed | None:
        agent = next(a for a in agents.list_all(alive_after_s=1.0, machine_type="local") if a["pid"] == pid)
        return None if agent["alive"] else agent

    # Silent: no heartbeat for alive_after_s, and no stop recorded (a killed process says nothing).
    dead = until_agent(listed_dead, "the killed agent to count as dead", stack, timeout=30)
    assert dead["stopped_at"] is None

    stack.env["VISIBILITY_TIMEOUT_S"] = "2"  # so the test need not wait hours for the redelivery
    first_log = len(stack.log("agent"))
    stack.start("agent")
    until_agent(lambda: len(stored()) == len(BATCH_SIZES), "all rows", stack)
    # Every message acknowledged and none waiting: no second delivery can come, and none measured anything twice.
    until_agent(lambda: settled("local"), "the queue to settle", stack)
    final = stored()
    assert final[: len(before)] == before and len(final) == len(BATCH_SIZES)
    assert measured(stack.log("agent")[first_log:]) == len(BATCH_SIZES) - len(before)
    assert sorted(r["batch_size"] for r in final) == BATCH_SIZES

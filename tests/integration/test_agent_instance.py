"""A real agent process watching its instance: it leaves on a rebalance notice or when idle, and
refuses a GPU machine type it has no CUDA device for."""

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.agentkit import rows, until_agent
from tests.support.imds import Imds
from tests.support.stack import ROOT, Stack

INSTANCE = "i-0agentwatch0001"


@pytest.fixture
def stack(service_env: dict[str, str], tmp_path: Path) -> Iterator[Stack]:
    """Processes started by the test, stopped afterwards."""
    s = Stack(service_env, tmp_path)
    s.env.update(AGENT_HEARTBEAT_S="1", AGENT_IMDS_POLL_S="0.3", AGENT_INSTANCE_ID=INSTANCE)
    yield s
    for name in list(s.procs):
        s.stop(name, signal.SIGKILL)


@pytest.fixture
def imds() -> Iterator[Imds]:
    """The instance's metadata service."""
    md = Imds(instance_id=INSTANCE)
    yield md
    md.close()


def me() -> dict[str, Any] | None:
    """The agent registered from the pretend instance."""
    found = rows("SELECT * FROM agents WHERE instance_id = %s ORDER BY started_at DESC", INSTANCE)
    return found[0] if found else None


def exited(stack: Stack) -> int | None:
    """The agent's exit code once it has ended."""
    return stack.procs["agent"].poll()


def test_rebalance_recommendation_makes_the_agent_leave(stack: Stack, imds: Imds, clean_db: None) -> None:
    """A rebalance recommendation in the metadata: the agent exits cleanly, saying why."""
    stack.start("agent", AGENT_WATCH_INSTANCE="true", AWS_EC2_METADATA_SERVICE_ENDPOINT=imds.url)
    until_agent(me, "the agent to register", stack)
    assert exited(stack) is None
    imds.recommend_rebalance()
    code = until_agent(lambda: [exited(stack)] if exited(stack) is not None else None, "the agent to leave", stack, 60)
    assert code == [0]
    row = me()
    assert row is not None and row["stopped_at"] is not None
    assert row["stop_reason"].startswith("rebalance recommendation at ")
    assert any(p.endswith("/spot/instance-action") for p in imds.requests)


def test_idle_agent_leaves_by_itself(stack: Stack, clean_db: None) -> None:
    """No work for AGENT_IDLE_EXIT_S: the agent exits by itself (on an instance its unit then powers off)."""
    stack.start("agent", AGENT_IDLE_EXIT_S="2")
    until_agent(me, "the agent to register", stack)
    code = until_agent(lambda: [exited(stack)] if exited(stack) is not None else None, "the agent to leave", stack, 60)
    assert code == [0]
    row = me()
    assert row is not None and row["stop_reason"] == "idle for 2 s with no work"


def test_agent_for_a_gpu_type_refuses_to_measure_on_the_cpu(service_env: dict[str, str]) -> None:
    """A driver/CUDA mismatch must not store CPU timings under g4dn.xlarge: exit 3 with the reason."""
    env = {**stack_env(service_env), "AGENT_MACHINE_TYPE": "g4dn.xlarge"}
    env.pop("AGENT_REQUIRE_GPU", None)
    done = subprocess.run([sys.executable, "-m", "gpu_agent"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 3
    assert "error: no usable CUDA device for machine type 'g4dn.xlarge'" in done.stderr
    assert "AGENT_REQUIRE_GPU=false" in done.stderr


def stack_env(service_env: dict[str, str]) -> dict[str, str]:
    """The environment a Stack gives its processes."""
    return dict(Stack(service_env, Path("/tmp")).env)

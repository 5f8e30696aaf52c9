"""Non-conv ops measured by a real agent process: SIGTERM and kill -9 mid-window store each batch size once."""

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shared.core import tasks
from shared.measurements import layers, ops
from shared.training import TrainConfig
from tests.support.agentkit import SLOW_AGENT, measured, rows, until_agent
from tests.support.stack import Stack, queued_tasks, settled

OP_BATCH_SIZES = [2, 3, 4, 5]


@pytest.fixture
def stack(service_env: dict[str, str], tmp_path: Path) -> Iterator[Stack]:
    """Processes started by the test, stopped afterwards."""
    s = Stack(service_env, tmp_path)
    s.env.update(SLOW_AGENT, AGENT_HEARTBEAT_S="1", BENCH_TIME_CAP_S="2")  # an op window: about a second
    yield s
    for name in list(s.procs):
        s.stop(name, signal.SIGKILL)


def send_first_norm() -> int:
    """Send one op task (resnet18's first batch norm at 224 px, four batch sizes); returns its op signature id."""
    layers.register_builtin(name="resnet18", image_size=224)
    members = ops.members(name="resnet18", image_size=224, num_classes=1000)
    sig_id, spec, _count = next(m for m in members if m[1]["op"] == "batch_norm" and m[1]["shape"][0] == 64)
    item = {"signature_id": sig_id, "hash": "", "spec": spec, "batch_sizes": OP_BATCH_SIZES}
    tasks.send(
        tasks.BENCH_OPS, queue=tasks.bench_queue("local"), machine_type="local",
        config=TrainConfig().model_dump(), items=[item],
    )  # fmt: skip
    return sig_id


def stored() -> list[dict[str, Any]]:
    """Op rows in the order they were written."""
    return rows("SELECT id, batch_size, variant, environment_id, forward_ms FROM op_benchmarks ORDER BY id")


def test_sigterm_and_kill_mid_op_window_leave_no_duplicate(stack: Stack, clean_db: None) -> None:
    """SIGTERM finishes the op window and requeues; kill -9 redelivers; every batch size is stored once."""
    stack.start("agent")
    send_first_norm()
    # The second window under way: SIGTERM from here on lets it finish and store its row.
    until_agent(lambda: stack.log("agent").count("timing window") >= 2, "the second window", stack)
    before = stored()
    assert stack.stop("agent") == 0
    at_exit = stored()
    assert len(at_exit) == len(before) + 1 < len(OP_BATCH_SIZES), stack.log("agent")[-3000:]
    assert queued_tasks("bench.local") == [tasks.BENCH_OPS]

    log_at = len(stack.log("agent"))
    stack.start("agent")
    until_agent(lambda: len(stored()) > len(at_exit), "a row after the restart", stack)
    stack.stop("agent", signal.SIGKILL)
    # Resumed: the second agent set out to measure only what the first had not stored.
    assert measured(stack.log("agent")[log_at:]) == len(OP_BATCH_SIZES) - len(at_exit)
    before_kill, log_at = stored(), len(stack.log("agent"))
    stack.env["VISIBILITY_TIMEOUT_S"] = "2"  # so the unacknowledged message comes back within the test
    stack.start("agent")
    until_agent(lambda: len(stored()) == len(OP_BATCH_SIZES), "all op rows", stack)
    # Every message acknowledged and none waiting: no second delivery can come, and none measured anything twice.
    until_agent(lambda: settled("local"), "the queue to settle", stack)
    final = stored()
    assert final[: len(before_kill)] == before_kill  # the stored rows untouched (ids, timings)
    # Rows are written ON CONFLICT DO NOTHING: the agent's own account shows nothing was measured twice.
    assert measured(stack.log("agent")[log_at:]) == len(OP_BATCH_SIZES) - len(before_kill)
    assert sorted(r["batch_size"] for r in final) == OP_BATCH_SIZES
    assert all(r["variant"] == "fp32" and r["forward_ms"] > 0 for r in final)

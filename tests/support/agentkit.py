"""Driving a real agent process: its rows, a slowed-down configuration, one layer task, what it says it measured."""

import re
from collections.abc import Callable
from typing import Any, TypeVar

from shared.core import tasks
from shared.core.db import transaction
from shared.measurements import layers
from tests.support.stack import Stack
from tests.support.wait import wait_until

T = TypeVar("T")
BATCH_SIZES = [2, 3, 4, 5]
# One batch size per window, each window running to its time cap (never stable, no cap in blocks, and not
# waiting for a quiet machine), each stored as it ends: the task stores a row about every second, so a signal
# lands mid-window.
SLOW_AGENT = {
    "BENCH_WINDOW_POINTS": "1",
    "BENCH_TIME_CAP_S": "1",
    "BENCH_TARGET_SPREAD": "-1",
    "BENCH_SETTLE_ROUNDS": "1000",
    "BENCH_QUIET_WAIT": "inf",
    "BENCH_STORE_EVERY_S": "0",
}
# gpu_agent/app.py's line before each signature's measurements: how many batch sizes it measures, how many it skips.
MEASURING = re.compile(r"measuring (?:\w+ )?signature \d+ at (\d+) batch sizes \((\d+) stored\)")


def rows(sql: str, *params: Any) -> list[dict[str, Any]]:
    """Run a query and return its rows."""
    with transaction() as cur:
        cur.execute(sql, params)
        return [dict(r) for r in cur.fetchall()]


def until_agent(check: Callable[[], T | None], what: str, stack: Stack, timeout: float = 90) -> T:
    """Poll until check() returns something truthy; on a timeout, fail with the agent's log."""
    return wait_until(check, timeout, what, log=lambda: stack.log("agent"))


def send_first_conv() -> int:
    """Send one layer task (ResNet-18's first conv at 224 px, four batch sizes); returns its signature id."""
    sig_id = layers.register_builtin(name="resnet18", image_size=224)[0][0]
    item = {"signature_id": sig_id, **layers.specs(signature_ids=[sig_id])[sig_id], "batch_sizes": BATCH_SIZES}
    tasks.send(
        tasks.BENCH_LAYERS, queue=tasks.bench_queue("local"), machine_type="local", precision="fp32", items=[item]
    )
    return sig_id


def stored_layers() -> list[dict[str, Any]]:
    """Layer rows in the order they were written."""
    return rows("SELECT id, batch_size, measured_at, forward_ms FROM layer_benchmarks ORDER BY id")


def measured(log: str) -> int:
    """How many batch sizes an agent's log says it set out to measure (a redelivery of stored work adds 0).

    Rows are written ON CONFLICT DO NOTHING, so unchanged rows cannot show that nothing was measured twice;
    the agent's own account can.
    """
    return sum(int(todo) for todo, _stored in MEASURING.findall(log))

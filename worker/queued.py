"""Benchmark work waiting in Redis: what is queued per machine type, and taking back what nobody needs.

kombu's Redis transport keeps each queue as a list of JSON messages (the priority steps in lists of
their own); a message's body is base64 JSON `[args, kwargs, embed]`. Messages an agent has taken
but not acknowledged are not in these lists, so withdrawing never touches work in progress.
"""

import base64
import json
import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, cast

import redis

from shared.core import tasks

log = logging.getLogger(__name__)

_broker: redis.Redis | None = None


def broker() -> redis.Redis:
    """This process's Redis client (TLS as every process verifies it)."""
    global _broker
    if _broker is None:
        _broker = tasks.redis_client()
    return _broker


def _keys(machine_type: str) -> list[str]:
    return tasks.queue_keys(tasks.bench_queue(machine_type))


def _items(raw: bytes | str, task: str) -> list[tuple[int, list[int]]]:
    """(signature id, batch sizes) of a queued task of this name (layer or op; none for others or unreadable ones)."""
    try:
        message = json.loads(raw)
        if message.get("headers", {}).get("task") != task:
            return []
        _args, kwargs, _embed = json.loads(base64.b64decode(message["body"]))
        return [(int(item["signature_id"]), [int(b) for b in item["batch_sizes"]]) for item in kwargs.get("items", [])]
    except (ValueError, KeyError, TypeError):
        return []


def signatures(machine_type: str, task: str = tasks.BENCH_LAYERS) -> set[int]:
    """Signature ids of the layer (or op) tasks waiting in bench.<machine>."""
    out: set[int] = set()
    for key in _keys(machine_type):
        for raw in broker().lrange(key, 0, -1):
            out |= {sig for sig, _sizes in _items(raw, task)}
    return out


def withdraw(machine_type: str, unwanted: dict[int, set[int]], task: str = tasks.BENCH_LAYERS) -> int:
    """Remove the waiting layer (or op) tasks of bench.<machine> whose every item is unwanted.

    `unwanted` maps a signature id to the batch sizes that may go: a task asking for others (a
    calibration's, say) is left alone.
    """
    if not unwanted:
        return 0
    removed = 0
    for key in _keys(machine_type):
        for raw in broker().lrange(key, 0, -1):
            items = _items(raw, task)
            if items and all(set(sizes) <= unwanted.get(sig, set()) for sig, sizes in items):
                # LREM of the exact message: one an agent took meanwhile is simply not there any more.
                removed += int(broker().lrem(key, 1, cast(str, raw)))  # bytes as stored
    if removed:
        log.info("withdrew %d queued benchmark tasks from %s", removed, tasks.bench_queue(machine_type))
    return removed


def busy(
    agents: Sequence[Mapping[str, Any]], stuck_after_s: float, task: str = tasks.BENCH_LAYERS
) -> set[tuple[str, int]]:
    """(machine type, signature id) pairs live agents are measuring now in tasks of this name, from their current_work.

    Work begun over stuck_after_s ago does not count: that agent is hung, and the work goes to another.
    """
    out: set[tuple[str, int]] = set()
    for agent in agents:
        work = agent.get("current_work") or {}
        if not (agent.get("alive") and work.get("task") == task and "signature_id" in work):
            continue
        if not stuck(agent, stuck_after_s):
            # A task of many signatures holds them all (gpu_agent/runner.py names those it has left).
            for sig in work.get("signature_ids") or [work["signature_id"]]:
                out.add((agent["machine_type"], int(sig)))
    return out


def stuck(agent: Mapping[str, Any], stuck_after_s: float) -> bool:
    """Whether an agent has been on its current work longer than stuck_after_s (it is hung)."""
    since = (agent.get("current_work") or {}).get("since")
    if not isinstance(since, str):
        return False
    return (datetime.now(UTC) - datetime.fromisoformat(since)).total_seconds() > stuck_after_s

"""What the controller reads and records: work waiting, agents, its instances, targets, events."""

from datetime import datetime
from typing import Any

import redis

from gpu_agent.fleet.ec2 import LiveInstance
from shared import tasks
from shared.db import transaction

# kombu's Redis transport: a message of priority > 0 waits in "<queue>\x06\x16<step>".
PRIORITY_SEP = "\x06\x16"
PRIORITY_STEPS = (3, 6, 9)
SELECT_AWS_TYPES = "SELECT name, price_usd_per_hour FROM machine_types WHERE provider = 'aws'"
# A job waits on a type while its progress counts benchmarks pending there (see worker/planning.py).
SELECT_WAITING_JOBS = """
SELECT m.key AS machine_type, count(*) AS n
FROM jobs j, jsonb_each(j.progress->'machines') m
WHERE j.status = 'running' AND COALESCE((m.value->>'pending')::int, 0) > 0
GROUP BY m.key"""
SELECT_AGENTS = """
SELECT instance_id,
       bool_or(stopped_at IS NULL AND heartbeat_at > now() - make_interval(secs => %(alive_after)s)) AS alive,
       bool_or(stopped_at IS NULL AND heartbeat_at > now() - make_interval(secs => %(alive_after)s)
               AND current_work IS NOT NULL) AS busy
FROM agents WHERE instance_id = ANY(%(ids)s)
GROUP BY instance_id"""
SELECT_RUNNING = "SELECT * FROM fleet_instances WHERE state = 'running'"
SELECT_TARGETS = "SELECT * FROM fleet_targets"
ADOPT = """
INSERT INTO fleet_instances (instance_id, machine_type, market, subnet_id, price_usd_per_hour, launched_at)
VALUES (%(id)s, %(type)s, %(market)s, %(subnet)s, %(price)s, %(launched_at)s)
ON CONFLICT (instance_id) DO NOTHING"""
MARK_TERMINATED = """
UPDATE fleet_instances SET state = 'terminated', terminated_at = now(), reason = %(reason)s
WHERE instance_id = %(id)s AND state = 'running'"""
SET_IDLE = """
UPDATE fleet_instances SET idle_since = CASE WHEN %(idle)s THEN COALESCE(idle_since, now()) END
WHERE instance_id = %(id)s"""
INSERT_EVENT = """
INSERT INTO fleet_events (machine_type, instance_id, action, detail) VALUES (%s, %s, %s, %s)"""
SAVE_DECISION = """
INSERT INTO fleet_targets (machine_type, wanted, queued_tasks, waiting_jobs, note, decided_at)
VALUES (%(type)s, %(wanted)s, %(queued)s, %(waiting)s, %(note)s, now())
ON CONFLICT (machine_type) DO UPDATE SET wanted = EXCLUDED.wanted, queued_tasks = EXCLUDED.queued_tasks,
    waiting_jobs = EXCLUDED.waiting_jobs, note = EXCLUDED.note, decided_at = now()"""
PAUSE = """
INSERT INTO fleet_targets (machine_type, retry_after) VALUES (%s, %s)
ON CONFLICT (machine_type) DO UPDATE SET retry_after = EXCLUDED.retry_after"""


def aws_types() -> dict[str, float]:
    """AWS machine types of the catalog and their on-demand price per hour."""
    with transaction() as cur:
        cur.execute(SELECT_AWS_TYPES)
        return {r["name"]: float(r["price_usd_per_hour"]) for r in cur.fetchall()}


def queued(broker: redis.Redis, machine_type: str) -> int:
    """Benchmark tasks waiting in bench.<type> (kombu keeps a list per queue and priority step)."""
    name = tasks.bench_queue(machine_type)
    pipe = broker.pipeline(transaction=False)
    for key in [name] + [f"{name}{PRIORITY_SEP}{step}" for step in PRIORITY_STEPS]:
        pipe.llen(key)
    return sum(int(n) for n in pipe.execute())


def waiting_jobs() -> dict[str, int]:
    """Running jobs with benchmarks pending, per machine type."""
    with transaction() as cur:
        cur.execute(SELECT_WAITING_JOBS)
        return {r["machine_type"]: int(r["n"]) for r in cur.fetchall()}


def agents_by_instance(instance_ids: list[str], *, alive_after_s: float) -> dict[str, tuple[bool, bool]]:
    """instance id → (an agent on it is alive, it is measuring something)."""
    with transaction() as cur:
        cur.execute(SELECT_AGENTS, {"ids": instance_ids, "alive_after": alive_after_s})
        return {r["instance_id"]: (bool(r["alive"]), bool(r["busy"])) for r in cur.fetchall()}


def running() -> dict[str, dict[str, Any]]:
    """The instances the fleet believes are running, by id."""
    with transaction() as cur:
        cur.execute(SELECT_RUNNING)
        return {r["instance_id"]: dict(r) for r in cur.fetchall()}


def targets() -> dict[str, dict[str, Any]]:
    """Held counts, drains and launch pauses, by machine type."""
    with transaction() as cur:
        cur.execute(SELECT_TARGETS)
        return {r["machine_type"]: dict(r) for r in cur.fetchall()}


def adopt(inst: LiveInstance, *, price: float) -> None:
    """Record an instance (one just launched, or one EC2 knows and the database lost)."""
    params = {
        "id": inst.instance_id,
        "type": inst.machine_type,
        "market": inst.market,
        "subnet": inst.subnet_id,
        "price": price,
        "launched_at": inst.launched_at,
    }
    with transaction() as cur:
        cur.execute(ADOPT, params)


def terminated(instance_id: str, *, reason: str) -> None:
    """Mark an instance terminated, with why."""
    with transaction() as cur:
        cur.execute(MARK_TERMINATED, {"id": instance_id, "reason": reason})


def set_idle(instance_id: str, *, idle: bool) -> None:
    """Start (or keep) an idle spell, or end it."""
    with transaction() as cur:
        cur.execute(SET_IDLE, {"id": instance_id, "idle": idle})


def event(machine_type: str, action: str, detail: str, *, instance_id: str | None = None) -> None:
    """Append to the fleet's log of what it did and why."""
    with transaction() as cur:
        cur.execute(INSERT_EVENT, (machine_type, instance_id, action, detail))


def save_decision(machine_type: str, *, wanted: int, queued: int, waiting: int, note: str | None) -> None:
    """What the controller saw and wanted for a type on this pass (GET /v1/fleet shows it)."""
    params = {"type": machine_type, "wanted": wanted, "queued": queued, "waiting": waiting, "note": note}
    with transaction() as cur:
        cur.execute(SAVE_DECISION, params)


def pause(machine_type: str, *, until: datetime) -> None:
    """No launches of this type before `until` (after a capacity error)."""
    with transaction() as cur:
        cur.execute(PAUSE, (machine_type, until))

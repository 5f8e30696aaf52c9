"""What the controller reads and records: work waiting, agents, its instances, targets, events."""

from datetime import datetime
from typing import Any

import redis

from gpu_agent.fleet.ec2 import LiveInstance
from shared import tasks
from shared.db import one, transaction

# kombu's Redis transport: a message of priority > 0 waits in "<queue>\x06\x16<step>".
PRIORITY_SEP = "\x06\x16"
PRIORITY_STEPS = (3, 6, 9)
SELECT_AWS_TYPES = "SELECT name, price_usd_per_hour FROM machine_types WHERE provider = 'aws'"
SELECT_VCPUS = "SELECT vcpus FROM machine_types WHERE name = %s"
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
# A row marked terminated whose instance EC2 still lists as live is running again (so it counts against
# the limits and is terminated when due), unless the controller terminated it itself since
# revive_before: EC2 may list an instance it was just told to terminate as live for a moment.
ADOPT = """
WITH before AS (SELECT state, reason FROM fleet_instances WHERE instance_id = %(id)s)
INSERT INTO fleet_instances AS f (instance_id, machine_type, market, subnet_id, price_usd_per_hour, launched_at)
VALUES (%(id)s, %(type)s, %(market)s, %(subnet)s, %(price)s, %(launched_at)s)
ON CONFLICT (instance_id) DO UPDATE SET state = 'running', terminated_at = NULL, reason = NULL, idle_since = NULL
WHERE f.state = 'terminated' AND (f.reason LIKE 'gone from EC2%%' OR f.terminated_at IS NULL
                                  OR f.terminated_at < %(revive_before)s)
RETURNING (SELECT state FROM before) AS old_state, (SELECT reason FROM before) AS old_reason"""
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
INSERT INTO fleet_targets (machine_type, retry_after, pause_kind, pause_reason)
VALUES (%(type)s, %(until)s, %(kind)s, %(reason)s)
ON CONFLICT (machine_type) DO UPDATE SET retry_after = EXCLUDED.retry_after, pause_kind = EXCLUDED.pause_kind,
    pause_reason = EXCLUDED.pause_reason"""
COUNT_FAILURE = """
INSERT INTO fleet_targets AS t (machine_type, failures) VALUES (%s, 1)
ON CONFLICT (machine_type) DO UPDATE SET failures = t.failures + 1
RETURNING failures"""
LAUNCHED = """
UPDATE fleet_targets SET failures = 0, retry_after = NULL, pause_kind = NULL, pause_reason = NULL
WHERE machine_type = %s"""
COUNT_EARLY_DEATH = """
INSERT INTO fleet_targets AS t (machine_type, early_deaths) VALUES (%s, 1)
ON CONFLICT (machine_type) DO UPDATE SET early_deaths = t.early_deaths + 1
RETURNING early_deaths"""
# An agent of the type beats, so its instances boot: early deaths before were not the type's fault.
AGENT_SEEN = """
UPDATE fleet_targets SET early_deaths = 0,
    retry_after = CASE WHEN pause_kind = 'early_deaths' THEN NULL ELSE retry_after END,
    pause_reason = CASE WHEN pause_kind = 'early_deaths' THEN NULL ELSE pause_reason END,
    pause_kind = CASE WHEN pause_kind = 'early_deaths' THEN NULL ELSE pause_kind END
WHERE machine_type = %s AND (early_deaths > 0 OR pause_kind = 'early_deaths')"""


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


def vcpus(machine_type: str) -> int | None:
    """The type's vCPUs from the catalog (what its quota counts), None if unknown."""
    with transaction() as cur:
        cur.execute(SELECT_VCPUS, (machine_type,))
        row = cur.fetchone()
    return int(row["vcpus"]) if row and row["vcpus"] is not None else None


def adopt(inst: LiveInstance, *, price: float, revive_before: datetime | None = None) -> dict[str, Any] | None:
    """Record an instance (one just launched, one the database lost, or one it wrongly had terminated).

    Returns None if nothing changed, else the row's old state and reason (None for a new row).
    """
    params = {
        "id": inst.instance_id,
        "type": inst.machine_type,
        "market": inst.market,
        "subnet": inst.subnet_id,
        "price": price,
        "launched_at": inst.launched_at,
        "revive_before": revive_before,
    }
    with transaction() as cur:
        cur.execute(ADOPT, params)
        row = cur.fetchone()
    return dict(row) if row else None


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


def pause(machine_type: str, *, until: datetime, kind: str, reason: str) -> None:
    """No launches of this type before `until`; kind is capacity, quota, refused or early_deaths."""
    with transaction() as cur:
        cur.execute(PAUSE, {"type": machine_type, "until": until, "kind": kind, "reason": reason})


def count_failure(machine_type: str) -> int:
    """One more launch failure in a row (not capacity); returns how many now."""
    with transaction() as cur:
        cur.execute(COUNT_FAILURE, (machine_type,))
        return int(one(cur)["failures"])


def launched(machine_type: str) -> None:
    """A launch went through: the failures in a row and the pause are over."""
    with transaction() as cur:
        cur.execute(LAUNCHED, (machine_type,))


def count_early_death(machine_type: str) -> int:
    """One more instance of the type died soon after launch; returns how many in a row now."""
    with transaction() as cur:
        cur.execute(COUNT_EARLY_DEATH, (machine_type,))
        return int(one(cur)["early_deaths"])


def agent_seen(machine_type: str) -> None:
    """An agent of the type beats: its early deaths start again from 0, and their pause ends."""
    with transaction() as cur:
        cur.execute(AGENT_SEEN, (machine_type,))

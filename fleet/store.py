"""What the controller reads and records: work waiting, agents, its instances, targets, events."""

from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, TypedDict, cast

import redis

from shared import agents, jobs
from shared.core import tasks
from shared.core.db import Cursor, jsonable, one, transaction

if TYPE_CHECKING:  # the API reads the fleet through this module and must not need boto3
    from fleet.ec2 import LiveInstance


class FleetInstance(TypedDict):
    """A `fleet_instances` row: an EC2 instance the fleet launched or adopted, and what became of it."""

    instance_id: str
    machine_type: str
    market: str  # 'spot' or 'on-demand'
    subnet_id: str | None
    price_usd_per_hour: Decimal  # the most it can cost: the on-demand price
    launched_at: datetime
    idle_since: datetime | None  # set while its type has no work
    state: str  # 'running' or 'terminated'
    terminated_at: datetime | None
    reason: str | None  # why it was terminated


class FleetTarget(TypedDict):
    """A `fleet_targets` row: a type's held count and drain, the controller's last decision, its launch pause."""

    machine_type: str
    held: int | None  # None: follow the work waiting
    drain: bool
    wanted: int
    queued_tasks: int
    waiting_jobs: int
    retry_after: datetime | None
    note: str | None
    decided_at: datetime | None
    updated_at: datetime
    pause_kind: str | None  # capacity, quota, refused or early_deaths
    pause_reason: str | None
    failures: int  # refused launches in a row
    early_deaths: int  # instances dead soon after launch, in a row


class Adopted(TypedDict):
    """What adopt() changed: the row's state and reason before (None for a new row)."""

    old_state: str | None
    old_reason: str | None


# kombu's Redis transport: a message of priority > 0 waits in "<queue>\x06\x16<step>".
PRIORITY_SEP = "\x06\x16"
PRIORITY_STEPS = (3, 6, 9)
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


def queued(broker: redis.Redis, machine_type: str) -> int:
    """Benchmark tasks waiting in bench.<type> (kombu keeps a list per queue and priority step)."""
    name = tasks.bench_queue(machine_type)
    pipe = broker.pipeline(transaction=False)
    for key in [name] + [f"{name}{PRIORITY_SEP}{step}" for step in PRIORITY_STEPS]:
        pipe.llen(key)
    return sum(int(n) for n in pipe.execute())


def waiting_jobs() -> dict[str, int]:
    """Running jobs with benchmarks pending, per machine type."""
    return jobs.waiting_by_machine_type()


def agents_by_instance(instance_ids: list[str], *, alive_after_s: float) -> dict[str, tuple[bool, bool]]:
    """instance id → (an agent on it is alive, it is measuring something)."""
    with transaction() as cur:
        return agents.by_instance(cur, instance_ids=instance_ids, alive_after_s=alive_after_s)


def running() -> dict[str, FleetInstance]:
    """The instances the fleet believes are running, by id."""
    with transaction() as cur:
        cur.execute(SELECT_RUNNING)
        return {r["instance_id"]: cast(FleetInstance, r) for r in cur.fetchall()}


def targets() -> dict[str, FleetTarget]:
    """Held counts, drains and launch pauses, by machine type."""
    with transaction() as cur:
        cur.execute(SELECT_TARGETS)
        return {r["machine_type"]: cast(FleetTarget, r) for r in cur.fetchall()}


def adopt(inst: "LiveInstance", *, price: float, revive_before: datetime | None = None) -> Adopted | None:
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
        return cast(Adopted | None, cur.fetchone())


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


# The API's side (fleet/service.py): what GET /v1/fleet shows, and held counts and drains.
# paused_until: retry_after while it is ahead; pause_kind (capacity, quota, refused, early_deaths) and
# pause_reason say why, failures and early_deaths count them in a row (fleet/health.py).
SELECT_TARGETS_VIEW = """
SELECT *, CASE WHEN retry_after > now() THEN retry_after END AS paused_until
FROM fleet_targets ORDER BY machine_type"""
SELECT_RUNNING_VIEW = """
SELECT instance_id, machine_type, market, subnet_id, price_usd_per_hour, launched_at, idle_since
FROM fleet_instances WHERE state = 'running' ORDER BY machine_type, launched_at"""
SELECT_EVENTS = "SELECT at, machine_type, instance_id, action, detail FROM fleet_events ORDER BY id DESC LIMIT %s"
HOLD = """
INSERT INTO fleet_targets (machine_type, held, drain, updated_at) VALUES (%(type)s, %(held)s, %(drain)s, now())
ON CONFLICT (machine_type) DO UPDATE SET held = EXCLUDED.held, drain = EXCLUDED.drain, updated_at = now()
RETURNING *"""
# Only these columns: the API's role may insert no others (migrations/0014_least_privilege.sql).
INSERT_HOLD_EVENT = "INSERT INTO fleet_events (machine_type, action, detail) VALUES (%s, 'held', %s)"
SELECT_BOOTING = """
SELECT DISTINCT ON (machine_type) machine_type, instance_id FROM fleet_instances
WHERE state = 'running' ORDER BY machine_type, launched_at DESC"""
# The controller writes decided_at on every pass (save_decision); a recent one means it runs.
SELECT_CONTROLLER_LIVE = (
    "SELECT EXISTS (SELECT 1 FROM fleet_targets WHERE decided_at > now() - make_interval(secs => %s))"
)


def target_rows(cur: Cursor) -> list[dict[str, Any]]:
    """Every type's held count, drain, last decision and launch pause (paused_until while ahead), as JSON."""
    cur.execute(SELECT_TARGETS_VIEW)
    return [jsonable(r) for r in cur.fetchall()]


def running_instances(cur: Cursor, *, alive_after_s: float) -> list[dict[str, Any]]:
    """Running instances as JSON, each with whether an agent on it is alive."""
    cur.execute(SELECT_RUNNING_VIEW)
    rows = [jsonable(r) for r in cur.fetchall()]
    alive = agents.by_instance(cur, instance_ids=[r["instance_id"] for r in rows], alive_after_s=alive_after_s)
    return [r | {"agent_alive": alive.get(r["instance_id"], (False, False))[0]} for r in rows]


def recent_events(cur: Cursor, *, limit: int) -> list[dict[str, Any]]:
    """The newest events first, as JSON."""
    cur.execute(SELECT_EVENTS, (limit,))
    return [jsonable(r) for r in cur.fetchall()]


def hold(*, machine_type: str, held: int | None, drain: bool, detail: str) -> dict[str, Any]:
    """Set a type's held count and drain, log it as an event; returns the type's row as JSON."""
    with transaction() as cur:
        cur.execute(HOLD, {"type": machine_type, "held": held, "drain": drain})
        row = jsonable(cur.fetchone() or {})
        cur.execute(INSERT_HOLD_EVENT, (machine_type, detail))
    return row


def booting() -> dict[str, str]:
    """Per machine type, the newest running fleet instance (for 'waiting for an agent' messages)."""
    with transaction() as cur:
        cur.execute(SELECT_BOOTING)
        return {r["machine_type"]: r["instance_id"] for r in cur.fetchall()}


def controller_live(*, within_s: float) -> bool:
    """Whether the controller recorded a decision within the last `within_s` seconds."""
    with transaction() as cur:
        cur.execute(SELECT_CONTROLLER_LIVE, (within_s,))
        row = cur.fetchone()
    return bool(row and row["exists"])

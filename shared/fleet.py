"""The fleet as the API and CLI see it: status from PostgreSQL, held counts and drains."""

from typing import Any

from shared import machines
from shared.agents import ALIVE
from shared.db import Cursor, jsonable, transaction
from shared.errors import InvalidRequest
from shared.settings import get_settings

# paused_until: retry_after while it is ahead; pause_kind (capacity, quota, refused, early_deaths) and
# pause_reason say why, failures and early_deaths count them in a row (gpu_agent/fleet/health.py).
SELECT_TARGETS = """
SELECT *, CASE WHEN retry_after > now() THEN retry_after END AS paused_until
FROM fleet_targets ORDER BY machine_type"""
SELECT_INSTANCES = f"""
SELECT f.instance_id, f.machine_type, f.market, f.subnet_id, f.price_usd_per_hour, f.launched_at, f.idle_since,
       EXISTS (SELECT 1 FROM agents a WHERE a.instance_id = f.instance_id AND {ALIVE}) AS agent_alive
FROM fleet_instances f WHERE f.state = 'running' ORDER BY f.machine_type, f.launched_at"""
SELECT_EVENTS = "SELECT at, machine_type, instance_id, action, detail FROM fleet_events ORDER BY id DESC LIMIT %s"
HOLD = """
INSERT INTO fleet_targets (machine_type, held, drain, updated_at) VALUES (%(type)s, %(held)s, %(drain)s, now())
ON CONFLICT (machine_type) DO UPDATE SET held = EXCLUDED.held, drain = EXCLUDED.drain, updated_at = now()
RETURNING *"""
INSERT_EVENT = "INSERT INTO fleet_events (machine_type, action, detail) VALUES (%s, %s, %s)"


def status(*, events: int = 20) -> dict[str, Any]:
    """Limits, per-type targets, decisions and launch pauses, running instances, recent events, spend rate."""
    s = get_settings()
    with transaction() as cur:
        cur.execute(SELECT_TARGETS)
        targets = [jsonable(r) for r in cur.fetchall()]
        instances = _instances(cur, s.agent_alive_after_s)
        cur.execute(SELECT_EVENTS, (events,))
        recent = [jsonable(r) for r in cur.fetchall()]
    return {
        "enabled": s.fleet_enabled,
        "fleet": s.fleet_name,
        "region": s.fleet_region,
        "limits": {
            "max_per_type": s.fleet_max_per_type,
            "max_usd_per_hour": s.fleet_max_usd_per_hour,
            "max_lifetime_s": s.fleet_max_lifetime_s,
            "idle_s": s.fleet_idle_s,
            "boot_grace_s": s.fleet_boot_grace_s,
            "capacity_retry_s": s.fleet_capacity_retry_s,
            "backoff_s": s.fleet_backoff_s,
            "backoff_max_s": s.fleet_backoff_max_s,
            "early_death_s": s.fleet_early_death_s,
            "early_deaths": s.fleet_early_deaths,
        },
        "usd_per_hour": round(sum(i["price_usd_per_hour"] for i in instances), 4),
        "types": targets,
        "instances": instances,
        "events": recent,
    }


def _instances(cur: Cursor, alive_after_s: float) -> list[dict[str, Any]]:
    cur.execute(SELECT_INSTANCES, {"alive_after": alive_after_s})
    return [jsonable(r) for r in cur.fetchall()]


def running_instances(cur: Cursor) -> list[dict[str, Any]]:
    """The fleet's running instances: id, machine type, market, price per hour, launch time, agent alive."""
    return _instances(cur, get_settings().agent_alive_after_s)


def hold(*, machine_type: str, count: int | None) -> dict[str, Any]:
    """Hold a type at `count` agents (None: follow the work again); ends a drain."""
    return _set(machine_type, held=count, drain=False, detail=f"held at {count}" if count is not None else "automatic")


def drain(*, machine_type: str) -> dict[str, Any]:
    """Terminate every instance of a type now (agents finish their window and requeue the rest) and hold it at 0."""
    return _set(machine_type, held=0, drain=True, detail="drain: terminate all, hold at 0")


def _set(machine_type: str, *, held: int | None, drain: bool, detail: str) -> dict[str, Any]:
    machine = machines.get_by_name(name=machine_type)
    if machine["provider"] != "aws":
        raise InvalidRequest(
            f"{machine_type} is not an AWS machine type: the fleet only starts AWS instances", machine=machine_type
        )
    if held is not None and held > get_settings().fleet_max_per_type:
        raise InvalidRequest(
            f"{held} agents is over FLEET_MAX_PER_TYPE={get_settings().fleet_max_per_type}", machine=machine_type
        )
    with transaction() as cur:
        cur.execute(HOLD, {"type": machine_type, "held": held, "drain": drain})
        row = jsonable(cur.fetchone() or {})
        cur.execute(INSERT_EVENT, (machine_type, "held", detail))
    return row


SELECT_BOOTING = """
SELECT DISTINCT ON (machine_type) machine_type, instance_id FROM fleet_instances
WHERE state = 'running' ORDER BY machine_type, launched_at DESC"""


def booting() -> dict[str, str]:
    """Per machine type, the newest running fleet instance (for 'waiting for an agent' messages)."""
    with transaction() as cur:
        cur.execute(SELECT_BOOTING)
        return {r["machine_type"]: r["instance_id"] for r in cur.fetchall()}


# The controller writes decided_at on every pass (gpu_agent/fleet/store.py); a recent one means it runs.
SELECT_CONTROLLER_LIVE = (
    "SELECT EXISTS (SELECT 1 FROM fleet_targets WHERE decided_at > now() - make_interval(secs => %s))"
)


def enabled() -> bool:
    """Whether queued benchmarks of an AWS type get an agent: FLEET_ENABLED here, or a controller passing."""
    s = get_settings()
    if s.fleet_enabled:
        return True
    with transaction() as cur:
        cur.execute(SELECT_CONTROLLER_LIVE, (max(s.fleet_every_s * 4, 120.0),))
        row = cur.fetchone()
    return bool(row and row["exists"])

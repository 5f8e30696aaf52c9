"""The fleet as the API and CLI see it: status from PostgreSQL, held counts and drains."""

from typing import Any

from fleet import store
from shared import machine_types
from shared.core.db import Cursor, transaction
from shared.core.errors import InvalidRequest
from shared.core.settings import get_settings


def status(*, events: int = 20) -> dict[str, Any]:
    """Limits, per-type targets, decisions and launch pauses, running instances, recent events, spend rate."""
    s = get_settings()
    with transaction() as cur:
        targets = store.target_rows(cur)
        instances = store.running_instances(cur, alive_after_s=s.agent_alive_after_s)
        recent = store.recent_events(cur, limit=events)
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


def running_instances(cur: Cursor) -> list[dict[str, Any]]:
    """The fleet's running instances: id, machine type, market, price per hour, launch time, agent alive."""
    return store.running_instances(cur, alive_after_s=get_settings().agent_alive_after_s)


def hold(*, machine_type: str, count: int | None) -> dict[str, Any]:
    """Hold a type at `count` agents (None: follow the work again); ends a drain."""
    return _set(machine_type, held=count, drain=False, detail=f"held at {count}" if count is not None else "automatic")


def drain(*, machine_type: str) -> dict[str, Any]:
    """Terminate every instance of a type now (agents finish their window and requeue the rest) and hold it at 0."""
    return _set(machine_type, held=0, drain=True, detail="drain: terminate all, hold at 0")


def _set(machine_type: str, *, held: int | None, drain: bool, detail: str) -> dict[str, Any]:
    info = machine_types.get_by_name(name=machine_type)
    if info["provider"] != "aws":
        raise InvalidRequest(
            f"{machine_type} is not an AWS machine type: the fleet only starts AWS instances", machine_type=machine_type
        )
    if held is not None and held > get_settings().fleet_max_per_type:
        raise InvalidRequest(
            f"{held} agents is over FLEET_MAX_PER_TYPE={get_settings().fleet_max_per_type}", machine_type=machine_type
        )
    return store.hold(machine_type=machine_type, held=held, drain=drain, detail=detail)


def booting() -> dict[str, str]:
    """Per machine type, the newest running fleet instance (for 'waiting for an agent' messages)."""
    return store.booting()


def enabled() -> bool:
    """Whether queued benchmarks of an AWS type get an agent: FLEET_ENABLED here, or a controller passing."""
    s = get_settings()
    return s.fleet_enabled or store.controller_live(within_s=max(s.fleet_every_s * 4, 120.0))

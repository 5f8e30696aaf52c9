"""Instances that die soon after launch: keep their console output, count them, pause their type."""

import logging
from datetime import datetime, timedelta
from typing import Any

from fleet import lookup, store
from fleet.policy import Limits

log = logging.getLogger(__name__)
KIND_NAMES = {
    "capacity": "no capacity",
    "quota": "vCPU quota too low",
    "refused": "launch refused",
    "early_deaths": "instances died early",
}


def keep_console(ec2_client: Any, machine_type: str, instance_id: str) -> None:
    """Record the instance's last console lines as a console_output event; a failure is recorded, never raised."""
    try:
        text = lookup.console_tail(ec2_client, instance_id)
    except Exception as exc:  # the termination that follows matters more than the log
        log.warning("console output of %s: %s", instance_id, exc)
        text = f"(console output unavailable: {type(exc).__name__}: {str(exc)[:300]})"
    store.event(machine_type, "console_output", text or "(no console output yet)", instance_id=instance_id)


def died(limits: Limits, machine_type: str, instance_id: str, *, age_s: float, now: datetime) -> bool:
    """An instance was orphaned or went `age_s` after launch: early deaths in a row pause its type (True)."""
    if age_s > limits.early_death_s:
        return False
    n = store.count_early_death(machine_type)
    if n < limits.early_deaths:
        return False
    minutes = limits.early_death_s / 60
    reason = (
        f"{n} instances died within {minutes:.0f} min of launch (boot failure?): see the console output in the "
        f"events, or `aws ec2 get-console-output --latest --output text --instance-id {instance_id}`"
    )
    # The first pause at the threshold, then doubling with each further early death.
    until = now + timedelta(seconds=limits.backoff(n - limits.early_deaths + 1))
    store.pause(machine_type, until=until, kind="early_deaths", reason=reason)
    store.event(machine_type, "early_deaths", f"{reason}; launches paused until {until:%Y-%m-%d %H:%M:%S} UTC")
    log.warning("%s: %s", machine_type, reason)
    return True


def pause_note(target: store.FleetTarget) -> str:
    """The decision note of a paused type: until when, and which kind of failure."""
    until = target["retry_after"]
    kind = KIND_NAMES.get(target["pause_kind"] or "", "a launch failure")
    return f"launches paused until {until:%H:%M:%S} UTC ({kind})"

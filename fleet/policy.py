"""What the fleet should do, from what it sees: a pure function, so every rule is testable alone."""

import math
from dataclasses import dataclass, field
from datetime import datetime

from shared.core.settings import Settings


@dataclass(frozen=True)
class Limits:
    """The limits no decision may cross."""

    max_per_type: int
    max_usd_per_hour: float
    max_lifetime_s: float
    idle_s: float
    boot_grace_s: float
    tasks_per_agent: int
    backoff_s: float = 300.0  # first pause after a refused launch or early deaths; doubles each time
    backoff_max_s: float = 4 * 3600
    early_death_s: float = 1200.0  # orphaned or gone this soon after launch: an early death
    early_deaths: int = 2  # early deaths in a row that pause the type
    gone_grace_s: float = 300.0  # EC2 lists new instances late: none is gone before this age

    @classmethod
    def from_settings(cls, s: Settings) -> "Limits":
        """The FLEET_* limits."""
        return cls(
            max_per_type=s.fleet_max_per_type,
            max_usd_per_hour=s.fleet_max_usd_per_hour,
            max_lifetime_s=s.fleet_max_lifetime_s,
            idle_s=s.fleet_idle_s,
            boot_grace_s=s.fleet_boot_grace_s,
            tasks_per_agent=s.fleet_tasks_per_agent,
            backoff_s=s.fleet_backoff_s,
            backoff_max_s=s.fleet_backoff_max_s,
            early_death_s=s.fleet_early_death_s,
            early_deaths=s.fleet_early_deaths,
            gone_grace_s=s.fleet_gone_grace_s,
        )

    def backoff(self, failures: int) -> float:
        """Seconds to pause after `failures` consecutive failures: backoff_s doubling, at most backoff_max_s."""
        return float(min(self.backoff_s * 2 ** max(0, min(failures, 64) - 1), self.backoff_max_s))


@dataclass(frozen=True)
class Instance:
    """A live fleet instance and what its agent is doing."""

    instance_id: str
    launched_at: datetime
    price: float
    agent_alive: bool
    agent_busy: bool
    idle_since: datetime | None  # when its agent was first seen idle in this idle spell


@dataclass(frozen=True)
class TypeState:
    """One machine type as the controller sees it on this pass."""

    machine_type: str
    price: float  # on-demand, dollars per hour: the most an instance of it can cost
    queued: int  # benchmark tasks in bench.<type>
    waiting_jobs: int  # running jobs with benchmarks pending on this type
    instances: list[Instance]
    held: int | None = None
    drain: bool = False
    launchable: bool = True  # a launch template or AMI is configured
    paused: bool = False  # a launch failure or early deaths asked to wait before the next launch
    pause_note: str = ""  # until when and why, for the decision's note


@dataclass
class Decision:
    """What to do for one machine type, and why not more."""

    wanted: int
    launch: int = 0
    terminate: list[tuple[str, str]] = field(default_factory=list)  # (instance id, reason)
    orphans: set[str] = field(default_factory=set)  # of those, the ones whose agent never beat in time
    notes: list[str] = field(default_factory=list)


def wanted(state: TypeState, limits: Limits) -> int:
    """Agents wanted: the held count, else one per tasks_per_agent queued tasks, one while any job waits."""
    if state.drain:
        return 0
    if state.held is not None:
        return state.held
    if state.queued == 0 and state.waiting_jobs == 0:
        return 0
    return max(1, math.ceil(state.queued / max(1, limits.tasks_per_agent)))


def decide(states: list[TypeState], limits: Limits, now: datetime) -> dict[str, Decision]:
    """Terminations first (limits, orphans, drain, idle surplus), then launches within the budget."""
    decisions: dict[str, Decision] = {}
    keep: dict[str, list[Instance]] = {}
    for st in states:
        want = wanted(st, limits)
        d = Decision(wanted=want)
        if want > limits.max_per_type:
            d.notes.append(f"wants {want}, limited to {limits.max_per_type} per type")
            d.wanted = want = limits.max_per_type
        remaining = []
        for inst in st.instances:
            age = (now - inst.launched_at).total_seconds()
            if st.drain:
                d.terminate.append((inst.instance_id, "drained by an operator"))
            elif age > limits.max_lifetime_s:
                d.terminate.append((inst.instance_id, f"reached the maximum lifetime ({limits.max_lifetime_s:.0f} s)"))
            elif not inst.agent_alive and age > limits.boot_grace_s:
                d.terminate.append(
                    (inst.instance_id, f"orphan: no agent heartbeat {age:.0f} s after launch "
                     f"(boot grace {limits.boot_grace_s:.0f} s)")
                )  # fmt: skip
                d.orphans.add(inst.instance_id)
            else:
                remaining.append(inst)
        surplus = len(remaining) - want
        if surplus > 0:
            # An instance still booting counts as idle since its launch: work that vanished
            # should not keep it alive for a full idle period after it comes up.
            idle = sorted((i for i in remaining if not i.agent_busy), key=lambda i: _idle_since(i, now))
            for inst in idle[:surplus]:
                if (now - _idle_since(inst, now)).total_seconds() >= limits.idle_s:
                    d.terminate.append((inst.instance_id, f"idle for {limits.idle_s:.0f} s with no work"))
                    remaining.remove(inst)
        keep[st.machine_type] = remaining
        decisions[st.machine_type] = d
    _launches(states, decisions, keep, limits)
    return decisions


def _idle_since(inst: Instance, now: datetime) -> datetime:
    return (inst.idle_since if inst.agent_alive else inst.launched_at) or now


def _launches(
    states: list[TypeState], decisions: dict[str, Decision], keep: dict[str, list[Instance]], limits: Limits
) -> None:
    spend = sum(i.price for insts in keep.values() for i in insts)
    # The budget goes first to the types with the most work waiting.
    for st in sorted(states, key=lambda s: (-s.queued, -s.waiting_jobs, s.machine_type)):
        d = decisions[st.machine_type]
        missing = d.wanted - len(keep[st.machine_type])
        if missing <= 0:
            continue
        if not st.launchable:
            d.notes.append("no launch template or AMI configured for this type")
            continue
        if st.paused:
            d.notes.append(st.pause_note or "launches paused after a launch failure")
            continue
        for _ in range(missing):
            if spend + st.price > limits.max_usd_per_hour:
                d.notes.append(
                    f"budget: ${spend:.2f}/h running, one more at ${st.price:.2f}/h would pass the "
                    f"${limits.max_usd_per_hour:.2f}/h cap"
                )
                break
            spend += st.price
            d.launch += 1

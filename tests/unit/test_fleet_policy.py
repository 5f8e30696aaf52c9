"""The fleet's decision rules, one at a time (the controller tests run them against moto)."""

from datetime import UTC, datetime, timedelta

from fleet.policy import Instance, Limits, TypeState, decide, wanted

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
LIMITS = Limits(
    max_per_type=3, max_usd_per_hour=5.0, max_lifetime_s=3600, idle_s=600, boot_grace_s=900, tasks_per_agent=100
)


def inst(
    iid: str, *, age_s: float = 60, alive: bool = True, busy: bool = False, idle_s: float | None = None
) -> Instance:
    """An instance launched age_s ago; idle for idle_s if given."""
    idle_since = NOW - timedelta(seconds=idle_s) if idle_s is not None else None
    return Instance(iid, NOW - timedelta(seconds=age_s), 1.0, alive, busy, idle_since)


def state(machine_type: str = "g5.xlarge", **kw: object) -> TypeState:
    """A type with no work and no instances unless given."""
    base: dict[str, object] = {"price": 1.0, "queued": 0, "waiting_jobs": 0, "instances": []}
    return TypeState(machine_type=machine_type, **(base | kw))  # type: ignore[arg-type]


def test_wanted_follows_the_work() -> None:
    """No work → 0; any work → at least 1; one more per tasks_per_agent queued tasks; held wins; drain is 0."""
    assert wanted(state(), LIMITS) == 0
    assert wanted(state(waiting_jobs=1), LIMITS) == 1
    assert wanted(state(queued=1), LIMITS) == 1
    assert wanted(state(queued=250), LIMITS) == 3
    assert wanted(state(queued=250, held=1), LIMITS) == 1
    assert wanted(state(held=2), LIMITS) == 2
    assert wanted(state(queued=250, held=2, drain=True), LIMITS) == 0


def test_launches_up_to_the_per_type_limit() -> None:
    """Work for 10 agents launches 3, and says why not more."""
    d = decide([state(queued=1000)], LIMITS, NOW)["g5.xlarge"]
    assert d.launch == 3 and d.wanted == 3
    assert "limited to 3 per type" in d.notes[0]


def test_budget_counts_running_instances_of_every_type() -> None:
    """$5/h cap: 2 running elsewhere at $1 + 3 wanted at $1.2 → only 2 launch."""
    other = state("g4dn.xlarge", queued=5, instances=[inst("i-a"), inst("i-b")], held=2)
    d = decide([state(queued=300, price=1.2), other], LIMITS, NOW)
    assert d["g5.xlarge"].launch == 2 and d["g4dn.xlarge"].launch == 0
    assert any("budget" in n for n in d["g5.xlarge"].notes)


def test_unlaunchable_and_paused_types_do_not_launch() -> None:
    """No AMI/template, or a capacity pause: nothing launched, the note says which."""
    d = decide([state(queued=5, launchable=False), state("g6.xlarge", queued=5, paused=True)], LIMITS, NOW)
    assert d["g5.xlarge"].launch == 0 and "no launch template or AMI" in d["g5.xlarge"].notes[0]
    assert d["g6.xlarge"].launch == 0 and "paused" in d["g6.xlarge"].notes[0]


def test_lifetime_orphans_and_drain_terminate() -> None:
    """Past the lifetime, no heartbeat past the boot grace, or drained: terminated, with the reason."""
    old, orphan, booting = (
        inst("i-old", age_s=3601, busy=True),
        inst("i-orph", age_s=901, alive=False),
        inst("i-boot", age_s=100, alive=False),
    )
    d = decide([state(queued=5, instances=[old, orphan, booting])], LIMITS, NOW)["g5.xlarge"]
    reasons = dict(d.terminate)
    assert set(reasons) == {"i-old", "i-orph"}
    assert "maximum lifetime" in reasons["i-old"] and "orphan" in reasons["i-orph"]
    assert d.launch == 0  # one agent wanted, and the booting instance will be it
    drained = decide([state(queued=5, drain=True, instances=[inst("i-1", busy=True)])], LIMITS, NOW)["g5.xlarge"]
    assert drained.terminate == [("i-1", "drained by an operator")] and drained.launch == 0


def test_idle_surplus_goes_only_after_the_idle_period() -> None:
    """No work: an agent idle 599 s stays, one idle 600 s goes; a busy one stays whatever the surplus."""
    d = decide(
        [state(instances=[inst("i-1", idle_s=599), inst("i-2", idle_s=600), inst("i-3", busy=True)])], LIMITS, NOW
    )
    assert d["g5.xlarge"].terminate == [("i-2", "idle for 600 s with no work")]


def test_idle_surplus_keeps_what_the_work_needs() -> None:
    """Work for 1 agent and 2 idle ones: the longer idle one goes, one stays."""
    d = decide([state(queued=3, instances=[inst("i-1", idle_s=700), inst("i-2", idle_s=900)])], LIMITS, NOW)
    assert [iid for iid, _ in d["g5.xlarge"].terminate] == ["i-2"]


def test_backoff_doubles_from_the_base_to_the_cap() -> None:
    """300 s after the first failure, 600 s after the second, …, never more than the cap."""
    lim = Limits(**(LIMITS.__dict__ | {"backoff_s": 300, "backoff_max_s": 4000}))
    assert [lim.backoff(n) for n in (1, 2, 3, 4, 5, 1000)] == [300, 600, 1200, 2400, 4000, 4000]


def test_orphans_are_marked_for_the_early_death_count() -> None:
    """Of the terminations, only the instance with no heartbeat after the boot grace is an orphan."""
    old, orphan = inst("i-old", age_s=3601, busy=True), inst("i-orph", age_s=901, alive=False)
    d = decide([state(queued=5, instances=[old, orphan])], LIMITS, NOW)["g5.xlarge"]
    assert d.orphans == {"i-orph"} and {iid for iid, _ in d.terminate} == {"i-old", "i-orph"}


def test_a_paused_type_says_until_when_and_why() -> None:
    """The pause note given by the controller is the decision's note."""
    note = "launches paused until 12:05:00 UTC (vCPU quota too low)"
    d = decide([state(queued=5, paused=True, pause_note=note)], LIMITS, NOW)["g5.xlarge"]
    assert d.launch == 0 and d.notes == [note]

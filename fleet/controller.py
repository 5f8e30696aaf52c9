"""One pass of the fleet controller: look (EC2, Redis, PostgreSQL), decide, act, record why."""

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import redis

from fleet import ec2, health, lookup, store
from fleet.policy import Decision, Instance, Limits, TypeState, decide
from shared import machine_types
from shared.core import logs, tasks
from shared.core.errors import CapacityShort, FleetError, QuotaShort
from shared.core.settings import get_settings

log = logging.getLogger(__name__)


@dataclass
class Controller:
    """The controller with its clients; `tick()` is one pass."""

    ec2_client: Any
    broker: redis.Redis
    cfg: ec2.LaunchConfig
    limits: Limits

    @classmethod
    def from_settings(cls, ec2_client: Any = None) -> "Controller":
        """A controller configured by FLEET_* settings, with a boto3 client unless one is given."""
        s = get_settings()
        if ec2_client is None:
            import boto3

            ec2_client = boto3.client("ec2", region_name=s.fleet_region)
        return cls(
            ec2_client=ec2_client,
            broker=tasks.redis_client(),  # verifies TLS as every process does
            cfg=ec2.LaunchConfig.from_settings(s),
            limits=Limits.from_settings(s),
        )

    def tick(self, now: datetime | None = None) -> dict[str, Decision]:
        """Reconcile the database with EC2, decide, terminate, launch; returns the decisions."""
        now = now or datetime.now(UTC)
        prices = machine_types.aws_prices()
        live = {i.instance_id: i for i in ec2.list_live(self.ec2_client, self.cfg.fleet)}
        rows = self._sync(live, prices, now)
        states = self._observe(rows, live, prices, now)
        decisions = decide(states, self.limits, now)
        by_type = {s.machine_type: s for s in states}
        for machine_type, d in decisions.items():
            with logs.context(machine_type=machine_type):
                self._act(machine_type, d, rows, prices, by_type[machine_type], now)
        return decisions

    def _act(
        self, machine_type: str, d: Decision, rows: dict[str, store.FleetInstance], prices: dict[str, float],
        st: TypeState, now: datetime,
    ) -> None:  # fmt: skip
        """Terminate and launch what one type's decision says, and record the decision."""
        if self._terminate(machine_type, d, rows, now) and d.launch:
            d.notes.append("launches paused: instances of this type die soon after launch")
            d.launch = 0
        for _ in range(d.launch):
            if not self._launch(machine_type, prices[machine_type], now):
                break
        note = "; ".join(d.notes) or None
        if d.wanted or st.instances or st.queued or st.waiting_jobs or note or st.held is not None:
            store.save_decision(machine_type, wanted=d.wanted, queued=st.queued, waiting=st.waiting_jobs, note=note)

    def _sync(
        self, live: dict[str, ec2.LiveInstance], prices: dict[str, float], now: datetime
    ) -> dict[str, store.FleetInstance]:
        """Make the database agree with EC2; returns the running instances' rows after that."""
        known = store.running()
        changed = False
        for iid, inst in live.items():
            if iid not in known and inst.machine_type in prices:
                # Launched by a pass whose database write failed, by an earlier database, or wrongly
                # taken for gone: count it, or the limits would not see it and nothing would end it.
                revive_before = now - timedelta(seconds=self.limits.gone_grace_s)
                before = store.adopt(inst, price=prices[inst.machine_type], revive_before=revive_before)
                if before is None:
                    continue
                changed = True
                detail = "found in EC2 by tag, not in the database"
                if before["old_state"] == "terminated":
                    detail = (
                        f"EC2 lists it as live, the database had it terminated ({before['old_reason']}): counted again"
                    )
                store.event(inst.machine_type, "adopted", detail, instance_id=iid)
        for iid, row in known.items():
            if iid not in live and self._gone(iid, row, now):
                changed = True
        return store.running() if changed else known

    def _gone(self, iid: str, row: store.FleetInstance, now: datetime) -> bool:
        """Mark an instance the tag listing missed as gone, if EC2 asked by its id agrees it is."""
        age = (now - row["launched_at"]).total_seconds()
        if age <= self.limits.gone_grace_s:
            return False  # EC2 lists a new instance late (eventual consistency): not gone, not yet
        try:
            state, why = lookup.state(self.ec2_client, iid)
        except Exception:  # throttled, or not allowed: ask again next pass; never guess "gone"
            log.exception("describing %s by id failed", iid)
            return False
        if state not in lookup.GONE_STATES:
            return False  # alive, the listing was stale (or its tags were changed)
        how = f"{state}, {why}" if why else state
        reason = f"gone from EC2 ({how}): spot interruption, agent exit, or terminated outside Traincast"
        store.terminated(iid, reason=reason)
        store.event(row["machine_type"], "gone", reason, instance_id=iid)
        if why != lookup.SPOT_INTERRUPTION and age <= self.limits.early_death_s:
            health.keep_console(self.ec2_client, row["machine_type"], iid)  # EC2 keeps it a while after the end
            health.died(self.limits, row["machine_type"], iid, age_s=age, now=now)
        return True

    def _observe(
        self,
        rows: dict[str, store.FleetInstance],
        live: dict[str, ec2.LiveInstance],
        prices: dict[str, float],
        now: datetime,
    ) -> list[TypeState]:
        agents = store.agents_by_instance(list(rows), alive_after_s=get_settings().agent_alive_after_s)
        waiting = store.waiting_jobs()
        targets = store.targets()
        states = []
        for machine_type, price in sorted(prices.items()):
            instances = []
            for iid, row in rows.items():
                if row["machine_type"] != machine_type:
                    continue
                alive, busy = agents.get(iid, (False, False))
                idle = alive and not busy
                store.set_idle(iid, idle=idle)
                instances.append(
                    Instance(
                        instance_id=iid,
                        launched_at=live[iid].launched_at if iid in live else row["launched_at"],
                        price=float(row["price_usd_per_hour"]),
                        agent_alive=alive,
                        agent_busy=busy,
                        idle_since=(row["idle_since"] or now) if idle else None,
                    )
                )
            target = targets.get(machine_type)  # None: no row yet, nothing held, paused or counted
            early = target is not None and (target["early_deaths"] or target["pause_kind"] == "early_deaths")
            if early and any(i.agent_alive for i in instances):
                store.agent_seen(machine_type)
                target = store.targets().get(machine_type)
            until = target["retry_after"] if target else None
            paused = target is not None and until is not None and until > now
            states.append(
                TypeState(
                    machine_type=machine_type,
                    price=price,
                    queued=store.queued(self.broker, machine_type),
                    waiting_jobs=waiting.get(machine_type, 0),
                    instances=instances,
                    held=target["held"] if target else None,
                    drain=bool(target and target["drain"]),
                    launchable=self.cfg.can_launch(machine_type),
                    paused=paused,
                    pause_note=health.pause_note(target) if target and paused else "",
                )
            )
        return states

    def _terminate(self, machine_type: str, d: Decision, rows: dict[str, store.FleetInstance], now: datetime) -> bool:
        """Terminate what the decision says; True if its early deaths paused the type just now."""
        if not d.terminate:
            return False
        for iid in d.orphans:
            # Its boot log dies with it: keep the console's last lines first.
            health.keep_console(self.ec2_client, machine_type, iid)
        try:
            ec2.terminate(self.ec2_client, [iid for iid, _ in d.terminate])
        except Exception as exc:  # the next pass tries again; the loop must keep going
            store.event(machine_type, "terminate_failed", f"{type(exc).__name__}: {exc}")
            log.exception("terminating %s failed", [iid for iid, _ in d.terminate])
            return False
        for iid, reason in d.terminate:
            store.terminated(iid, reason=reason)
            store.event(machine_type, "terminated", reason, instance_id=iid)
            log.info("terminated %s (%s): %s", iid, machine_type, reason, extra={"instance_id": iid})
        paused = False
        for iid in d.orphans:
            age = (now - rows[iid]["launched_at"]).total_seconds()
            paused = health.died(self.limits, machine_type, iid, age_s=age, now=now) or paused
        return paused

    def _launch(self, machine_type: str, price: float, now: datetime) -> bool:
        try:
            got = ec2.launch(
                self.ec2_client, machine_type, self.cfg, max_price=price, vcpus=machine_types.vcpus(name=machine_type)
            )
        except FleetError as exc:
            if isinstance(exc, CapacityShort):
                kind, failures = "capacity", 0
                until = now + timedelta(seconds=get_settings().fleet_capacity_retry_s)
            else:
                kind = "quota" if isinstance(exc, QuotaShort) else "refused"
                failures = store.count_failure(machine_type)
                until = now + timedelta(seconds=self.limits.backoff(failures))
            store.pause(machine_type, until=until, kind=kind, reason=exc.detail)
            action = {"capacity": "capacity_short", "quota": "quota_short", "refused": "launch_failed"}[kind]
            again = f" ({failures} in a row)" if failures else ""
            store.event(machine_type, action, f"{exc.detail}; next try after {until:%Y-%m-%d %H:%M:%S} UTC{again}")
            log.warning("launch of %s failed: %s", machine_type, exc.detail)
            return False
        store.adopt(
            ec2.LiveInstance(got.instance_id, machine_type, now, got.market, got.subnet_id),
            price=price,
        )
        store.launched(machine_type)
        for skip in got.skipped:
            action = "quota_short" if skip.kind == "quota" else skip.kind
            store.event(
                machine_type, action, f"{skip.detail}; launched {got.market} instead", instance_id=got.instance_id
            )
        iid = got.instance_id
        where = f"{got.market} in {got.subnet_id or 'default subnet'}"
        store.event(machine_type, "launched", where, instance_id=got.instance_id)
        log.info("launched %s (%s, %s)", got.instance_id, machine_type, got.market, extra={"instance_id": iid})
        return True

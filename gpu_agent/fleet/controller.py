"""One pass of the fleet controller: look (EC2, Redis, PostgreSQL), decide, act, record why."""

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import redis

from gpu_agent.fleet import ec2, store
from gpu_agent.fleet.policy import Decision, Instance, Limits, TypeState, decide
from shared.errors import CapacityShort, FleetError
from shared.settings import get_settings

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
            broker=redis.Redis.from_url(s.redis_url),
            cfg=ec2.LaunchConfig.from_settings(s),
            limits=Limits.from_settings(s),
        )

    def tick(self, now: datetime | None = None) -> dict[str, Decision]:
        """Reconcile the database with EC2, decide, terminate, launch; returns the decisions."""
        now = now or datetime.now(UTC)
        prices = store.aws_types()
        live = {i.instance_id: i for i in ec2.list_live(self.ec2_client, self.cfg.fleet)}
        rows = self._sync(live, prices)
        states = self._observe(rows, live, prices, now)
        decisions = decide(states, self.limits, now)
        by_type = {s.machine_type: s for s in states}
        for machine_type, d in decisions.items():
            self._terminate(machine_type, d)
            for _ in range(d.launch):
                if not self._launch(machine_type, prices[machine_type], now):
                    break
            st = by_type[machine_type]
            note = "; ".join(d.notes) or None
            if d.wanted or st.instances or st.queued or st.waiting_jobs or note or st.held is not None:
                store.save_decision(machine_type, wanted=d.wanted, queued=st.queued, waiting=st.waiting_jobs, note=note)
        return decisions

    def _sync(self, live: dict[str, ec2.LiveInstance], prices: dict[str, float]) -> dict[str, dict[str, Any]]:
        """Make the database agree with EC2; returns the running instances' rows after that."""
        known = store.running()
        for iid, inst in live.items():
            if iid not in known and inst.machine_type in prices:
                # Launched by a pass whose database write failed, or by an earlier database: count
                # it, or the limits would not see it.
                store.adopt(inst, price=prices[inst.machine_type])
                store.event(inst.machine_type, "adopted", "found in EC2 by tag, not in the database", instance_id=iid)
        for iid, row in known.items():
            if iid not in live:
                reason = "gone from EC2 (spot interruption, or terminated outside Traincast)"
                store.terminated(iid, reason=reason)
                store.event(row["machine_type"], "gone", reason, instance_id=iid)
        return store.running() if known.keys() != live.keys() else known

    def _observe(
        self,
        rows: dict[str, dict[str, Any]],
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
            target = targets.get(machine_type, {})
            retry_after = target.get("retry_after")
            states.append(
                TypeState(
                    machine_type=machine_type,
                    price=price,
                    queued=store.queued(self.broker, machine_type),
                    waiting_jobs=waiting.get(machine_type, 0),
                    instances=instances,
                    held=target.get("held"),
                    drain=bool(target.get("drain")),
                    launchable=self.cfg.can_launch(machine_type),
                    paused=retry_after is not None and retry_after > now,
                )
            )
        return states

    def _terminate(self, machine_type: str, d: Decision) -> None:
        if not d.terminate:
            return
        try:
            ec2.terminate(self.ec2_client, [iid for iid, _ in d.terminate])
        except Exception as exc:  # the next pass tries again; the loop must keep going
            store.event(machine_type, "terminate_failed", f"{type(exc).__name__}: {exc}")
            log.exception("terminating %s failed", [iid for iid, _ in d.terminate])
            return
        for iid, reason in d.terminate:
            store.terminated(iid, reason=reason)
            store.event(machine_type, "terminated", reason, instance_id=iid)
            log.info("terminated %s (%s): %s", iid, machine_type, reason)

    def _launch(self, machine_type: str, price: float, now: datetime) -> bool:
        try:
            got = ec2.launch(self.ec2_client, machine_type, self.cfg, max_price=price)
        except FleetError as exc:
            until = now + timedelta(seconds=get_settings().fleet_capacity_retry_s)
            store.pause(machine_type, until=until)
            action = "capacity_short" if isinstance(exc, CapacityShort) else "launch_failed"
            store.event(machine_type, action, f"{exc.detail}; next try after {until:%H:%M:%S} UTC")
            log.warning("launch of %s failed: %s", machine_type, exc.detail)
            return False
        store.adopt(
            ec2.LiveInstance(got.instance_id, machine_type, now, got.market, got.subnet_id),
            price=price,
        )
        where = f"{got.market} in {got.subnet_id or 'default subnet'}"
        store.event(machine_type, "launched", where, instance_id=got.instance_id)
        log.info("launched %s (%s, %s)", got.instance_id, machine_type, got.market)
        return True

"""The fleet controller against moto's EC2 with real PostgreSQL and Redis: launches, limits, scale-down."""

from datetime import UTC, datetime, timedelta

from fleet import ec2
from fleet import service as fleet
from shared import jobs
from tests.support.fleetkit import (  # noqa: F401 - stop_test_agents is an autouse fixture
    ShortOfCapacity,
    agent_on,
    aws,
    controller,
    events,
    fleet_row,
    instances,
    stop_test_agents,
)
from tests.support.jobflow import submit
from worker import planning


def waiting_job(machine_type: str = "g5.xlarge") -> str:
    """A job whose benchmarks wait in bench.<machine>."""
    job = submit(machines=[machine_type], wait_for_benchmarks=True)
    planning.plan_job(job["id"])
    return str(job["id"])


def later(seconds: float) -> datetime:
    """A pass this many seconds from now."""
    return datetime.now(UTC) + timedelta(seconds=seconds)


def test_launches_one_agent_where_work_waits_and_only_one(clean_db: None) -> None:
    """Work on g5.xlarge → one tagged spot instance with the agent's user data; a second pass adds none."""
    waiting_job()
    with aws() as (client, cfg):
        ctl = controller(client, cfg)
        d = ctl.tick()
        assert d["g5.xlarge"].launch == 1 and d["g4dn.xlarge"].launch == 0
        [inst] = instances(client, cfg)
        tags = {t["Key"]: t["Value"] for t in inst["Tags"]}
        assert tags["app"] == "traincast" and tags["traincast:machine-type"] == "g5.xlarge"
        assert inst["InstanceType"] == "g5.xlarge" and inst["SubnetId"] == cfg.subnets[0]
        row = fleet_row(inst["InstanceId"])
        assert row["market"] == "spot" and float(row["price_usd_per_hour"]) == 1.006
        assert ctl.tick()["g5.xlarge"].launch == 0
        assert len(instances(client, cfg)) == 1
        assert [e["action"] for e in events()] == ["launched"]


def test_limits_per_type_and_dollars_per_hour(clean_db: None) -> None:
    """Work for many agents: 2 per type at most, and never past the $/h cap over all types."""
    waiting_job("g5.xlarge")
    waiting_job("g4dn.xlarge")
    with aws() as (client, cfg):
        d = controller(client, cfg, tasks_per_agent=1).tick()
        assert d["g5.xlarge"].launch == 2 and d["g4dn.xlarge"].launch == 2
        assert "limited to 2 per type" in d["g5.xlarge"].notes[0]
    clean_db_fleet()
    waiting_job("g5.xlarge")
    with aws() as (client, cfg):
        ctl = controller(client, cfg, tasks_per_agent=1, max_usd_per_hour=1.5)
        d = ctl.tick()
        assert len(instances(client, cfg)) == 1
        assert "budget" in " ".join(d["g5.xlarge"].notes)
        assert fleet.status()["usd_per_hour"] <= 1.5


def test_max_lifetime_replaces_the_instance(clean_db: None) -> None:
    """An instance past the lifetime is terminated; the work still waiting gets a new one."""
    waiting_job()
    with aws() as (client, cfg):
        ctl = controller(client, cfg, max_lifetime_s=3600)
        ctl.tick()
        [first] = instances(client, cfg)
        agent_on(first["InstanceId"], "g5.xlarge", busy=True)
        ctl.tick(now=later(3601))
        assert instances(client, cfg, ("terminated",))[0]["InstanceId"] == first["InstanceId"]
        assert "maximum lifetime" in fleet_row(first["InstanceId"])["reason"]
        assert len(instances(client, cfg)) == 1  # the replacement


def test_scales_to_zero_after_the_idle_period(clean_db: None) -> None:
    """Work done: the idle agent's instance stays until FLEET_IDLE_S has passed, then goes."""
    job = waiting_job()
    with aws() as (client, cfg):
        ctl = controller(client, cfg, idle_s=600)
        ctl.tick()
        [inst] = instances(client, cfg)
        agent_on(inst["InstanceId"], "g5.xlarge")
        jobs.cancel(job_id=job)  # type: ignore[arg-type]
        from tests.support.stack import broker

        broker().delete("bench.g5.xlarge")
        assert ctl.tick()["g5.xlarge"].terminate == []
        assert fleet_row(inst["InstanceId"])["idle_since"] is not None
        d = ctl.tick(now=later(601))
        assert d["g5.xlarge"].terminate == [(inst["InstanceId"], "idle for 600 s with no work")]
        assert instances(client, cfg) == [] and fleet.status()["usd_per_hour"] == 0


def test_orphans_are_terminated_after_the_boot_grace(clean_db: None) -> None:
    """An instance whose agent never beat is terminated once the boot grace is over, not before."""
    waiting_job()
    with aws() as (client, cfg):
        ctl = controller(client, cfg, boot_grace_s=900)
        ctl.tick()
        [inst] = instances(client, cfg)
        assert ctl.tick(now=later(880))["g5.xlarge"].terminate == []
        d = ctl.tick(now=later(920))
        assert d["g5.xlarge"].terminate[0][0] == inst["InstanceId"]
        assert "orphan" in fleet_row(inst["InstanceId"])["reason"]


def test_capacity_errors_move_to_another_market_and_subnet(clean_db: None) -> None:
    """Spot short everywhere and on-demand short in the first subnet → on-demand in the second."""
    waiting_job()
    with aws() as (client, cfg):
        short = ShortOfCapacity(client, lambda p: "InstanceMarketOptions" in p or p.get("SubnetId") == cfg.subnets[0])
        controller(short, cfg).tick()
        tried = [
            (p.get("InstanceMarketOptions", {}).get("MarketType", "on-demand"), p["SubnetId"]) for p in short.calls
        ]
        assert tried == [("spot", cfg.subnets[0]), ("spot", cfg.subnets[1]), ("on-demand", cfg.subnets[0]),
                         ("on-demand", cfg.subnets[1])]  # fmt: skip
        [inst] = instances(client, cfg)
        assert inst["SubnetId"] == cfg.subnets[1] and fleet_row(inst["InstanceId"])["market"] == "on-demand"


def test_no_capacity_anywhere_is_retried_later_not_fatal(clean_db: None) -> None:
    """Every attempt short → nothing launched, the reason recorded, no retry before the pause ends."""
    waiting_job()
    with aws() as (client, cfg):
        short = ShortOfCapacity(client, lambda p: True)
        ctl = controller(short, cfg)
        assert ctl.tick()["g5.xlarge"].launch == 1  # decided, then refused
        assert instances(client, cfg) == [] and len(short.calls) == 4
        assert "InsufficientInstanceCapacity" in events("capacity_short")[0]["detail"]
        ctl.tick()
        assert len(short.calls) == 4  # paused
        ctl.ec2_client = client  # capacity is back
        ctl.tick(now=later(301))
        assert len(instances(client, cfg)) == 1


def test_a_refused_launch_is_reported_and_the_loop_goes_on(clean_db: None) -> None:
    """A missing instance profile is not a capacity problem: one launch_failed event with AWS's code."""
    waiting_job()
    with aws() as (client, cfg):
        bad = ec2.LaunchConfig(fleet=cfg.fleet, ami=cfg.ami, subnets=cfg.subnets, instance_profile="no-such-profile")
        controller(client, bad).tick()
        [failed] = events("launch_failed")
        assert "NoSuchEntity" in failed["detail"] and instances(client, cfg) == []
        [target] = fleet.status()["types"]
        assert target["pause_kind"] == "refused" and target["failures"] == 1 and target["paused_until"]
        assert "NoSuchEntity" in target["pause_reason"]


def test_adopts_tagged_instances_and_notices_vanished_ones(clean_db: None) -> None:
    """An instance with the fleet's tags that the database lost is counted; one terminated outside is marked
    gone once EC2, asked by its id, says terminated and the launch is FLEET_GONE_GRACE_S old."""
    with aws() as (client, cfg):
        req = ec2.request("g4dn.xlarge", cfg, subnet=cfg.subnets[0], market="on-demand", max_price=1)
        iid = client.run_instances(**req)["Instances"][0]["InstanceId"]
        ctl = controller(client, cfg, idle_s=10_000, gone_grace_s=300)
        ctl.tick()
        assert fleet_row(iid)["state"] == "running" and events("adopted")[0]["instance_id"] == iid
        client.terminate_instances(InstanceIds=[iid])
        ctl.tick()
        assert fleet_row(iid)["state"] == "running"  # too new to trust its absence from the listing
        ctl.tick(now=later(301))
        assert fleet_row(iid)["state"] == "terminated" and "gone from EC2 (terminated" in fleet_row(iid)["reason"]


def test_held_count_and_drain(clean_db: None) -> None:
    """`fleet scale g6.xlarge 1` launches one with no work; `fleet drain` terminates it though work waits."""
    with aws() as (client, cfg):
        ctl = controller(client, cfg)
        fleet.hold(machine_type="g6.xlarge", count=1)
        assert ctl.tick()["g6.xlarge"].launch == 1
        [inst] = instances(client, cfg)
        waiting_job("g6.xlarge")
        fleet.drain(machine_type="g6.xlarge")
        d = ctl.tick()["g6.xlarge"]
        assert d.terminate == [(inst["InstanceId"], "drained by an operator")] and d.launch == 0
        assert instances(client, cfg) == []


def clean_db_fleet() -> None:
    """Forget the fleet tables between two moto accounts in one test."""
    from shared.core.db import transaction

    with transaction() as cur:
        cur.execute("TRUNCATE fleet_instances, fleet_targets, fleet_events")

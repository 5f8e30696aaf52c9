"""The controller when launches fail or instances die early: backoff, quotas, spot refused, console output.

Moto's EC2 for the instances; botocore's Stubber where moto cannot produce AWS's answer (IAM refusals,
quotas), or tests/support/fleetkit.Failing in front of moto for one refused call among many real ones.
"""

import argparse
from datetime import UTC, datetime
from typing import Any

from botocore.stub import Stubber

from cli import fleet as fleet_cli
from fleet import service as fleet
from fleet.ec2 import LaunchConfig
from tests.integration.test_fleet_controller import later, waiting_job
from tests.support.fleetkit import (  # noqa: F401 - stop_test_agents is an autouse fixture
    Failing,
    agent_on,
    aws,
    controller,
    events,
    fleet_row,
    instances,
    listing,
    stop_test_agents,
    stubbed_ec2,
)

STUB_CFG = LaunchConfig(fleet="stubbed", ami="ami-0abc", subnets=("subnet-a", "subnet-b"))


def target(machine_type: str = "g5.xlarge") -> dict[str, Any]:
    """The type's row of GET /v1/fleet's types."""
    return next(t for t in fleet.status()["types"] if t["machine_type"] == machine_type)


def paused_for(machine_type: str = "g5.xlarge") -> float:
    """Seconds from now until the type's pause ends."""
    until = datetime.fromisoformat(target(machine_type)["retry_after"])
    return (until - datetime.now(UTC)).total_seconds()


def run_instances_calls(client: Failing) -> int:
    """How many RunInstances calls went through the wrapper."""
    return sum(1 for name, _ in client.calls if name == "run_instances")


def test_refused_launch_backs_off_doubling_to_the_cap_and_a_launch_resets_it(clean_db: None) -> None:
    """InvalidAMIID: paused 300 s, then 600 s, then the cap (1000 s); the counter shows; a launch clears it."""
    waiting_job()
    with aws() as (client, cfg):
        broken = {"on": True}
        failing = Failing(client, run_instances=lambda p: "InvalidAMIID.NotFound" if broken["on"] else None)
        ctl = controller(failing, cfg, backoff_s=300, backoff_max_s=1000)
        ctl.tick()
        assert run_instances_calls(failing) == 1  # not retried in the other subnet or market
        assert target()["failures"] == 1 and 290 < paused_for() <= 300 and target()["pause_kind"] == "refused"
        assert "InvalidAMIID.NotFound" in target()["pause_reason"]
        ctl.tick(now=later(299))
        assert run_instances_calls(failing) == 1  # paused
        ctl.tick(now=later(301))
        assert target()["failures"] == 2 and 890 < paused_for() <= 901  # 301 s ahead + 600 s
        ctl.tick(now=later(301 + 601))
        assert target()["failures"] == 3 and 1890 < paused_for() <= 1902  # 902 s ahead + the 1000 s cap
        assert "3 in a row" in events("launch_failed")[-1]["detail"]
        broken["on"] = False
        ctl.tick(now=later(3000))
        assert len(instances(client, cfg)) == 1
        assert target()["failures"] == 0 and target()["paused_until"] is None and target()["pause_reason"] is None


def test_spot_not_permitted_launches_on_demand_and_records_why(clean_db: None) -> None:
    """Stubbed AWS: UnauthorizedOperation on spot only → on-demand instance, a spot_not_permitted event."""
    waiting_job()
    client = stubbed_ec2()
    with Stubber(client) as stub:
        stub.add_response("describe_instances", listing())
        message = "You are not authorized to perform this operation. Encoded authorization failure message: Zq9"
        stub.add_client_error("run_instances", "UnauthorizedOperation", message)
        stub.add_response("run_instances", {"Instances": [{"InstanceId": "i-0od", "SubnetId": "subnet-a"}]})
        controller(client, STUB_CFG).tick()
        stub.assert_no_pending_responses()
    assert fleet_row("i-0od")["market"] == "on-demand"
    [denied] = events("spot_not_permitted")
    assert denied["instance_id"] == "i-0od" and "Zq9" in denied["detail"]
    assert "not permitted by the IAM policy" in denied["detail"] and "launched on-demand instead" in denied["detail"]
    assert "aws sts decode-authorization-message" in denied["detail"]
    assert target()["failures"] == 0 and target()["paused_until"] is None


def test_quota_short_in_both_markets_pauses_the_type_with_the_codes(clean_db: None) -> None:
    """A new account: spot and on-demand GPU quotas 0 → paused (quota), codes and vCPUs shown; no retry meanwhile."""
    waiting_job()
    client = stubbed_ec2()
    with Stubber(client) as stub:
        ctl = controller(client, STUB_CFG)
        stub.add_response("describe_instances", listing())
        stub.add_client_error("run_instances", "MaxSpotInstanceCountExceeded", "Max spot instance count exceeded")
        stub.add_client_error("run_instances", "VcpuLimitExceeded", "You have requested more vCPU capacity")
        ctl.tick()
        stub.add_response("describe_instances", listing())  # the next pass only looks: paused
        ctl.tick()
        stub.assert_no_pending_responses()
    t = target()
    assert t["pause_kind"] == "quota" and t["failures"] == 1 and 290 < paused_for() <= 300
    assert (
        "on-demand vCPU quota for G and VT instances is too low: raise Service Quotas code L-DB2E81BA (ec2) "
        "to at least 4" in t["pause_reason"]
    )
    assert "L-3819A6DF" in t["pause_reason"] and "quota" in t["note"]
    [short] = events("quota_short")
    assert "next try after" in short["detail"]


def test_orphans_leave_their_console_and_two_early_deaths_pause_the_type(clean_db: None) -> None:
    """Two instances in a row with no heartbeat: each one's console kept, then the type paused with the reason;
    an agent of the type heartbeating later ends the count."""
    waiting_job()
    with aws() as (client, cfg):
        ctl = controller(client, cfg, boot_grace_s=900, early_death_s=5000, early_deaths=2, backoff_s=300)
        ctl.tick()
        [first] = instances(client, cfg)
        d = ctl.tick(now=later(920))["g5.xlarge"]
        assert d.orphans == {first["InstanceId"]} and d.launch == 1  # one early death: a replacement
        assert target()["early_deaths"] == 1 and target()["paused_until"] is None
        [second] = instances(client, cfg)
        d = ctl.tick(now=later(1840))["g5.xlarge"]
        assert d.orphans == {second["InstanceId"]} and d.launch == 0 and instances(client, cfg) == []
        consoles = events("console_output")
        assert [e["instance_id"] for e in consoles] == [first["InstanceId"], second["InstanceId"]]
        assert "Linux version" in consoles[0]["detail"]  # moto's console text
        t = target()
        assert t["pause_kind"] == "early_deaths" and t["early_deaths"] == 2 and t["paused_until"]
        assert t["pause_reason"].startswith("2 instances died within 83 min of launch (boot failure?)")
        assert (
            f"aws ec2 get-console-output --latest --output text --instance-id {second['InstanceId']}"
            in (events("early_deaths")[0]["detail"])
        )
        ctl.tick(now=later(1840 + 100))
        assert instances(client, cfg) == []  # paused
        ctl.tick(now=later(1840 + 301))
        [third] = instances(client, cfg)
        agent_on(third["InstanceId"], "g5.xlarge", busy=True)
        ctl.tick(now=later(1840 + 330))
        assert target()["early_deaths"] == 0


def test_the_pause_reason_shows_in_traincast_fleet_status(clean_db: None, capsys: Any) -> None:
    """`traincast fleet status`: paused until when and why in the table, the whole reason below it."""
    waiting_job()
    with aws() as (client, cfg):
        failing = Failing(client, run_instances=lambda p: "VcpuLimitExceeded")
        controller(failing, cfg, backoff_s=300).tick()

    class Api:
        """GET /v1/fleet answered by fleet.service, as the API router does."""

        def call(self, method: str, path: str, **_: Any) -> Any:
            return fleet.status()

    parser = argparse.ArgumentParser()
    fleet_cli.add_parser(parser.add_subparsers(dest="command"))
    assert fleet_cli.run(Api(), parser.parse_args(["fleet", "status"])) == 0  # type: ignore[arg-type]
    out = capsys.readouterr().out
    assert "(quota, 1 in a row)" in out and "paused" in out.splitlines()[1]
    assert "g5.xlarge paused: cannot launch g5.xlarge: spot vCPU quota for G and VT instances is too low" in out


def test_a_failing_console_read_does_not_stop_the_termination(clean_db: None) -> None:
    """GetConsoleOutput refused: the orphan is terminated anyway, and the event says the console was unavailable."""
    waiting_job()
    with aws() as (client, cfg):
        failing = Failing(client, get_console_output=lambda p: "UnauthorizedOperation")
        ctl = controller(failing, cfg, boot_grace_s=900)
        ctl.tick()
        [inst] = instances(client, cfg)
        ctl.tick(now=later(920))
        assert fleet_row(inst["InstanceId"])["state"] == "terminated"
        assert inst["InstanceId"] in [i["InstanceId"] for i in instances(client, cfg, ("shutting-down", "terminated"))]
        [console] = events("console_output")
        assert console["detail"].startswith("(console output unavailable: ClientError")


def test_late_orphans_are_not_early_deaths(clean_db: None) -> None:
    """An orphan found after FLEET_EARLY_DEATH_S (a long boot grace) is terminated but does not count."""
    waiting_job()
    with aws() as (client, cfg):
        ctl = controller(client, cfg, boot_grace_s=900, early_death_s=600, early_deaths=1)
        ctl.tick()
        ctl.tick(now=later(920))
        assert target()["early_deaths"] == 0 and target()["paused_until"] is None
        assert len(instances(client, cfg)) == 1  # the replacement

"""No leaks: an instance is gone only when EC2, asked by its id, says so after the grace; live ones are counted.

EC2's eventual consistency (a new instance missing from the tag listing) is played with botocore's Stubber;
revival of wrongly terminated rows runs against moto's EC2.
"""

from datetime import UTC, datetime, timedelta

from botocore.stub import Stubber

from fleet import ec2, store
from fleet import service as fleet
from tests.integration.test_fleet_controller import later
from tests.support.fleetkit import (  # noqa: F401 - stop_test_agents is an autouse fixture
    aws,
    controller,
    described,
    events,
    fleet_row,
    instances,
    listing,
    stop_test_agents,
    stubbed_ec2,
)

STUB_CFG = ec2.LaunchConfig(fleet="stubbed", ami="ami-0abc", subnets=("subnet-a",))


def recorded(iid: str, machine_type: str = "g5.xlarge") -> datetime:
    """A fleet row as a launch writes it, launched now; returns the launch time."""
    now = datetime.now(UTC)
    store.adopt(ec2.LiveInstance(iid, machine_type, now, "spot", "subnet-a"), price=1.006)
    return now


def test_missing_from_the_listing_is_not_gone_until_ec2_says_so_by_id(clean_db: None) -> None:
    """Just launched and not listed: untouched (no call). Later, still running by id: kept. Then NotFound: gone."""
    launched = recorded("i-0new")
    client = stubbed_ec2()
    with Stubber(client) as stub:
        ctl = controller(client, STUB_CFG, gone_grace_s=300, early_death_s=1200, early_deaths=2)
        stub.add_response("describe_instances", listing())  # the listing has not caught up
        ctl.tick(now=launched + timedelta(seconds=200))
        assert fleet_row("i-0new")["state"] == "running"

        stub.add_response("describe_instances", listing())
        by_id = {"InstanceIds": ["i-0new"]}
        stub.add_response("describe_instances", listing(described("i-0new", "g5.xlarge", "stubbed", launched)), by_id)
        ctl.tick(now=launched + timedelta(seconds=301))
        assert fleet_row("i-0new")["state"] == "running"  # alive: the listing was stale

        stub.add_response("describe_instances", listing())
        stub.add_client_error("describe_instances", "InvalidInstanceID.NotFound", expected_params=by_id)
        stub.add_client_error("get_console_output", "InvalidInstanceID.NotFound")
        ctl.tick(now=launched + timedelta(seconds=400))
        stub.assert_no_pending_responses()
    row = fleet_row("i-0new")
    assert row["state"] == "terminated" and row["reason"].startswith("gone from EC2 (not-found)")
    assert [e["instance_id"] for e in events("gone")] == ["i-0new"]
    [console] = events("console_output")
    assert "unavailable" in console["detail"]
    assert fleet.status()["types"][0]["early_deaths"] == 1  # went 400 s after launch


def test_a_describe_error_is_not_taken_for_gone(clean_db: None) -> None:
    """DescribeInstances by id throttled: the row stays running, the pass goes on."""
    launched = recorded("i-0thr")
    client = stubbed_ec2()
    with Stubber(client) as stub:
        stub.add_response("describe_instances", listing())
        stub.add_client_error("describe_instances", "RequestLimitExceeded", expected_params={"InstanceIds": ["i-0thr"]})
        controller(client, STUB_CFG, gone_grace_s=300).tick(now=launched + timedelta(seconds=600))
        stub.assert_no_pending_responses()
    assert fleet_row("i-0thr")["state"] == "running" and events("gone") == []


def test_a_spot_interruption_is_gone_but_not_an_early_death(clean_db: None) -> None:
    """EC2 reclaimed a spot instance: marked gone with EC2's reason, no console read, not counted."""
    launched = recorded("i-0spot")
    client = stubbed_ec2()
    gone = described("i-0spot", "g5.xlarge", "stubbed", launched, state="terminated")
    gone["StateReason"] = {"Code": "Server.SpotInstanceTermination", "Message": "Spot instance termination"}
    with Stubber(client) as stub:
        stub.add_response("describe_instances", listing())
        stub.add_response("describe_instances", listing(gone), {"InstanceIds": ["i-0spot"]})
        controller(client, STUB_CFG, gone_grace_s=300, early_deaths=1).tick(now=launched + timedelta(seconds=400))
        stub.assert_no_pending_responses()
    assert "Server.SpotInstanceTermination" in fleet_row("i-0spot")["reason"] and events("console_output") == []
    assert fleet.status()["types"] == [] or fleet.status()["types"][0]["early_deaths"] == 0


def test_a_live_instance_marked_terminated_is_revived_counted_and_ended_when_due(clean_db: None) -> None:
    """A row wrongly taken for gone comes back at once; one the controller terminated itself only after the
    grace (EC2 lists a just-terminated instance late); revived ones count in the spend and drain ends them."""
    with aws() as (client, cfg):
        req = ec2.request("g4dn.xlarge", cfg, subnet=cfg.subnets[0], market="on-demand", max_price=1)
        a, b = (client.run_instances(**req)["Instances"][0]["InstanceId"] for _ in range(2))
        ctl = controller(client, cfg, idle_s=10_000, gone_grace_s=300)
        ctl.tick()
        store.terminated(a, reason="gone from EC2 (not-found): spot interruption, agent exit, or terminated outside")
        store.terminated(b, reason="idle for 600 s with no work")
        ctl.tick()
        assert fleet_row(a)["state"] == "running" and fleet_row(b)["state"] == "terminated"
        [revived] = [e for e in events("adopted") if "database had it terminated" in e["detail"]]
        assert revived["instance_id"] == a and "gone from EC2 (not-found)" in revived["detail"]
        ctl.tick(now=later(301))
        assert fleet_row(b)["state"] == "running"
        assert fleet.status()["usd_per_hour"] == 2 * 0.526
        fleet.drain(machine_type="g4dn.xlarge")
        ctl.tick(now=later(302))
        assert instances(client, cfg) == [] and {fleet_row(a)["state"], fleet_row(b)["state"]} == {"terminated"}

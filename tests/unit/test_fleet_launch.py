"""The exact RunInstances request, pinned with botocore's Stubber: tags, spot options, user data, profile."""

import boto3
import pytest
from botocore.stub import ANY, Stubber

from fleet import ec2
from shared.core.errors import CapacityShort, LaunchRefused

CFG = ec2.LaunchConfig(
    fleet="prod",
    ami="ami-0abc",
    subnets=("subnet-a", "subnet-b"),
    security_groups=("sg-agents",),
    instance_profile="traincast-agent",
    key_name="ops",
    region="eu-west-1",
    ssm_path="/traincast/prod/agent/",
)
TAGS = [
    {"Key": "app", "Value": "traincast"},
    {"Key": "traincast:machine-type", "Value": "g5.xlarge"},
    {"Key": "traincast:fleet", "Value": "prod"},
    {"Key": "Name", "Value": "traincast-agent-g5.xlarge"},
]
# The boot script itself is tested by running it (tests/integration/test_fleet_boot.py); here: the same script.
USER_DATA = ec2.user_data("g5.xlarge", CFG)


def expected(subnet: str, *, spot: bool) -> dict[str, object]:
    """The whole request for one attempt."""
    req: dict[str, object] = {
        "InstanceType": "g5.xlarge",
        "MinCount": 1,
        "MaxCount": 1,
        "ImageId": "ami-0abc",
        "SubnetId": subnet,
        "SecurityGroupIds": ["sg-agents"],
        "IamInstanceProfile": {"Name": "traincast-agent"},
        "KeyName": "ops",
        "UserData": USER_DATA,
        "TagSpecifications": [{"ResourceType": "instance", "Tags": TAGS}, {"ResourceType": "volume", "Tags": TAGS}],
        "InstanceInitiatedShutdownBehavior": "terminate",
        "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled"},
        "ClientToken": ANY,
    }
    if spot:
        req["InstanceMarketOptions"] = {
            "MarketType": "spot",
            "SpotOptions": {
                "MaxPrice": "1.0060",
                "SpotInstanceType": "one-time",
                "InstanceInterruptionBehavior": "terminate",
            },
        }
    return req


def launched(iid: str, subnet: str) -> dict[str, object]:
    """A minimal RunInstances answer."""
    return {"Instances": [{"InstanceId": iid, "SubnetId": subnet}]}


def test_spot_launch_request_is_exactly_this() -> None:
    """First attempt: spot at most the on-demand price, in the first subnet, tagged, with the agent's boot script."""
    client = boto3.client("ec2", region_name="eu-west-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stub:
        stub.add_response("run_instances", launched("i-1", "subnet-a"), expected("subnet-a", spot=True))
        got = ec2.launch(client, "g5.xlarge", CFG, max_price=1.006)
        stub.assert_no_pending_responses()
    assert got == ec2.Launched("i-1", "spot", "subnet-a")


def test_user_data_holds_no_secret_even_when_the_controller_has_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """The boot script names the SSM path only: the controller's own DATABASE_URL and REDIS_URL never go in."""
    monkeypatch.setenv("DATABASE_URL", "postgresql://traincast:s3cret-pw@db.internal/traincast")
    monkeypatch.setenv("REDIS_URL", "redis://:s3cret-pw@redis.internal:6379/0")
    script = ec2.user_data("g5.xlarge", CFG)
    assert script == USER_DATA
    for line in ("MACHINE_TYPE=g5.xlarge", "FLEET=prod", "SSM_PATH=/traincast/prod/agent/"):
        assert line in script.splitlines()
    assert "s3cret" not in script and "postgresql://" not in script and "redis://" not in script


def test_capacity_errors_fall_back_in_order_then_give_up() -> None:
    """Spot in a, spot in b, on-demand in a, on-demand in b; all short → CapacityShort naming each try."""
    client = boto3.client("ec2", region_name="eu-west-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stub:
        for subnet, spot in (("subnet-a", True), ("subnet-b", True), ("subnet-a", False)):
            stub.add_client_error(
                "run_instances", "InsufficientInstanceCapacity", expected_params=expected(subnet, spot=spot)
            )
        stub.add_response("run_instances", launched("i-2", "subnet-b"), expected("subnet-b", spot=False))
        assert ec2.launch(client, "g5.xlarge", CFG, max_price=1.006) == ec2.Launched("i-2", "on-demand", "subnet-b")
        for _ in range(4):
            stub.add_client_error("run_instances", "InsufficientInstanceCapacity")
        with pytest.raises(CapacityShort) as short:
            ec2.launch(client, "g5.xlarge", CFG, max_price=1.006)
    assert short.value.context["tried"] == [
        "spot in subnet-a: InsufficientInstanceCapacity",
        "spot in subnet-b: InsufficientInstanceCapacity",
        "on-demand in subnet-a: InsufficientInstanceCapacity",
        "on-demand in subnet-b: InsufficientInstanceCapacity",
    ]


def test_other_errors_are_refusals_not_retried() -> None:
    """InvalidAMIID.NotFound stops at the first attempt: another subnet or market would not help."""
    client = boto3.client("ec2", region_name="eu-west-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stub:
        stub.add_client_error("run_instances", "InvalidAMIID.NotFound", "no such image", expected_params=None)
        with pytest.raises(LaunchRefused, match="InvalidAMIID.NotFound: no such image") as refused:
            ec2.launch(client, "g5.xlarge", CFG, max_price=1.006)
        stub.assert_no_pending_responses()
    assert refused.value.context["code"] == "InvalidAMIID.NotFound"


def test_launch_template_replaces_ami_profile_and_groups() -> None:
    """A type with a launch template: the template by id, no AMI/profile/groups/key of ours; tags and user data stay."""
    cfg = ec2.LaunchConfig(fleet="prod", launch_templates={"g5.xlarge": "lt-0123"}, spot=False, ami="ami-unused")
    req = ec2.request("g5.xlarge", cfg, subnet=None, market="on-demand", max_price=1.0)
    assert req["LaunchTemplate"] == {"LaunchTemplateId": "lt-0123", "Version": "$Default"}
    assert not {
        "ImageId",
        "IamInstanceProfile",
        "SecurityGroupIds",
        "KeyName",
        "SubnetId",
        "InstanceMarketOptions",
    } & set(req)
    assert req["TagSpecifications"][0]["Tags"][1] == {"Key": "traincast:machine-type", "Value": "g5.xlarge"}

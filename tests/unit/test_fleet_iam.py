"""The fleet's IAM policies allow every listed AWS call and nothing beside them."""

import json
from dataclasses import replace
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.core import set_initial_no_auth_action_count

from cli.main import main
from fleet import catalog
from fleet import ec2 as fleet_ec2
from fleet.iam import Call, Request, Scope, allowed, calls, policy
from fleet.iam.calls import PRICING_REGION
from fleet.iam.evaluate import Unsupported, matches
from shared.core.settings import get_settings

ACCOUNT = "123456789012"
AMI = Scope(
    region="eu-west-1",
    account=ACCOUNT,
    fleet="prod",
    instance_types=("g5.xlarge", "p4d.24xlarge"),
    ami="ami-0aaaabbbbccccdddd",
    subnets=("subnet-0aaa1111bbb22222", "subnet-0ccc3333ddd44444"),
    security_groups=("sg-0aaa1111bbb22222",),
    key_name="ops",
    artifact="s3://traincast-artifacts/agent/",
    log_group="/traincast/prod/agents",
)
DLAMI = replace(AMI, ami="resolve:ssm:/aws/service/deeplearning/ami/x86_64/base-oss/latest/ami-id", key_name="")
TEMPLATES = replace(AMI, ami=None, launch_templates=("lt-0aaa1111bbb22222", "gpu-template"), spot=False)
SCOPES = {"ami": AMI, "dlami": DLAMI, "templates": TEMPLATES}
GLOBAL_SERVICES = ("arn:aws:iam::", "arn:aws:s3:::")


def call_allowed(doc: dict[str, Any], call: Call) -> bool:
    """A call succeeds only when every authorization it needs is allowed."""
    return all(allowed(doc, r) for r in call.requests)


def statements(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return list(doc["Statement"])


@pytest.mark.parametrize("role", ["controller", "agent", "operator"])
@pytest.mark.parametrize("name", SCOPES)
def test_every_listed_call_is_allowed(name: str, role: str) -> None:
    scope = SCOPES[name]
    listed = [c for c in calls(scope, role) if not c.free]
    assert listed
    doc = policy(role, scope)
    assert [f"{c.api} ({c.case})" for c in listed if not call_allowed(doc, c)] == []


@pytest.mark.parametrize("role", ["controller", "agent", "operator"])
@pytest.mark.parametrize("name", SCOPES)
def test_every_grant_serves_a_listed_call(name: str, role: str) -> None:
    """Nothing broader: each (action, resource) a statement grants is one some listed call needs."""
    scope = SCOPES[name]
    requests = [r for c in calls(scope, role) for r in c.requests]
    unused = []
    for st in statements(policy(role, scope)):
        for action in st["Action"]:
            for resource in [st["Resource"]] if isinstance(st["Resource"], str) else st["Resource"]:
                if not any(r.action == action and matches(resource, r.resource) for r in requests):
                    unused.append((st["Sid"], action, resource))
    # The exception: the operator may read the four GPU vCPU quotas whatever the types (read-only; the
    # template cannot map types to quota codes).
    assert [u for u in unused if not u[1].startswith("servicequotas:")] == []


@pytest.mark.parametrize("role", ["controller", "agent", "operator"])
@pytest.mark.parametrize("name", SCOPES)
def test_region_in_every_arn_no_wildcard_actions(name: str, role: str) -> None:
    scope = SCOPES[name]
    for st in statements(policy(role, scope)):
        assert all("*" not in a and "?" not in a for a in st["Action"]), st
        resources = [st["Resource"]] if isinstance(st["Resource"], str) else st["Resource"]
        for arn in resources:
            if arn == "*":
                # Actions without resource-level permissions: the region is held by the condition.
                region = PRICING_REGION if st["Action"] == ["pricing:GetProducts"] else scope.region
                assert st["Condition"]["StringEquals"]["aws:RequestedRegion"] == region, st
            elif not arn.startswith(GLOBAL_SERVICES):
                assert arn.split(":")[3] == scope.region, arn
                # AMIs and AWS's public SSM parameters are ARNs without an account; everything else has ours.
                public = ":image/" in arn or ":parameter/aws/service/" in arn
                assert arn.split(":")[4] == ("" if public else scope.account), arn


def _launch(scope: Scope, market: str = "spot") -> Call:
    return next(c for c in calls(scope, "controller") if c.api == "ec2.RunInstances" and c.case.startswith(market))


def _request(call: Call, action: str, resource_part: str) -> Request:
    return next(r for r in call.requests if r.action == action and resource_part in r.resource)


def _with(req: Request, **context: tuple[str, ...] | None) -> Request:
    ctx = {k: v for k, v in ({**req.context, **context}).items() if v is not None}
    return replace(req, context=ctx)


OUT_OF_SCOPE = {
    "another region": lambda: _launch(replace(AMI, region="us-west-2")),
    "an instance type not configured": lambda: _launch(replace(AMI, instance_types=("g6e.48xlarge",))),
    "another AMI": lambda: _launch(replace(AMI, ami="ami-0eeeeffff00001111")),
    "another subnet": lambda: _launch(replace(AMI, subnets=("subnet-0fff9999eee88888",))),
    "another security group": lambda: _launch(replace(AMI, security_groups=("sg-0fff9999eee88888",))),
    "passing another role": lambda: _launch(replace(AMI, agent_role_arn=f"arn:aws:iam::{ACCOUNT}:role/admin")),
    "another fleet's tag": lambda: _launch(replace(AMI, fleet="staging")),
}


@pytest.mark.parametrize("case", OUT_OF_SCOPE)
def test_out_of_scope_launch_is_denied(case: str) -> None:
    doc = policy("controller", AMI)
    assert call_allowed(doc, _launch(AMI))
    assert not call_allowed(doc, OUT_OF_SCOPE[case]())


def test_untagged_launches_without_imdsv2_and_other_services_are_denied() -> None:
    doc = policy("controller", AMI)
    launch = _launch(AMI)
    instance = _request(launch, "ec2:RunInstances", ":instance/")
    assert allowed(doc, instance)
    assert not allowed(doc, _with(instance, **{"aws:RequestTag/app": None}))
    assert not allowed(doc, _with(instance, **{"ec2:MetadataHttpTokens": ("optional",)}))
    passed = _request(launch, "iam:PassRole", "role/")
    assert not allowed(doc, _with(passed, **{"iam:PassedToService": ("lambda.amazonaws.com",)}))
    tags = _request(launch, "ec2:CreateTags", ":instance/")
    assert not allowed(doc, _with(tags, **{"ec2:CreateAction": None}))  # tagging outside a launch


def test_only_this_fleets_instances_are_terminated() -> None:
    doc = policy("controller", AMI)
    [terminate] = [c.requests[0] for c in calls(AMI, "controller") if c.api == "ec2.TerminateInstances"]
    assert allowed(doc, terminate)
    assert not allowed(doc, _with(terminate, **{"ec2:ResourceTag/app": None, "ec2:ResourceTag/traincast:fleet": None}))
    assert not allowed(doc, _with(terminate, **{"ec2:ResourceTag/traincast:fleet": ("staging",)}))
    assert not allowed(doc, replace(terminate, resource=terminate.resource.replace("eu-west-1", "us-east-1")))


def test_spot_needs_the_spot_request_resource() -> None:
    """The policy FLEET.md documented had no spot-instances-request/*: no spot instance ever launched."""
    doc = policy("controller", AMI)
    without = {**doc, "Statement": [s for s in doc["Statement"] if s["Sid"] != "LaunchSpot"]}
    spot, on_demand = _launch(AMI, "spot"), _launch(AMI, "on-demand")
    assert any(":spot-instances-request/" in r.resource for r in spot.requests)
    assert call_allowed(doc, spot) and call_allowed(without, on_demand)
    assert not call_allowed(without, spot)
    assert "LaunchSpot" not in [s["Sid"] for s in policy("controller", TEMPLATES)["Statement"]]  # FLEET_SPOT=false


def test_agent_reads_only_its_secrets_and_artifacts() -> None:
    doc = policy("agent", AMI)
    reqs = {r.action: r for c in calls(AMI, "agent") for r in c.requests}
    other_path = replace(
        reqs["ssm:GetParametersByPath"], resource=f"arn:aws:ssm:eu-west-1:{ACCOUNT}:parameter/prod/api"
    )
    assert not allowed(doc, other_path)
    decrypt = reqs["kms:Decrypt"]
    assert allowed(doc, decrypt)
    assert not allowed(doc, _with(decrypt, **{"kms:ViaService": None}))  # directly, not through SSM
    elsewhere = f"arn:aws:ssm:eu-west-1:{ACCOUNT}:parameter/prod/api/db_password"
    assert not allowed(doc, _with(decrypt, **{"kms:EncryptionContext:PARAMETER_ARN": (elsewhere,)}))
    assert not allowed(doc, Request("s3:GetObject", "arn:aws:s3:::traincast-artifacts/backups/db.dump"))
    assert not allowed(doc, Request("s3:PutObject", "arn:aws:s3:::traincast-artifacts/agent/current.json"))


def test_evaluator_follows_iam_rules() -> None:
    doc = {
        "Statement": [
            {"Effect": "Allow", "Action": "EC2:Describe*", "Resource": "*"},
            {"Effect": "Deny", "Action": "ec2:DescribeImages", "Resource": "*"},
            {
                "Effect": "Allow",
                "Action": ["s3:GetObject"],
                "Resource": "arn:aws:s3:::b/a?/*",
                "Condition": {"ForAnyValue:StringLike": {"aws:TagKeys": ["team*"]}},
            },
        ]
    }
    assert allowed(doc, Request("ec2:describeinstances", "*"))  # actions are case-insensitive
    assert not allowed(doc, Request("ec2:DescribeImages", "*"))  # an explicit Deny wins
    assert not allowed(doc, Request("ec2:RunInstances", "*"))
    ok = Request("s3:GetObject", "arn:aws:s3:::b/ab/c", {"aws:TagKeys": ("x", "team-a")})
    assert allowed(doc, ok)
    assert not allowed(doc, replace(ok, resource="arn:aws:s3:::B/ab/c"))  # resources are case-sensitive
    assert not allowed(doc, replace(ok, resource="arn:aws:s3:::b/abc/c"))  # ? is one character
    assert not allowed(doc, replace(ok, context={}))  # a missing key fails the condition
    with pytest.raises(Unsupported):
        allowed({"Statement": [{"Effect": "Allow", "NotAction": "s3:*", "Resource": "*"}]}, ok)


def test_policy_command_prints_the_generated_policy(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["fleet", "policy", "--role", "controller", "--region", "eu-west-1", "--account", ACCOUNT, "--fleet", "prod"]
    args += ["--types", "g5.xlarge,p4d.24xlarge", "--ami", AMI.ami or "", "--subnets", ",".join(AMI.subnets)]
    args += ["--security-groups", AMI.security_groups[0], "--key-name", "ops", "--artifact", AMI.artifact]
    args += ["--log-group", AMI.log_group]
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out) == policy("controller", AMI)
    assert main(["fleet", "policy", "--role", "agent", "--account", "12345"]) == 1
    assert capsys.readouterr().err.startswith("error: --account '12345'")
    assert main(["fleet", "policy", "--role", "controller", "--account", ACCOUNT, "--types", "g5.xlarge"]) == 1
    assert capsys.readouterr().err.startswith("error: --ami")


def test_policy_defaults_come_from_the_fleet_settings(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {
        "FLEET_REGION": "eu-west-1",
        "FLEET_NAME": "prod",
        "FLEET_AMI": AMI.ami or "",
        "FLEET_ARTIFACT": AMI.artifact,
    }
    env |= {"FLEET_SUBNETS": json.dumps(AMI.subnets), "FLEET_SECURITY_GROUPS": json.dumps(AMI.security_groups)}
    env |= {"FLEET_KEY_NAME": "ops", "FLEET_LOG_GROUP": AMI.log_group}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    try:
        assert (
            main(["fleet", "policy", "--role", "operator", "--account", ACCOUNT, "--types", "g5.xlarge,p4d.24xlarge"])
            == 0
        )
        assert json.loads(capsys.readouterr().out) == policy("operator", AMI)
        monkeypatch.setenv("FLEET_SUBNETS", '["subnet-x"]')
        get_settings.cache_clear()
        assert main(["fleet", "policy", "--role", "agent", "--account", ACCOUNT]) == 1
        assert capsys.readouterr().err.startswith("error: FLEET_SUBNETS 'subnet-x': not a valid value")
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()


def _actions_only(doc: dict[str, Any]) -> dict[str, Any]:
    """What moto can enforce of a policy: its actions (moto ignores Resource for EC2 and most conditions)."""
    return {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": s["Action"], "Resource": "*"} for s in doc["Statement"]],
    }


def test_controller_calls_pass_moto_iam_enforcement_and_a_missing_action_is_denied() -> None:
    """The controller's real code, with the keys of an IAM user holding the generated policy, under moto.

    moto enforces IAM actions only: it authorizes EC2 requests against Resource "*" and ignores
    resource-level conditions, so the user gets the policy's statements with Resource "*" and no
    conditions. This proves each action the real code calls is in the policy (and in the call list);
    the evaluator tests above prove the resources and conditions.
    """
    region = "us-east-1"
    with mock_aws():
        admin = boto3.client("ec2", region_name=region)
        vpc = admin.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        subnet = admin.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
        ami = admin.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        scope = Scope(
            region=region, account=ACCOUNT, fleet="moto", instance_types=("g5.xlarge",), ami=ami, subnets=(subnet,)
        )
        iam = boto3.client("iam", region_name=region)
        iam.create_user(UserName="controller")

        def attach(doc: dict[str, Any]) -> Any:
            iam.put_user_policy(
                UserName="controller", PolicyName="fleet", PolicyDocument=json.dumps(_actions_only(doc))
            )
            keys = iam.create_access_key(UserName="controller")["AccessKey"]
            return boto3.client(
                "ec2",
                region_name=region,
                aws_access_key_id=keys["AccessKeyId"],
                aws_secret_access_key=keys["SecretAccessKey"],
            )

        client = attach(policy("controller", scope))
        seen: set[str] = set()
        client.meta.events.register("before-call.ec2.*", lambda model, **_: seen.add(model.name))
        cfg = fleet_ec2.LaunchConfig(fleet="moto", ami=ami, subnets=(subnet,))

        @set_initial_no_auth_action_count(0)
        def as_controller() -> str:
            got = fleet_ec2.launch(client, "g5.xlarge", cfg, max_price=2.0)
            assert [i.instance_id for i in fleet_ec2.list_live(client, "moto")] == [got.instance_id]
            client.describe_instances(InstanceIds=[got.instance_id])
            client.get_console_output(InstanceId=got.instance_id)
            catalog.read_specs(ec2=client, names=["g5.xlarge"], region=region)
            catalog.read_spot(ec2=client, name="g5.xlarge", region=region)
            return got.instance_id

        instance = as_controller()
        listed = {c.api.split(".", 1)[1] for c in calls(scope, "controller") if c.api.startswith("ec2.")}
        assert seen and seen <= listed
        doc = policy("controller", scope)
        for st in doc["Statement"]:
            st["Action"] = [a for a in st["Action"] if a != "ec2:TerminateInstances"]
        client = attach(doc)

        @set_initial_no_auth_action_count(0)
        def terminate() -> None:
            fleet_ec2.terminate(client, [instance])

        with pytest.raises(ClientError) as denied:
            terminate()
        assert denied.value.response["Error"]["Code"] in ("AccessDenied", "UnauthorizedOperation")

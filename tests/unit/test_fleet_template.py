"""deploy/aws/traincast-fleet.yaml lints clean, and its policies are the generator's for its outputs."""

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet.iam import Scope, policy

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "deploy" / "aws" / "traincast-fleet.yaml"
REGION, ACCOUNT = "eu-west-1", "123456789012"
NO_VALUE = object()
SUBNETS = ["subnet-0aaa1111bbb22222", "subnet-0ccc3333ddd44444", "subnet-0eee5555fff66666"]
# What CloudFormation would make up: ids and ARNs of resources that get no name from the template.
MADE_UP = {
    "AgentSecurityGroup.GroupId": "sg-0123456789abcdef0",
    "SecretsKey.Arn": f"arn:aws:kms:{REGION}:{ACCOUNT}:key/0123abcd-0123-4567-89ab-0123456789ab",
    "ArtifactBucket": "traincast-fleet-artifactbucket-1a2b3c4d",
    "ArtifactBucket.Arn": "arn:aws:s3:::traincast-fleet-artifactbucket-1a2b3c4d",
    "SecretsKey": "0123abcd-0123-4567-89ab-0123456789ab",
    "SecretsKeyAlias": "alias/traincast-test",
    "OperatorPolicy": f"arn:aws:iam::{ACCOUNT}:policy/traincast-operator-test",
}


def load() -> dict[str, Any]:
    """The template, short-form tags (!Sub, !Ref, …) as their long forms."""

    class Loader(yaml.SafeLoader):
        pass

    def tagged(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
        if isinstance(node, yaml.ScalarNode):
            value: Any = loader.construct_scalar(node)
        elif isinstance(node, yaml.SequenceNode):
            value = loader.construct_sequence(node, deep=True)
        else:
            value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
        if suffix == "GetAtt" and isinstance(value, str):
            value = value.split(".", 1)
        return {"Ref" if suffix == "Ref" else f"Fn::{suffix}": value}

    Loader.add_multi_constructor("!", tagged)
    return dict(yaml.load(TEMPLATE.read_text(), Loader=Loader))  # noqa: S506 - SafeLoader subclass


class Stack:
    """The template resolved for given parameters, as CloudFormation would (the functions it uses)."""

    def __init__(self, template: dict[str, Any], params: dict[str, Any]) -> None:
        self.t = template
        self.values: dict[str, Any] = {"AWS::Region": REGION, "AWS::AccountId": ACCOUNT, **MADE_UP}
        for name, p in template["Parameters"].items():
            value = params.get(name, p.get("Default"))
            assert value is not None, f"parameter {name} needs a value"
            self.values[name] = value.split(",") if p["Type"] == "CommaDelimitedList" else value
        self.conditions = {name: bool(self.resolve(c)) for name, c in template["Conditions"].items()}
        for name, res in template["Resources"].items():
            props = res.get("Properties", {})
            for key in ("RoleName", "InstanceProfileName", "LogGroupName"):
                if key in props:
                    self.values[name] = self.resolve(props[key])
            if res["Type"] == "AWS::IAM::Role":
                self.values[f"{name}.Arn"] = f"arn:aws:iam::{ACCOUNT}:role/{self.values[name]}"
            if res["Type"] == "AWS::IAM::InstanceProfile":
                self.values[f"{name}.Arn"] = f"arn:aws:iam::{ACCOUNT}:instance-profile/{self.values[name]}"

    def resolve(self, x: Any) -> Any:
        """x with every intrinsic function evaluated; AWS::NoValue items dropped."""
        if isinstance(x, list):
            return [v for v in (self.resolve(i) for i in x) if v is not NO_VALUE]
        if not isinstance(x, dict):
            return x
        if len(x) == 1:
            ((fn, arg),) = x.items()
            if fn == "Ref":
                return NO_VALUE if arg == "AWS::NoValue" else self.values[arg]
            if fn == "Fn::GetAtt":
                return self.values[".".join(arg)]
            if fn == "Fn::Sub":
                text, names = (arg, {}) if isinstance(arg, str) else (arg[0], self.resolve(arg[1]))
                return re.sub(r"\$\{([\w:.]+)\}", lambda m: str({**self.values, **names}[m.group(1)]), text)
            if fn == "Fn::If":
                return self.resolve(arg[1] if self.conditions[arg[0]] else arg[2])
            if fn == "Fn::Equals":
                return self.resolve(arg[0]) == self.resolve(arg[1])
            if fn == "Fn::Not":
                return not self.resolve(arg[0])
            assert not fn.startswith("Fn::"), f"{fn} is not resolved by this test"
        return {k: v for k, v in ((k, self.resolve(v)) for k, v in x.items()) if v is not NO_VALUE}

    def policy(self, resource: str) -> dict[str, Any]:
        """A role's inline policy or a managed policy, resolved."""
        props = self.t["Resources"][resource]["Properties"]
        doc = props["Policies"][0]["PolicyDocument"] if "Policies" in props else props["PolicyDocument"]
        return dict(self.resolve(doc))

    def outputs(self) -> dict[str, str]:
        """Each output's description (the setting it is for) → its value."""
        return {o["Description"]: self.resolve(o["Value"]) for o in self.t["Outputs"].values()}


def canonical(x: Any) -> Any:
    """Equal as IAM reads them: order of lists and statements aside, a one-item list is its item."""
    if isinstance(x, dict):
        if "Statement" in x:
            return {s.get("Sid"): canonical({k: v for k, v in s.items() if k != "Sid"}) for s in x["Statement"]}
        return {k: canonical(v) for k, v in x.items()}
    if isinstance(x, list):
        items = sorted((canonical(i) for i in x), key=lambda i: json.dumps(i, sort_keys=True))
        return items[0] if len(items) == 1 else items
    return x


CASES = {
    "AMI id, one subnet, bucket created": {"AmiId": "ami-0aaaabbbbccccdddd", "PrivateSubnet1": SUBNETS[0]},
    "DLAMI parameter, three subnets, own bucket": {
        "PrivateSubnet1": SUBNETS[0],
        "PrivateSubnet2": SUBNETS[1],
        "PrivateSubnet3": SUBNETS[2],
        "ArtifactBucketName": "my-artifacts",
        "ArtifactPrefix": "",
        "SsmPath": "/prod/traincast/agent",
    },
    "two subnets, other types": {
        "PrivateSubnet1": SUBNETS[0],
        "PrivateSubnet2": SUBNETS[1],
        "InstanceTypes": "p4d.24xlarge",
    },
}
COMMON = {
    "FleetName": "test",
    "VpcId": "vpc-0123",
    "DatabaseSecurityGroup": "sg-0db",
    "RedisSecurityGroup": "sg-0redis",
}
COMMON["BudgetEmail"] = "ops@example.com"


@pytest.mark.parametrize("case", CASES)
def test_template_policies_are_the_generators_for_its_outputs(case: str) -> None:
    """Deploy, put the outputs in fleet.env, run `traincast fleet policy`: the same three policies."""
    stack = Stack(load(), COMMON | CASES[case])
    out = stack.outputs()
    scope = Scope(
        region=out["FLEET_REGION"],
        account=ACCOUNT,
        fleet=out["FLEET_NAME"],
        instance_types=tuple(stack.values["InstanceTypes"]),
        ami=out["FLEET_AMI"],
        subnets=tuple(json.loads(out["FLEET_SUBNETS"])),
        security_groups=tuple(json.loads(out["FLEET_SECURITY_GROUPS"])),
        instance_profile=out["FLEET_INSTANCE_PROFILE"],
        ssm_path=out["FLEET_SSM_PATH"],
        kms_key_arn=MADE_UP["SecretsKey.Arn"],
        artifact=out["FLEET_ARTIFACT"],
        log_group=out["FLEET_LOG_GROUP"],
    )
    assert scope.subnets == tuple(v for k, v in CASES[case].items() if k.startswith("PrivateSubnet"))
    assert out["FLEET_AMI"].startswith("ami-" if "AmiId" in CASES[case] else "resolve:ssm:/aws/service/")
    for role, resource in (("controller", "ControllerRole"), ("agent", "AgentRole"), ("operator", "OperatorPolicy")):
        assert canonical(stack.policy(resource)) == canonical(policy(role, scope)), role


def test_template_resources_are_locked_down() -> None:
    res = Stack(load(), COMMON | CASES["AMI id, one subnet, bucket created"]).resolve(load()["Resources"])
    sg = res["AgentSecurityGroup"]["Properties"]
    assert "SecurityGroupIngress" not in sg
    assert sorted(e["FromPort"] for e in sg["SecurityGroupEgress"]) == [443, 5432, 6379]
    assert {
        (r["Properties"]["GroupId"], r["Properties"]["FromPort"]) for r in (res["DatabaseIngress"], res["RedisIngress"])
    } == {
        ("sg-0db", 5432),
        ("sg-0redis", 6379),
    }
    bucket = res["ArtifactBucket"]["Properties"]
    assert all(bucket["PublicAccessBlockConfiguration"].values()) and len(bucket["PublicAccessBlockConfiguration"]) == 4
    assert bucket["VersioningConfiguration"] == {"Status": "Enabled"} and bucket["BucketEncryption"]
    assert res["SecretsKey"]["Properties"]["EnableKeyRotation"] is True
    assert res["AgentLogGroup"]["Properties"]["RetentionInDays"] == 30
    budget = res["FleetBudget"]["Properties"]
    assert budget["Budget"]["CostFilters"] == {"TagKeyValue": ["user:app$traincast"]}
    alerts = {
        (n["Notification"]["NotificationType"], n["Notification"]["Threshold"])
        for n in budget["NotificationsWithSubscribers"]
    }
    assert alerts == {("ACTUAL", 80), ("FORECASTED", 100)}


def test_template_lints_clean() -> None:
    lint = subprocess.run(
        [str(Path(sys.executable).parent / "cfn-lint"), str(TEMPLATE)], capture_output=True, text=True, cwd=ROOT
    )
    assert (lint.returncode, lint.stdout + lint.stderr) == (0, "")
    assert "cfn-lint" in (ROOT / "scripts" / "lint.sh").read_text()

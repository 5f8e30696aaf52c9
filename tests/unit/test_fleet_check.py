"""`traincast fleet check` against AWS answers pinned with botocore's Stubber: all pass, each failure and its fix."""

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from cli.main import main
from fleet import check
from fleet.iam import Scope
from fleet.iam import simulate as simulation

ACCOUNT = "123456789012"
PARAM = "/aws/service/deeplearning/ami/x86_64/base-oss/latest/ami-id"
SCOPE = Scope(
    region="us-east-1",
    account="",
    fleet="test",
    instance_types=("g5.xlarge", "g5.12xlarge"),
    ami=f"resolve:ssm:{PARAM}",
    subnets=("subnet-0aaa1111bbb22222",),
    security_groups=("sg-0aaa1111bbb22222",),
    artifact="s3://traincast-artifacts/agent/",
)
CLI_ARGS = ["fleet", "check", "--region", "us-east-1", "--fleet", "test", "--types", "g5.xlarge,g5.12xlarge"]
CLI_ARGS += ["--ami", SCOPE.ami or "", "--subnets", SCOPE.subnets[0], "--security-groups", SCOPE.security_groups[0]]
CLI_ARGS += ["--artifact", SCOPE.artifact, "--ssm-path", "/traincast/agent/"]
CALLER = f"arn:aws:sts::{ACCOUNT}:assumed-role/traincast-controller-test/session-1"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/traincast-controller-test"
SPOT = "AWSServiceRoleForEC2Spot"
# (client, operation, response or (error code, HTTP status), expected parameters or None) per check, in call order.
Step = tuple[str, str, Any, Any]


def steps() -> dict[str, list[Step]]:
    """Every check's AWS calls with answers that pass."""
    allowed = {"EvaluationResults": [{"EvalActionName": "ec2:RunInstances", "EvalDecision": "allowed"}]}
    scoped = Scope(**{**SCOPE.__dict__, "account": ACCOUNT})
    quota = {"Quota": {"Value": 48.0}}
    return {
        "credentials": [("sts", "get_caller_identity", {"Account": ACCOUNT, "Arn": CALLER, "UserId": "AROA:s"}, {})],
        "controller policy": [("iam", "simulate_principal_policy", allowed, None)] * len(simulation.requests(scoped)),
        "subnets": [
            (
                "ec2",
                "describe_subnets",
                {"Subnets": [{"SubnetId": SCOPE.subnets[0], "AvailabilityZone": "us-east-1a"}]},
                {"SubnetIds": list(SCOPE.subnets)},
            )
        ],
        "AMI": [
            ("ssm", "get_parameter", {"Parameter": {"Name": PARAM, "Value": "ami-0123456789abcdef0"}}, {"Name": PARAM}),
            (
                "ec2",
                "describe_images",
                {"Images": [{"ImageId": "ami-0123456789abcdef0", "State": "available", "Name": "DLAMI"}]},
                {"ImageIds": ["ami-0123456789abcdef0"]},
            ),
        ],
        "security groups": [
            (
                "ec2",
                "describe_security_groups",
                {"SecurityGroups": [{"GroupId": SCOPE.security_groups[0], "GroupName": "agents"}]},
                None,
            )
        ],
        "instance profile": [
            (
                "iam",
                "get_instance_profile",
                {
                    "InstanceProfile": {
                        "InstanceProfileName": "traincast-agent-test",
                        "Path": "/",
                        "InstanceProfileId": "AIPAEXAMPLE0000000000",
                        "Arn": f"arn:aws:iam::{ACCOUNT}:instance-profile/traincast-agent-test",
                        "CreateDate": "2026-01-01T00:00:00Z",
                        "Roles": [
                            {
                                "RoleName": "traincast-agent-test",
                                "Path": "/",
                                "RoleId": "AROAEXAMPLE0000000000",
                                "Arn": f"arn:aws:iam::{ACCOUNT}:role/traincast-agent-test",
                                "CreateDate": "2026-01-01T00:00:00Z",
                            }
                        ],
                    }
                },
                {"InstanceProfileName": "traincast-agent-test"},
            )
        ],
        "SSM parameters": [
            (
                "ssm",
                "get_parameters_by_path",
                {
                    "Parameters": [
                        {"Name": "/traincast/agent/database_url", "Type": "SecureString"},
                        {"Name": "/traincast/agent/redis_url", "Type": "SecureString"},
                    ]
                },
                {"Path": "/traincast/agent", "Recursive": False, "WithDecryption": False},
            )
        ],
        "agent artifact": [("s3", "head_object", {}, {"Bucket": "traincast-artifacts", "Key": "agent/current.json"})],
        "vCPU quotas": [
            (
                "ec2",
                "describe_instance_types",
                {
                    "InstanceTypes": [
                        {"InstanceType": "g5.xlarge", "VCpuInfo": {"DefaultVCpus": 4}},
                        {"InstanceType": "g5.12xlarge", "VCpuInfo": {"DefaultVCpus": 48}},
                    ]
                },
                {"InstanceTypes": ["g5.xlarge", "g5.12xlarge"]},
            ),
            ("quotas", "get_service_quota", quota, {"ServiceCode": "ec2", "QuotaCode": "L-3819A6DF"}),
            ("quotas", "get_service_quota", quota, {"ServiceCode": "ec2", "QuotaCode": "L-DB2E81BA"}),
        ],
        "spot service-linked role": [
            (
                "iam",
                "get_role",
                {
                    "Role": {
                        "RoleName": SPOT,
                        "Path": "/aws-service-role/spot.amazonaws.com/",
                        "RoleId": "AROAEXAMPLE0000000001",
                        "Arn": f"arn:aws:iam::{ACCOUNT}:role/aws-service-role/spot.amazonaws.com/{SPOT}",
                        "CreateDate": "2026-01-01T00:00:00Z",
                    }
                },
                {"RoleName": SPOT},
            )
        ],
    }


@contextmanager
def stubbed(plan: dict[str, list[Step]]) -> Iterator[check.Clients]:
    """Clients whose every call must be the next planned one; all planned calls must be made."""
    services = {"sts": "sts", "iam": "iam", "ec2": "ec2", "ssm": "ssm", "s3": "s3", "quotas": "service-quotas"}
    clients = {
        k: boto3.client(v, region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s")
        for k, v in services.items()
    }
    with ExitStack() as stack:
        stubs = {k: stack.enter_context(Stubber(c)) for k, c in clients.items()}
        for client, op, answer, params in (s for group in plan.values() for s in group):
            if isinstance(answer, tuple):
                code, status, *message = answer
                stubs[client].add_client_error(
                    op,
                    service_error_code=code,
                    service_message="".join(message),
                    http_status_code=status,
                    expected_params=params,
                )
            else:
                stubs[client].add_response(op, answer, params)
        yield check.Clients(**clients)
        for s in stubs.values():
            s.assert_no_pending_responses()


def test_all_checks_pass() -> None:
    with stubbed(steps()) as clients:
        results = check.run(SCOPE, clients)
    assert [(r.name, r.ok) for r in results] == [(name, True) for name in steps()]
    assert ROLE in results[1].detail
    assert all(r.line().startswith("✓ ") for r in results)


def _denied_once(plan: dict[str, list[Step]]) -> None:
    sims = plan["controller policy"]
    denied = {"EvaluationResults": [{"EvalActionName": "ec2:RunInstances", "EvalDecision": "implicitDeny"}]}
    plan["controller policy"] = [*sims[:-1], ("iam", "simulate_principal_policy", denied, None)]


def _answer(name: str, index: int, answer: Any) -> Any:
    def change(plan: dict[str, list[Step]]) -> None:
        client, op, _, params = plan[name][index]
        plan[name] = [*plan[name][:index], (client, op, answer, params)]  # later calls of that check are not made

    return change


FAILURES = {
    "controller policy": (_denied_once, "1 of", "traincast fleet policy --role controller"),
    "subnets": (
        _answer(
            "subnets", 0, ("InvalidSubnetID.NotFound", 400, "The subnet ID 'subnet-0aaa1111bbb22222' does not exist")
        ),
        "not found in us-east-1: The subnet ID 'subnet-0aaa1111bbb22222' does not exist",
        "FLEET_SUBNETS",
    ),
    "AMI": (_answer("AMI", 0, ("ParameterNotFound", 400)), f"{PARAM} not found", "FLEET_AMI"),
    "security groups": (
        _answer("security groups", 0, ("InvalidGroup.NotFound", 400)),
        "not found",
        "FLEET_SECURITY_GROUPS",
    ),
    "instance profile": (
        _answer("instance profile", 0, ("NoSuchEntity", 404)),
        "does not exist",
        "traincast-fleet.yaml",
    ),
    "SSM parameters": (
        _answer("SSM parameters", 0, {"Parameters": [{"Name": "/traincast/agent/database_url", "Type": "String"}]}),
        "missing under /traincast/agent: redis_url",
        "aws ssm put-parameter --type SecureString",
    ),
    "agent artifact": (_answer("agent artifact", 0, ("404", 404)), "does not exist", "traincast fleet publish"),
    "vCPU quotas": (
        _answer("vCPU quotas", 2, {"Quota": {"Value": 0.0}}),
        "is 0 vCPUs, one g5.12xlarge needs 48",
        "--quota-code L-DB2E81BA --desired-value 48",
    ),
    "spot service-linked role": (
        _answer("spot service-linked role", 0, ("NoSuchEntity", 404)),
        "does not exist",
        "create-service-linked-role --aws-service-name spot.amazonaws.com",
    ),
}


@pytest.mark.parametrize("name", FAILURES)
def test_each_failure_says_what_and_how_to_fix(name: str) -> None:
    change, detail, fix = FAILURES[name]
    plan = steps()
    change(plan)
    with stubbed(plan) as clients:
        results = check.run(SCOPE, clients)
    failed = [r for r in results if not r.ok]
    assert [r.name for r in failed] == [name]
    line = failed[0].line()
    assert line.startswith(f"✗ {name}: ") and "\n" not in line
    what, how = line.split(" — fix: ")
    assert detail in what and fix in how


def test_denied_check_calls_name_the_operator_policy_and_missing_credentials_stop() -> None:
    plan = steps()
    _answer("subnets", 0, ("UnauthorizedOperation", 403))(plan)
    with stubbed(plan) as clients:
        subnets = check.run(SCOPE, clients)[2]
    assert (subnets.ok, subnets.detail) == (False, "ec2:DescribeSubnets refused (UnauthorizedOperation)")
    assert "traincast fleet policy --role operator" in subnets.fix
    with stubbed({"credentials": [("sts", "get_caller_identity", ("ExpiredToken", 403), {})]}) as clients:
        [only] = check.run(SCOPE, clients)
    assert (only.name, only.ok) == ("credentials", False) and "aws sso login" in only.fix


def test_quota_never_set_falls_back_to_the_default() -> None:
    plan = steps()
    default = [
        (
            "quotas",
            "get_aws_default_service_quota",
            {"Quota": {"Value": 64.0}},
            {"ServiceCode": "ec2", "QuotaCode": "L-3819A6DF"},
        )
    ]
    plan["vCPU quotas"] = [
        *plan["vCPU quotas"][:1],
        ("quotas", "get_service_quota", ("NoSuchResourceException", 400), None),
        *default,
        plan["vCPU quotas"][2],
    ]
    with stubbed(plan) as clients:
        quotas = check.run(SCOPE, clients)[-2]
    assert quotas.ok and "L-3819A6DF 64" in quotas.detail


def test_assumed_role_becomes_its_role() -> None:
    assert simulation.role_arn(CALLER) == ROLE
    user = f"arn:aws:iam::{ACCOUNT}:user/ops"
    assert simulation.role_arn(user) == user


def test_cli_prints_one_line_per_check_and_exits_by_the_result(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with stubbed(steps()) as clients:
        monkeypatch.setattr(check.Clients, "for_region", classmethod(lambda cls, region: clients))
        assert main(CLI_ARGS) == 0
    out = capsys.readouterr()
    assert out.out.count("\n") == len(steps()) and out.out.count("✓ ") == len(steps())
    assert "10 of 10 checks passed" in out.err
    plan = steps()
    _answer("agent artifact", 0, ("404", 404))(plan)
    with stubbed(plan) as clients:
        monkeypatch.setattr(check.Clients, "for_region", classmethod(lambda cls, region: clients))
        assert main(CLI_ARGS) == 1
    missing = "✗ agent artifact: s3://traincast-artifacts/agent/current.json does not exist"
    assert f"{missing} — fix: run `traincast fleet publish`\n" in capsys.readouterr().out
    assert main([*CLI_ARGS, "--principal", "root"]) == 1
    assert capsys.readouterr().err.startswith("error: --principal 'root'")

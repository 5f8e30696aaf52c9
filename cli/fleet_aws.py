"""`traincast fleet policy` and `traincast fleet check`: the fleet's AWS side, run with AWS credentials.

Unlike the other `fleet` sub-commands these do not go through the API. `register(fsub)` adds the
sub-parsers and `run(args)` handles them (None for a sub-command that is not one of these).
"""

import argparse
import json
import re
import sys
from collections.abc import Callable
from typing import Any

from cli.client import CliError

ROLES = ("controller", "agent", "operator")
PATTERNS = {
    "region": r"[a-z]{2}(-[a-z]+)+-\d",
    "account": r"\d{12}",
    "fleet": r"[A-Za-z0-9_.:/=+@-]{1,128}",
    "types": r"[a-z][a-z0-9-]*\.[a-z0-9-]+",
    "ami": r"ami-[0-9a-f]{8,17}|resolve:ssm:/[\w./-]+",
    "subnets": r"subnet-[0-9a-f]{8,17}",
    "security_groups": r"sg-[0-9a-f]{8,17}",
    "agent_role": r"arn:aws:iam::\d{12}:role/[\w+=,.@/-]+",
    "controller": r"arn:aws:iam::\d{12}:(role|user)/[\w+=,.@/-]+",
    "principal": r"arn:aws:iam::\d{12}:(role|user)/[\w+=,.@/-]+",
    "launch_templates": r"lt-[0-9a-f]{8,17}|[\w().\-/]{3,128}",
    "artifact": r"s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[\w!.*'()/-]*)?",
    "ssm_path": r"(/[\w.-]+)*/?",
    "kms_key": r"arn:aws:kms:[a-z0-9-]+:\d{12}:key/[0-9a-f-]+",
    "log_group": r"[\w#/.-]{1,512}",
}


def register(fsub: Any) -> None:
    """Add `policy` and `check` to the `fleet` sub-commands."""
    po = fsub.add_parser("policy", help="print the least-privilege IAM policy of the controller, agents or operator")
    po.add_argument("--role", choices=ROLES, required=True)
    _scope_arguments(po)
    ch = fsub.add_parser("check", help="preflight the AWS account before enabling the fleet (exit 0 only if all pass)")
    _scope_arguments(ch)
    ch.add_argument("--principal", help="IAM role or user ARN whose policy to simulate (default: these credentials')")


def _scope_arguments(p: argparse.ArgumentParser) -> None:
    """The fleet's configuration; each defaults to its FLEET_* setting where there is one."""
    p.add_argument("--region", help="default: FLEET_REGION")
    p.add_argument("--account", help="12 digits (default: the account of these AWS credentials)")
    p.add_argument("--fleet", help="default: FLEET_NAME")
    p.add_argument("--types", help="instance types the fleet may launch, a,b (default: FLEET_LAUNCH_TEMPLATES' types)")
    p.add_argument("--ami", help="ami-… or resolve:ssm:/aws/service/… (default: FLEET_AMI)")
    p.add_argument("--subnets", help="subnet ids a,b (default: FLEET_SUBNETS)")
    p.add_argument("--security-groups", help="group ids a,b (default: FLEET_SECURITY_GROUPS)")
    p.add_argument("--agent-role", help="the agents' role ARN (default: role/traincast-agent-<fleet>)")
    p.add_argument("--instance-profile", help="default: FLEET_INSTANCE_PROFILE, else traincast-agent-<fleet>")
    p.add_argument("--key-name", help="default: FLEET_KEY_NAME")
    p.add_argument("--launch-templates", help="template names or lt- ids a,b (default: FLEET_LAUNCH_TEMPLATES)")
    p.add_argument("--artifact", help="s3://bucket/prefix/ (default: FLEET_ARTIFACT)")
    p.add_argument("--ssm-path", help="default: FLEET_SSM_PATH")
    p.add_argument(
        "--kms-key", help="the SSM parameters' key ARN (default: any key, through SSM, for those parameters)"
    )
    p.add_argument("--log-group", help="the agents' CloudWatch Logs group (default: FLEET_LOG_GROUP)")
    p.add_argument("--controller", help="the controller's role ARN (default: role/traincast-controller-<fleet>)")
    p.add_argument("--no-spot", action="store_true", help="on-demand only (default: FLEET_SPOT)")


def _split(text: str | None) -> list[str] | None:
    return None if text is None else [v.strip() for v in text.split(",") if v.strip()]


def _valid(option: str, values: list[str], source: str = "") -> list[str]:
    pattern = re.compile(PATTERNS[option])
    for value in values:
        if not pattern.fullmatch(value):
            where = source or f"--{option.replace('_', '-')}"
            raise CliError(f"{where} {value!r}: not a valid value (expected {PATTERNS[option]})")
    return values


def scope_from(args: argparse.Namespace, *, need_account: bool = True) -> Any:
    """The fleet's Scope from the options, defaulting to the FLEET_* settings."""
    from fleet.iam import Scope
    from shared.core.settings import get_settings

    s = get_settings()

    def pick(option: str, default: Any, setting: str = "") -> Any:
        given = getattr(args, option)
        many = isinstance(default, list | tuple)
        value: Any = default if given is None else (_split(given) if many else given.strip())
        if value:
            _valid(option, list(value) if many else [str(value)], setting if given is None else "")
        return value

    templates = dict(s.fleet_launch_templates)
    region = pick("region", s.fleet_region, "FLEET_REGION")
    account = pick("account", "") or (_account(region) if need_account else "")
    return Scope(
        region=region,
        account=account,
        fleet=pick("fleet", s.fleet_name, "FLEET_NAME"),
        instance_types=tuple(pick("types", sorted(templates), "FLEET_LAUNCH_TEMPLATES")),
        ami=pick("ami", s.fleet_ami, "FLEET_AMI") or None,
        subnets=tuple(pick("subnets", list(s.fleet_subnets), "FLEET_SUBNETS")),
        security_groups=tuple(pick("security_groups", list(s.fleet_security_groups), "FLEET_SECURITY_GROUPS")),
        agent_role_arn=pick("agent_role", ""),
        instance_profile=(args.instance_profile or s.fleet_instance_profile).strip(),
        key_name=(args.key_name or s.fleet_key_name).strip(),
        launch_templates=tuple(pick("launch_templates", sorted(set(templates.values())), "FLEET_LAUNCH_TEMPLATES")),
        spot=s.fleet_spot and not args.no_spot,
        ssm_path=pick("ssm_path", s.fleet_ssm_path, "FLEET_SSM_PATH"),
        kms_key_arn=pick("kms_key", ""),
        artifact=pick("artifact", getattr(s, "fleet_artifact", ""), "FLEET_ARTIFACT"),
        log_group=pick("log_group", getattr(s, "fleet_log_group", ""), "FLEET_LOG_GROUP"),
        controller_arn=pick("controller", ""),
    )


def _account(region: str) -> str:
    """The account of the AWS credentials in use."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return str(boto3.client("sts", region_name=region).get_caller_identity()["Account"])
    except (BotoCoreError, ClientError) as exc:
        raise CliError(
            f"--account: give the 12-digit AWS account id (no AWS credentials to look it up: {exc})"
        ) from None


def _policy(args: argparse.Namespace) -> int:
    from fleet.iam import policy

    scope = scope_from(args)
    if args.role in ("controller", "operator") and not scope.instance_types:
        raise CliError("--types: name the instance types the fleet may launch, e.g. --types g5.xlarge,g6.xlarge")
    if args.role == "controller" and not scope.ami and not scope.launch_templates:
        raise CliError("--ami: give the AMI (ami-… or resolve:ssm:/aws/service/…), or launch templates")
    print(json.dumps(policy(args.role, scope), indent=2))
    return 0


def _check(args: argparse.Namespace, clients: Any = None) -> int:
    from fleet import check

    if args.principal:
        _valid("principal", [args.principal])
    scope = scope_from(args, need_account=False)
    results = check.run(scope, clients or check.Clients.for_region(scope.region), principal=args.principal or "")
    for r in results:
        print(r.line())
    failed = sum(not r.ok for r in results)
    print(f"{len(results) - failed} of {len(results)} checks passed", file=sys.stderr)
    return 1 if failed else 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {"policy": _policy, "check": _check}


def run(args: argparse.Namespace) -> int | None:
    """Carry out one of these sub-commands; None when args name another `fleet` sub-command."""
    handler = COMMANDS.get(args.fleet_command)
    return None if handler is None else handler(args)

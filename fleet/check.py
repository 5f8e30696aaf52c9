"""`traincast fleet check`: preflight an AWS account before the fleet is enabled, one line per check.

Every check reads; none changes anything or reads a secret's value.
"""

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from fleet.iam import simulate as simulation
from fleet.iam.calls import POINTER, SECRETS, Scope
from fleet.quotas import quota_code

DENIED = {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "AuthFailure"}
POLICY_FIX = "attach `traincast fleet policy --role {role}` (deploy/aws/traincast-fleet.yaml has it) to {who}"
SHOWN = 3  # denied authorizations named in the line; the rest are counted


@dataclass(frozen=True)
class Result:
    """One check's outcome, and how to fix it when it failed."""

    name: str
    ok: bool
    detail: str
    fix: str = ""

    def line(self) -> str:
        """✓ name: detail, or ✗ name: detail — fix: …"""
        return f"✓ {self.name}: {self.detail}" if self.ok else f"✗ {self.name}: {self.detail} — fix: {self.fix}"


@dataclass(frozen=True)
class Clients:
    """The AWS clients the checks use."""

    sts: Any
    iam: Any
    ec2: Any
    ssm: Any
    s3: Any
    quotas: Any

    @classmethod
    def for_region(cls, region: str) -> "Clients":
        """boto3 clients in the region, from the default credential chain."""
        import boto3

        session = boto3.session.Session(region_name=region)
        names = {"sts": "sts", "iam": "iam", "ec2": "ec2", "ssm": "ssm", "s3": "s3", "quotas": "service-quotas"}
        return cls(**{field: session.client(service) for field, service in names.items()})


class Failed(Exception):
    """A check's failure: what is wrong and its fix."""

    def __init__(self, detail: str, fix: str) -> None:
        super().__init__(detail)
        self.detail, self.fix = detail, fix


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _not_found(exc: ClientError, codes: tuple[str, ...], detail: str, fix: str) -> None:
    """Raise Failed when AWS's error code says the thing is not there; return for any other error."""
    if _code(exc).startswith(codes):
        raise Failed(detail, fix) from exc


def _aws_error(exc: Exception, action: str) -> Failed:
    if isinstance(exc, ClientError):
        code, message = _code(exc), exc.response.get("Error", {}).get("Message", "")
        if code in DENIED:
            return Failed(f"{action} refused ({code})", POLICY_FIX.format(role="operator", who="these credentials"))
        return Failed(f"{action}: {code}: {message}", "see AWS's message")
    return Failed(f"{action}: {exc}", "check the network and the region")


def simulate(scope: Scope, clients: Clients, principal: str) -> str:
    """Simulate every authorization of the controller's calls for the principal; raise Failed on a denial."""
    asked = simulation.requests(scope)
    try:
        refused = simulation.denied(clients.iam, principal, asked)
    except ClientError as exc:
        fix = f"allow iam:SimulatePrincipalPolicy on {principal} (`traincast fleet policy --role operator`)"
        raise Failed(f"cannot simulate {principal}: {_code(exc)}", fix) from exc
    if refused:
        named = "; ".join(f"{r.action} on {r.resource}" for r in refused[:SHOWN])
        more = f"; and {len(refused) - SHOWN} more" if len(refused) > SHOWN else ""
        detail = f"{len(refused)} of {len(asked)} authorizations denied for {principal}: {named}{more}"
        raise Failed(detail, POLICY_FIX.format(role="controller", who=principal))
    return f"{principal} may make all {len(asked)} authorizations of the controller's calls"


def subnets(scope: Scope, clients: Clients) -> str:
    """The configured subnets exist in the region."""
    if not scope.subnets:
        if scope.launch_templates:
            return "none configured: the launch templates' network is used"
        raise Failed(
            "FLEET_SUBNETS is empty (instances would go to the default VPC)",
            "set FLEET_SUBNETS (stack output FleetSubnets)",
        )
    try:
        found = clients.ec2.describe_subnets(SubnetIds=list(scope.subnets))["Subnets"]
    except ClientError as exc:
        message = exc.response["Error"].get("Message", "")
        _not_found(exc, ("InvalidSubnetID",), f"not found in {scope.region}: {message}", "correct FLEET_SUBNETS")
        raise
    outside = [s["SubnetId"] for s in found if not s["AvailabilityZone"].startswith(scope.region)]
    if outside:
        raise Failed(f"not in {scope.region}: {', '.join(outside)}", "use subnets of FLEET_REGION")
    return ", ".join(f"{s['SubnetId']} ({s['AvailabilityZone']})" for s in found)


def image(scope: Scope, clients: Clients) -> str:
    """The AMI (or the SSM public parameter naming it) exists in the region."""
    if not scope.ami:
        if scope.launch_templates:
            return "none configured: the launch templates name theirs"
        raise Failed("FLEET_AMI is empty", "set FLEET_AMI to an AMI id or resolve:ssm:/aws/service/deeplearning/ami/…")
    ami, via = scope.ami, ""
    if scope.public_ami_parameter:
        try:
            ami = clients.ssm.get_parameter(Name=scope.public_ami_parameter)["Parameter"]["Value"]
        except ClientError as exc:
            missing = f"SSM parameter {scope.public_ami_parameter} not found in {scope.region}"
            _not_found(exc, ("ParameterNotFound",), missing, "correct FLEET_AMI")
            raise
        via = f" (from {scope.public_ami_parameter})"
    try:
        images = clients.ec2.describe_images(ImageIds=[ami])["Images"]
    except ClientError as exc:
        if not _code(exc).startswith("InvalidAMIID"):
            raise
        images = []
    if not images or images[0].get("State") != "available":
        raise Failed(f"{ami}{via} is not an available image in {scope.region}", "correct FLEET_AMI (AMIs are regional)")
    return f"{ami}{via}: {images[0].get('Name', '')}"


def security_groups(scope: Scope, clients: Clients) -> str:
    """The configured security groups exist in the region."""
    if not scope.security_groups:
        if scope.launch_templates:
            return "none configured: the launch templates' groups are used"
        raise Failed(
            "FLEET_SECURITY_GROUPS is empty (the VPC's default group would be used)",
            "set FLEET_SECURITY_GROUPS (stack output FleetSecurityGroups)",
        )
    try:
        found = clients.ec2.describe_security_groups(GroupIds=list(scope.security_groups))["SecurityGroups"]
    except ClientError as exc:
        message = exc.response["Error"].get("Message", "")
        _not_found(exc, ("InvalidGroup",), f"not found in {scope.region}: {message}", "correct FLEET_SECURITY_GROUPS")
        raise
    return ", ".join(f"{g['GroupId']} ({g.get('GroupName', '')})" for g in found)


def instance_profile(scope: Scope, clients: Clients) -> str:
    """The agents' instance profile exists and holds a role."""
    name = scope.profile_name
    try:
        roles = clients.iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]["Roles"]
    except ClientError as exc:
        fix = "deploy deploy/aws/traincast-fleet.yaml, or correct FLEET_INSTANCE_PROFILE"
        _not_found(exc, ("NoSuchEntity",), f"{name} does not exist", fix)
        raise
    if not roles:
        raise Failed(
            f"{name} holds no role",
            f"aws iam add-role-to-instance-profile --instance-profile-name {name} --role-name <agent role>",
        )
    return f"{name} (role {roles[0]['RoleName']})"


def secrets(scope: Scope, clients: Clients) -> str:
    """database_url and redis_url are SecureString parameters under FLEET_SSM_PATH (names only)."""
    path = scope.ssm_parameter_path
    pages = clients.ssm.get_paginator("get_parameters_by_path").paginate(
        Path=path, Recursive=False, WithDecryption=False
    )
    types = {p["Name"].rsplit("/", 1)[-1]: p.get("Type", "") for page in pages for p in page.get("Parameters", [])}
    missing = [n for n in SECRETS if n not in types]
    plain = [n for n in SECRETS if n in types and types[n] != "SecureString"]
    key = f"alias/traincast-{scope.fleet}"
    put = f"aws ssm put-parameter --type SecureString --key-id {key} --name {path.rstrip('/')}/NAME --value '…'"
    if missing:
        raise Failed(f"missing under {path}: {', '.join(missing)}", put.replace("NAME", missing[0]))
    if plain:
        raise Failed(
            f"not SecureString under {path}: {', '.join(plain)}", put.replace("NAME", plain[0]) + " --overwrite"
        )
    return f"{', '.join(SECRETS)} under {path} (SecureString)"


def artifact(scope: Scope, clients: Clients) -> str:
    """The published pointer <FLEET_ARTIFACT>current.json exists."""
    if not scope.artifact:
        return "FLEET_ARTIFACT not set: the AMI must carry the agent at /opt/traincast"
    bucket, prefix = scope.bucket_prefix()
    try:
        clients.s3.head_object(Bucket=bucket, Key=f"{prefix}{POINTER}")
    except ClientError as exc:
        where = f"s3://{bucket}/{prefix}{POINTER}"
        _not_found(exc, ("404", "NoSuchKey", "NotFound"), f"{where} does not exist", "run `traincast fleet publish`")
        _not_found(exc, ("403",), f"reading {where} was refused", POLICY_FIX.format(role="operator", who="you"))
        raise
    return f"s3://{bucket}/{prefix}{POINTER}"


def quotas(scope: Scope, clients: Clients) -> str:
    """Each vCPU quota the configured types count against holds one instance of its largest type."""
    if not scope.instance_types:
        raise Failed("no instance types to check", "name them: --types g5.xlarge,g6.xlarge")
    found = clients.ec2.describe_instance_types(InstanceTypes=list(scope.instance_types))["InstanceTypes"]
    vcpus = {t["InstanceType"]: int(t["VCpuInfo"]["DefaultVCpus"]) for t in found}
    need: dict[str, tuple[int, str, str]] = {}
    for t in scope.instance_types:
        for market in ("on-demand", "spot") if scope.spot else ("on-demand",):
            code, name = quota_code(t, market)
            if not code:
                raise Failed(
                    f"no known quota code for {t} ({name})", "aws service-quotas list-service-quotas --service-code ec2"
                )
            if code not in need or vcpus.get(t, 0) > need[code][0]:
                need[code] = (vcpus.get(t, 0), t, name)
    low, shown = [], []
    for code, (wanted, t, name) in sorted(need.items()):
        try:
            value = clients.quotas.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"]
        except ClientError as exc:
            if _code(exc) != "NoSuchResourceException":
                raise
            value = clients.quotas.get_aws_default_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"]
        shown.append(f"{code} {value:g}")
        if value < wanted:
            low.append((code, value, wanted, t, name))
    if low:
        code, value, wanted, t, name = low[0]
        detail = "; ".join(f"{n} ({c}) is {v:g} vCPUs, one {ty} needs {w}" for c, v, w, ty, n in low)
        fix = "aws service-quotas request-service-quota-increase --service-code ec2 "
        fix += f"--quota-code {code} --desired-value {wanted} --region {scope.region}"
        raise Failed(detail, fix)
    return ", ".join(shown) + " vCPUs"


def spot_role(scope: Scope, clients: Clients) -> str:
    """The EC2 Spot service-linked role exists (spot launches fail without it)."""
    if not scope.spot:
        return "not needed: FLEET_SPOT is false"
    try:
        clients.iam.get_role(RoleName="AWSServiceRoleForEC2Spot")
    except ClientError as exc:
        fix = "aws iam create-service-linked-role --aws-service-name spot.amazonaws.com"
        _not_found(exc, ("NoSuchEntity",), "AWSServiceRoleForEC2Spot does not exist", fix)
        raise
    return "AWSServiceRoleForEC2Spot exists"


CHECKS: list[tuple[str, str, Callable[[Scope, Clients], str]]] = [
    ("subnets", "ec2:DescribeSubnets", subnets),
    ("AMI", "ec2:DescribeImages", image),
    ("security groups", "ec2:DescribeSecurityGroups", security_groups),
    ("instance profile", "iam:GetInstanceProfile", instance_profile),
    ("SSM parameters", "ssm:GetParametersByPath", secrets),
    ("agent artifact", "s3:HeadObject", artifact),
    ("vCPU quotas", "servicequotas:GetServiceQuota", quotas),
    ("spot service-linked role", "iam:GetRole", spot_role),
]


def _one(name: str, action: str, check: Callable[[], str]) -> Result:
    try:
        return Result(name, True, check())
    except Failed as f:
        return Result(name, False, f.detail, f.fix)
    except (ClientError, BotoCoreError) as exc:
        aws = _aws_error(exc, action)
        return Result(name, False, aws.detail, aws.fix)


def run(scope: Scope, clients: Clients, *, principal: str = "") -> list[Result]:
    """Every check, in order; the account comes from the credentials. Stops after failed credentials."""
    try:
        who = clients.sts.get_caller_identity()
    except (ClientError, BotoCoreError) as exc:
        fix = "configure AWS credentials (AWS_PROFILE, `aws sso login`, an instance role, or keys)"
        return [Result("credentials", False, f"no usable AWS credentials: {exc}", fix)]
    results = [Result("credentials", True, f"{who['Arn']} (account {who['Account']})")]
    if scope.account and scope.account != who["Account"]:
        other = f"credentials are for {who['Account']}, not {scope.account}"
        results.append(Result("account", False, other, "use the fleet account's credentials"))
    scope = replace(scope, account=who["Account"])
    target = principal or simulation.role_arn(who["Arn"])
    results.append(_one("controller policy", "iam:SimulatePrincipalPolicy", lambda: simulate(scope, clients, target)))
    results += [_one(name, action, lambda c=check: c(scope, clients)) for name, action, check in CHECKS]  # type: ignore[misc]
    return results

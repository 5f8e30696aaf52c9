"""Every AWS call the fleet's three principals make, and each IAM authorization AWS does for it.

The controller (`python -m fleet`, and `traincast catalog refresh` run with its
credentials), the agent instance role, and the operator (`traincast fleet publish` and
`traincast fleet check`). One API call can be several authorizations: RunInstances authorizes the
instance, its volume, image, subnet, network interface, security groups, key pair, launch template,
spot request, the tags and the role passed, each with its own resource ARN and condition keys.
The policies (policies.py) are written to allow exactly these; tests/unit/test_fleet_iam.py proves it.
"""

from dataclasses import dataclass, field

from fleet.quotas import ON_DEMAND, SPOT, quota_code

# The Pricing API has no endpoint in most regions; fleet/catalog.py calls the us-east-1 one.
PRICING_REGION = "us-east-1"
# Owners of the AWS Deep Learning AMIs a `resolve:ssm:/aws/service/deeplearning/...` name resolves to.
DLAMI_OWNERS = ("amazon", "898082745236")
RESOLVE_SSM = "resolve:ssm:"
SPOT_ROLE_ARN = "arn:aws:iam::{account}:role/aws-service-role/spot.amazonaws.com/AWSServiceRoleForEC2Spot"
SECRETS = ("database_url", "redis_url")
POINTER = "current.json"
# The vCPU quotas of the GPU families (G and VT, P), on-demand and spot.
GPU_QUOTA_CODES = tuple(sorted(table[group][0] for table in (ON_DEMAND, SPOT) for group in ("g", "p")))
# Stand-ins for ids AWS makes up at run time (a new instance's id, a resolved AMI).
EXAMPLE_INSTANCE = "i-0123456789abcdef0"
EXAMPLE_IMAGE = "ami-0123456789abcdef0"
EXAMPLE_WHEEL = "wheels/0123456789abcdef/traincast-0.1.0-py3-none-any.whl"

Context = dict[str, tuple[str, ...]]


@dataclass(frozen=True)
class Scope:
    """What the fleet is configured with: the policies allow this and nothing else."""

    region: str
    account: str
    fleet: str = "default"
    instance_types: tuple[str, ...] = ()
    ami: str | None = None  # ami-…, or resolve:ssm:/aws/service/…; None: the launch templates name it
    subnets: tuple[str, ...] = ()
    security_groups: tuple[str, ...] = ()
    agent_role_arn: str = ""  # default: the template's role traincast-agent-<fleet>
    instance_profile: str = ""  # name or ARN; default: traincast-agent-<fleet>
    key_name: str = ""
    launch_templates: tuple[str, ...] = ()  # names or lt- ids
    spot: bool = True
    ssm_path: str = "/traincast/agent/"
    kms_key_arn: str = ""  # empty: any key of the account, used through SSM for these parameters
    artifact: str = ""  # s3://bucket/prefix/ (FLEET_ARTIFACT)
    log_group: str = ""
    controller_arn: str = ""  # the principal `fleet check` simulates; default: the template's role

    def arn(self, service: str, resource: str, *, region: bool = True, account: bool = True) -> str:
        """An ARN in this scope's region and account."""
        return f"arn:aws:{service}:{self.region if region else ''}:{self.account if account else ''}:{resource}"

    def ec2(self, resource: str) -> str:
        """An EC2 ARN in this region and account."""
        return self.arn("ec2", resource)

    def image(self, image_id: str) -> str:
        """An AMI's ARN: regional, with no account in it."""
        return self.arn("ec2", f"image/{image_id}", account=False)

    @property
    def agent_role(self) -> str:
        """The role the controller passes to agent instances."""
        return self.agent_role_arn or f"arn:aws:iam::{self.account}:role/traincast-agent-{self.fleet}"

    @property
    def profile_name(self) -> str:
        """The agents' instance profile's name."""
        return self.instance_profile.rsplit("/", 1)[-1] or f"traincast-agent-{self.fleet}"

    @property
    def controller(self) -> str:
        """The controller's principal ARN."""
        return self.controller_arn or f"arn:aws:iam::{self.account}:role/traincast-controller-{self.fleet}"

    @property
    def ssm_parameter_path(self) -> str:
        """FLEET_SSM_PATH as GetParametersByPath takes it: no trailing slash."""
        return self.ssm_path.rstrip("/") or "/"

    @property
    def public_ami_parameter(self) -> str:
        """The SSM public parameter an AMI given as resolve:ssm:NAME names, else ''."""
        return self.ami.removeprefix(RESOLVE_SSM) if self.ami and self.ami.startswith(RESOLVE_SSM) else ""

    def ssm_parameter(self, name: str) -> str:
        """The ARN of a parameter (name starting with /)."""
        public = name.startswith("/aws/service/")
        return self.arn("ssm", f"parameter{name}", account=not public)

    def bucket_prefix(self) -> tuple[str, str]:
        """FLEET_ARTIFACT split into bucket and prefix ('' and '' when unset)."""
        bucket, _, prefix = self.artifact.removeprefix("s3://").partition("/")
        return bucket, prefix if not prefix or prefix.endswith("/") else prefix + "/"


@dataclass(frozen=True)
class Request:
    """One authorization: an action on one resource, with the request's condition keys."""

    action: str
    resource: str
    context: Context = field(default_factory=dict)


@dataclass(frozen=True)
class Call:
    """One API call a principal makes, in one of its cases, and the authorizations it needs."""

    principal: str  # controller | agent | operator
    api: str  # e.g. ec2.RunInstances
    case: str
    requests: tuple[Request, ...]
    free: bool = False  # needs no permission (sts:GetCallerIdentity)


def _tags(scope: Scope, machine_type: str) -> Context:
    """The request-tag keys of a fleet launch (fleet/ec2.py tags instance and volume)."""
    tags = {"app": "traincast", "traincast:machine-type": machine_type, "traincast:fleet": scope.fleet}
    tags["Name"] = f"traincast-agent-{machine_type}"
    return {f"aws:RequestTag/{k}": (v,) for k, v in tags.items()} | {"aws:TagKeys": tuple(tags)}


def _run_instances(scope: Scope, machine_type: str, market: str, subnet: str, template: str) -> Call:
    """RunInstances of one type in one market and subnet, from the AMI ('' template) or a template."""
    region: Context = {"aws:RequestedRegion": (scope.region,)}
    tags = _tags(scope, machine_type) | region
    instance = tags | {
        "ec2:InstanceType": (machine_type,),
        "ec2:InstanceMarketType": (market,),
        "ec2:MetadataHttpTokens": ("required",),
    }
    reqs = [Request("ec2:RunInstances", scope.ec2("instance/*"), instance)]
    reqs.append(Request("ec2:RunInstances", scope.ec2("volume/*"), tags))
    for kind in ("instance", "volume"):
        created = tags | {"ec2:CreateAction": ("RunInstances",)}
        reqs.append(Request("ec2:CreateTags", scope.ec2(f"{kind}/*"), created))
    if template:
        lt = template if template.startswith("lt-") else "lt-0123456789abcdef0"
        reqs.append(Request("ec2:RunInstances", scope.ec2(f"launch-template/{lt}"), region))
        reqs.append(Request("ec2:RunInstances", scope.image(EXAMPLE_IMAGE), {"ec2:Owner": (scope.account,)}))
    elif scope.public_ami_parameter:
        reqs.append(Request("ssm:GetParameters", scope.ssm_parameter(scope.public_ami_parameter), region))
        reqs.append(Request("ec2:RunInstances", scope.image(EXAMPLE_IMAGE), {"ec2:Owner": ("amazon",)}))
    else:
        reqs.append(Request("ec2:RunInstances", scope.image(str(scope.ami)), region))
    groups = scope.security_groups or ("sg-0123456789abcdef0",)
    reqs += [Request("ec2:RunInstances", scope.ec2(f"security-group/{sg}"), region) for sg in groups]
    subnet_arn = scope.ec2(f"subnet/{subnet}")
    reqs.append(Request("ec2:RunInstances", subnet_arn, region))
    reqs.append(Request("ec2:RunInstances", scope.ec2("network-interface/*"), region | {"ec2:Subnet": (subnet_arn,)}))
    if scope.key_name and not template:
        reqs.append(Request("ec2:RunInstances", scope.ec2(f"key-pair/{scope.key_name}"), region))
    if market == "spot":
        # Without this one no spot launch succeeds: EC2 authorizes the spot request it makes.
        reqs.append(Request("ec2:RunInstances", scope.ec2("spot-instances-request/*"), region))
    passed: Context = {"iam:PassedToService": ("ec2.amazonaws.com",)}
    reqs.append(Request("iam:PassRole", scope.agent_role, passed))
    how = f"launch template {template}" if template else f"AMI {scope.ami}"
    return Call("controller", "ec2.RunInstances", f"{market} {machine_type} in {subnet} from {how}", tuple(reqs))


def controller_calls(scope: Scope) -> list[Call]:
    """The controller's calls (fleet/ec2.py, lookup.py, fleet/catalog.py)."""
    region: Context = {"aws:RequestedRegion": (scope.region,)}
    own: Context = region | {"ec2:ResourceTag/app": ("traincast",), "ec2:ResourceTag/traincast:fleet": (scope.fleet,)}
    instance = scope.ec2(f"instance/{EXAMPLE_INSTANCE}")
    calls = [
        _run_instances(scope, t, market, subnet, template)
        for t in scope.instance_types
        for market in (("spot", "on-demand") if scope.spot else ("on-demand",))
        for subnet in scope.subnets or ("subnet-0123456789abcdef0",)
        for template in ((("",) if scope.ami else ()) + scope.launch_templates)
    ]
    if scope.launch_templates:
        for api in ("DescribeLaunchTemplates", "DescribeLaunchTemplateVersions"):
            calls.append(
                Call("controller", f"ec2.{api}", "launch from a template", (Request(f"ec2:{api}", "*", region),))
            )
    for api, case in (
        ("DescribeInstances", "the fleet's instances by tag; one instance by id"),
        ("DescribeInstanceTypes", "catalog refresh: specs"),
        ("DescribeSpotPriceHistory", "catalog refresh: spot prices"),
    ):
        calls.append(Call("controller", f"ec2.{api}", case, (Request(f"ec2:{api}", "*", region),)))
    for api, case in (
        ("TerminateInstances", "scale down, drain, lifetime, orphan"),
        ("GetConsoleOutput", "why a boot failed"),
    ):
        calls.append(Call("controller", f"ec2.{api}", case, (Request(f"ec2:{api}", instance, own),)))
    pricing = Request("pricing:GetProducts", "*", {"aws:RequestedRegion": (PRICING_REGION,)})
    calls.append(Call("controller", "pricing.GetProducts", "catalog refresh: on-demand prices", (pricing,)))
    return calls


def agent_calls(scope: Scope) -> list[Call]:
    """The agent instance's calls (shared/core/secrets.py, fleet/boot.sh and its CloudWatch agent)."""
    path = scope.ssm_parameter_path
    via: Context = {"kms:ViaService": (f"ssm.{scope.region}.amazonaws.com",)}
    key = scope.kms_key_arn or scope.arn("kms", "key/0123abcd-0123-4567-89ab-0123456789ab")
    reqs = [Request("ssm:GetParametersByPath", scope.ssm_parameter(path))]
    for name in SECRETS:
        parameter = scope.ssm_parameter(f"{path.rstrip('/')}/{name}")
        reqs.append(Request("kms:Decrypt", key, via | {"kms:EncryptionContext:PARAMETER_ARN": (parameter,)}))
    calls = [Call("agent", "ssm.GetParametersByPath", f"secrets under {path}, decrypted", tuple(reqs))]
    bucket, prefix = scope.bucket_prefix()
    if bucket:
        for key_name in (POINTER, EXAMPLE_WHEEL):
            get = Request("s3:GetObject", f"arn:aws:s3:::{bucket}/{prefix}{key_name}")
            calls.append(Call("agent", "s3.GetObject", f"boot: {key_name}", (get,)))
    if scope.log_group:
        group = scope.arn("logs", f"log-group:{scope.log_group}")
        stream = f"{group}:log-stream:{EXAMPLE_INSTANCE}"
        for action, resource in (
            ("logs:DescribeLogStreams", f"{group}:*"),
            ("logs:CreateLogStream", stream),
            ("logs:PutLogEvents", stream),
        ):
            calls.append(
                Call("agent", action.replace("logs:", "logs."), "CloudWatch agent", (Request(action, resource),))
            )
    return calls


def operator_calls(scope: Scope) -> list[Call]:
    """`traincast fleet publish` and `traincast fleet check` (fleet/publish.py, check.py)."""
    region: Context = {"aws:RequestedRegion": (scope.region,)}
    calls = [
        Call("operator", "sts.GetCallerIdentity", "check: credentials", (Request("sts:GetCallerIdentity", "*"),), True)
    ]
    bucket, prefix = scope.bucket_prefix()
    if bucket:
        for key_name in (EXAMPLE_WHEEL, POINTER):
            put = Request("s3:PutObject", f"arn:aws:s3:::{bucket}/{prefix}{key_name}")
            calls.append(Call("operator", "s3.PutObject", f"publish: {key_name}", (put,)))
        head = Request("s3:GetObject", f"arn:aws:s3:::{bucket}/{prefix}{POINTER}")
        # With ListBucket a missing object is a 404, not a 403 that looks like a permission problem.
        listing = Request("s3:ListBucket", f"arn:aws:s3:::{bucket}", {"s3:prefix": (f"{prefix}{POINTER}",)})
        calls.append(Call("operator", "s3.HeadObject", "check: the published pointer", (head, listing)))
    sim = Request("iam:SimulatePrincipalPolicy", scope.controller)
    calls.append(Call("operator", "iam.SimulatePrincipalPolicy", "check: the controller's calls", (sim,)))
    for api in ("DescribeSubnets", "DescribeSecurityGroups", "DescribeImages", "DescribeInstanceTypes"):
        calls.append(Call("operator", f"ec2.{api}", "check", (Request(f"ec2:{api}", "*", region),)))
    if scope.public_ami_parameter:
        get = Request("ssm:GetParameter", scope.ssm_parameter(scope.public_ami_parameter), region)
        calls.append(Call("operator", "ssm.GetParameter", "check: resolve the AMI", (get,)))
    names = Request("ssm:GetParametersByPath", scope.ssm_parameter(scope.ssm_parameter_path), region)
    calls.append(Call("operator", "ssm.GetParametersByPath", "check: secret names, not decrypted", (names,)))
    profile = Request("iam:GetInstanceProfile", f"arn:aws:iam::{scope.account}:instance-profile/{scope.profile_name}")
    calls.append(Call("operator", "iam.GetInstanceProfile", "check: the agents' profile", (profile,)))
    spot_role = Request("iam:GetRole", SPOT_ROLE_ARN.format(account=scope.account))
    calls.append(Call("operator", "iam.GetRole", "check: the spot service-linked role", (spot_role,)))
    for code in quota_codes(scope):
        quota = scope.arn("servicequotas", f"ec2/{code}")
        for api in ("GetServiceQuota", "GetAWSDefaultServiceQuota"):
            req = Request(f"servicequotas:{api}", quota, region)
            calls.append(Call("operator", f"service-quotas.{api}", f"check: vCPU quota {code}", (req,)))
    return calls


def quota_codes(scope: Scope) -> list[str]:
    """The vCPU quota codes the configured types count against, in both markets when spot is on."""
    markets = ("on-demand", "spot") if scope.spot else ("on-demand",)
    codes = (quota_code(t, m)[0] for t in scope.instance_types for m in markets)
    return sorted({c for c in codes if c})


def calls(scope: Scope, principal: str | None = None) -> list[Call]:
    """Every call of one principal (or of all three)."""
    everything = controller_calls(scope) + agent_calls(scope) + operator_calls(scope)
    return [c for c in everything if principal in (None, c.principal)]

"""The IAM policies of the controller, the agent instances and the operator, limited to one fleet's scope.

Each statement allows calls listed in calls.py and nothing else: one region (in every regional ARN
or, for actions without resource-level permissions, by aws:RequestedRegion), the configured
instance types, AMI, subnets, security groups and role, and only instances tagged as this fleet's.
deploy/aws/traincast-fleet.yaml carries the same documents (tests/unit/test_fleet_template.py).
"""

from typing import Any

from fleet.iam.calls import DLAMI_OWNERS, GPU_QUOTA_CODES, PRICING_REGION, SPOT_ROLE_ARN, Scope

Policy = dict[str, Any]
ROLES = ("controller", "agent", "operator")


def _statement(
    sid: str, actions: list[str], resources: list[str] | str, **conditions: dict[str, Any]
) -> dict[str, Any]:
    st: dict[str, Any] = {"Sid": sid, "Effect": "Allow", "Action": actions, "Resource": resources}
    if conditions:
        st["Condition"] = conditions
    return st


def _document(statements: list[dict[str, Any]]) -> Policy:
    return {"Version": "2012-10-17", "Statement": statements}


def _in_region(region: str) -> dict[str, Any]:
    return {"aws:RequestedRegion": region}


def controller_policy(scope: Scope) -> Policy:
    """What `python -m fleet` and `traincast catalog refresh` need, for this fleet only."""
    fleet_tags = {"aws:RequestTag/app": "traincast", "aws:RequestTag/traincast:fleet": scope.fleet}
    instance_cond = {"ec2:InstanceType": list(scope.instance_types), "ec2:MetadataHttpTokens": "required"}
    st = [
        _statement(
            "LaunchInstance", ["ec2:RunInstances"], scope.ec2("instance/*"), StringEquals=fleet_tags | instance_cond
        ),
        _statement("LaunchVolume", ["ec2:RunInstances"], scope.ec2("volume/*"), StringEquals=fleet_tags),
    ]
    if scope.spot:
        # EC2 authorizes the spot request a spot RunInstances makes; it carries no tags of ours.
        st.append(_statement("LaunchSpot", ["ec2:RunInstances"], scope.ec2("spot-instances-request/*")))
    subnets = [scope.ec2(f"subnet/{s}") for s in scope.subnets] or [scope.ec2("subnet/*")]
    groups = [scope.ec2(f"security-group/{g}") for g in scope.security_groups] or [scope.ec2("security-group/*")]
    network = [*subnets, *groups, scope.ec2("network-interface/*")]
    if scope.key_name and scope.ami:  # a launch template brings its own key pair
        network.append(scope.ec2(f"key-pair/{scope.key_name}"))
    st.append(_statement("LaunchNetwork", ["ec2:RunInstances"], network))
    if scope.ami and not scope.public_ami_parameter:
        st.append(_statement("LaunchImage", ["ec2:RunInstances"], [scope.image(scope.ami)]))
    if scope.public_ami_parameter:
        st.append(
            _statement(
                "LaunchPublicImage",
                ["ec2:RunInstances"],
                scope.image("*"),
                StringEquals={"ec2:Owner": list(DLAMI_OWNERS)},
            )
        )
        parameter = scope.ssm_parameter(scope.public_ami_parameter)
        st.append(_statement("ResolveImage", ["ssm:GetParameters"], [parameter]))
    if scope.launch_templates:
        ids = [t for t in scope.launch_templates if t.startswith("lt-")]
        # A template named by name has an id we do not know here; any of the account's, in this region.
        named = len(ids) < len(scope.launch_templates)
        templates = [scope.ec2("launch-template/*")] if named else [scope.ec2(f"launch-template/{t}") for t in ids]
        st.append(_statement("LaunchTemplate", ["ec2:RunInstances"], templates))
        own = {"ec2:Owner": scope.account}
        st.append(_statement("LaunchTemplateImage", ["ec2:RunInstances"], scope.image("*"), StringEquals=own))
    created = {"ec2:CreateAction": "RunInstances"} | fleet_tags
    tagged = [scope.ec2("instance/*"), scope.ec2("volume/*")]
    st.append(_statement("TagAtLaunch", ["ec2:CreateTags"], tagged, StringEquals=created))
    own_tags = {"ec2:ResourceTag/app": "traincast", "ec2:ResourceTag/traincast:fleet": scope.fleet}
    manage = ["ec2:GetConsoleOutput", "ec2:TerminateInstances"]
    st.append(_statement("ManageFleetInstances", manage, scope.ec2("instance/*"), StringEquals=own_tags))
    reads = ["ec2:DescribeInstanceTypes", "ec2:DescribeInstances", "ec2:DescribeSpotPriceHistory"]
    if scope.launch_templates:
        reads += ["ec2:DescribeLaunchTemplateVersions", "ec2:DescribeLaunchTemplates"]
    # These actions have no resource-level permissions: the region is the only limit AWS offers.
    st.append(_statement("Read", sorted(reads), "*", StringEquals=_in_region(scope.region)))
    st.append(_statement("ReadPrices", ["pricing:GetProducts"], "*", StringEquals=_in_region(PRICING_REGION)))
    passed = {"iam:PassedToService": "ec2.amazonaws.com"}
    st.append(_statement("PassAgentRole", ["iam:PassRole"], [scope.agent_role], StringEquals=passed))
    return _document(st)


def agent_policy(scope: Scope) -> Policy:
    """What an agent instance needs: its secrets, the published wheel, its log group."""
    path = scope.ssm_parameter_path
    st = [_statement("ReadSecrets", ["ssm:GetParametersByPath"], [scope.ssm_parameter(path)])]
    key = scope.kms_key_arn or scope.arn("kms", "key/*")
    under = scope.ssm_parameter(f"{path.rstrip('/')}/*")
    st.append(
        _statement(
            "DecryptSecrets",
            ["kms:Decrypt"],
            [key],
            StringEquals={"kms:ViaService": f"ssm.{scope.region}.amazonaws.com"},
            StringLike={"kms:EncryptionContext:PARAMETER_ARN": under},
        )
    )
    bucket, prefix = scope.bucket_prefix()
    if bucket:
        st.append(_statement("ReadArtifact", ["s3:GetObject"], [f"arn:aws:s3:::{bucket}/{prefix}*"]))
    if scope.log_group:
        group = scope.arn("logs", f"log-group:{scope.log_group}:*")
        logs = ["logs:CreateLogStream", "logs:DescribeLogStreams", "logs:PutLogEvents"]
        st.append(_statement("WriteLogs", logs, [group]))
    return _document(st)


def operator_policy(scope: Scope) -> Policy:
    """What `traincast fleet publish` and `traincast fleet check` need."""
    st = []
    bucket, prefix = scope.bucket_prefix()
    if bucket:
        objects = [f"arn:aws:s3:::{bucket}/{prefix}*"]
        st.append(_statement("PublishArtifact", ["s3:GetObject", "s3:PutObject"], objects))
        listing = {"s3:prefix": f"{prefix}*"}
        st.append(_statement("FindArtifact", ["s3:ListBucket"], [f"arn:aws:s3:::{bucket}"], StringLike=listing))
    st.append(_statement("SimulateController", ["iam:SimulatePrincipalPolicy"], [scope.controller]))
    profile = [f"arn:aws:iam::{scope.account}:instance-profile/{scope.profile_name}"]
    st.append(_statement("ReadAgentProfile", ["iam:GetInstanceProfile"], profile))
    st.append(_statement("ReadSpotRole", ["iam:GetRole"], [SPOT_ROLE_ARN.format(account=scope.account)]))
    reads = ["ec2:DescribeImages", "ec2:DescribeInstanceTypes", "ec2:DescribeSecurityGroups", "ec2:DescribeSubnets"]
    st.append(_statement("ReadNetwork", reads, "*", StringEquals=_in_region(scope.region)))
    names = [scope.ssm_parameter(scope.ssm_parameter_path)]
    st.append(_statement("ListSecretNames", ["ssm:GetParametersByPath"], names, StringEquals=_in_region(scope.region)))
    if scope.public_ami_parameter:
        public = [scope.ssm_parameter(scope.public_ami_parameter)]
        st.append(_statement("ResolveImage", ["ssm:GetParameter"], public, StringEquals=_in_region(scope.region)))
    # The four GPU vCPU quotas whatever the types (read-only): the template cannot map types to codes.
    quotas = [scope.arn("servicequotas", f"ec2/{code}") for code in GPU_QUOTA_CODES]
    actions = ["servicequotas:GetAWSDefaultServiceQuota", "servicequotas:GetServiceQuota"]
    st.append(_statement("ReadQuotas", actions, quotas, StringEquals=_in_region(scope.region)))
    return _document(st)


def policy(role: str, scope: Scope) -> Policy:
    """The policy document of one principal: controller, agent or operator."""
    makers = {"controller": controller_policy, "agent": agent_policy, "operator": operator_policy}
    return makers[role](scope)

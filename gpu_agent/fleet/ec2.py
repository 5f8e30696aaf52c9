"""The EC2 calls of the fleet: launch an agent instance, list the fleet's instances, terminate."""

import shlex
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from shared.errors import CapacityShort, LaunchRefused
from shared.settings import Settings

TAG_APP = "app"
TAG_TYPE = "traincast:machine-type"
TAG_FLEET = "traincast:fleet"
# "Not here, not now": the next market or subnet may have room, or a later pass. Every other
# error is a configuration problem (permissions, AMI, subnet) and is reported, not retried blindly.
CAPACITY_ERRORS = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientCapacity",
        "InsufficientHostCapacity",
        "InsufficientFreeAddressesInSubnet",
        "SpotMaxPriceTooLow",
        "MaxSpotInstanceCountExceeded",
        "VcpuLimitExceeded",
        "Unsupported",  # the type is not offered in this subnet's availability zone
    }
)
LIVE_STATES = ["pending", "running", "stopping", "stopped"]


@dataclass(frozen=True)
class LaunchConfig:
    """Where and how agent instances are launched."""

    fleet: str
    ami: str = ""
    subnets: tuple[str, ...] = ()
    security_groups: tuple[str, ...] = ()
    instance_profile: str = ""
    key_name: str = ""
    launch_templates: dict[str, str] = field(default_factory=dict)
    spot: bool = True
    region: str = "us-east-1"
    ssm_path: str = "/traincast/agent/"
    agent_command: str = "cd /opt/traincast && exec .venv/bin/python -m gpu_agent"

    @classmethod
    def from_settings(cls, s: Settings) -> "LaunchConfig":
        """The launch configuration from FLEET_* settings."""
        return cls(
            fleet=s.fleet_name,
            ami=s.fleet_ami,
            subnets=tuple(s.fleet_subnets),
            security_groups=tuple(s.fleet_security_groups),
            instance_profile=s.fleet_instance_profile,
            key_name=s.fleet_key_name,
            launch_templates=dict(s.fleet_launch_templates),
            spot=s.fleet_spot,
            region=s.fleet_region,
            ssm_path=s.fleet_ssm_path,
            agent_command=s.fleet_agent_command,
        )

    def can_launch(self, machine_type: str) -> bool:
        """A launch template for the type, or an AMI to launch from."""
        return bool(self.launch_templates.get(machine_type) or self.ami)


@dataclass(frozen=True)
class Launched:
    """An instance EC2 accepted."""

    instance_id: str
    market: str
    subnet_id: str | None


@dataclass(frozen=True)
class LiveInstance:
    """A fleet instance EC2 reports as not terminated."""

    instance_id: str
    machine_type: str
    launched_at: datetime
    market: str
    subnet_id: str | None


def user_data(machine_type: str, cfg: LaunchConfig) -> str:
    """The boot script: run the agent for this type, then power off (which terminates the instance).

    It carries no secret: the agent reads DATABASE_URL and REDIS_URL from SSM under
    cfg.ssm_path with the instance profile's permission.
    """
    md = "http://169.254.169.254/latest"
    return "\n".join(
        [
            "#!/bin/bash",
            "set -uo pipefail",
            f'TOKEN=$(curl -sf -X PUT {md}/api/token -H "X-aws-ec2-metadata-token-ttl-seconds: 300")',
            f'export AGENT_INSTANCE_ID=$(curl -sf -H "X-aws-ec2-metadata-token: $TOKEN" {md}/meta-data/instance-id)',
            f"export AGENT_MACHINE_TYPE={shlex.quote(machine_type)}",
            f"export TRAINCAST_SSM_PATH={shlex.quote(cfg.ssm_path)}",
            f"export AWS_REGION={shlex.quote(cfg.region)} AWS_DEFAULT_REGION={shlex.quote(cfg.region)}",
            f"( {cfg.agent_command} ) >>/var/log/traincast-agent.log 2>&1",
            # The agent exited (drained, or failed to start): an idle GPU instance only costs money.
            "shutdown -h now",
            "",
        ]
    )


def request(
    machine_type: str, cfg: LaunchConfig, *, subnet: str | None, market: str, max_price: float
) -> dict[str, Any]:
    """The RunInstances parameters for one attempt."""
    tags = [
        {"Key": TAG_APP, "Value": "traincast"},
        {"Key": TAG_TYPE, "Value": machine_type},
        {"Key": TAG_FLEET, "Value": cfg.fleet},
        {"Key": "Name", "Value": f"traincast-agent-{machine_type}"},
    ]
    req: dict[str, Any] = {
        "InstanceType": machine_type,
        "MinCount": 1,
        "MaxCount": 1,
        "UserData": user_data(machine_type, cfg),
        "TagSpecifications": [{"ResourceType": r, "Tags": tags} for r in ("instance", "volume")],
        # A powered-off agent instance must not linger as a stopped (still billed for disk) machine.
        "InstanceInitiatedShutdownBehavior": "terminate",
        "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled"},
        # Makes a retried call (timeout, throttling) launch once, not twice.
        "ClientToken": f"traincast-{uuid.uuid4()}",
    }
    template = cfg.launch_templates.get(machine_type)
    if template:
        key = "LaunchTemplateId" if template.startswith("lt-") else "LaunchTemplateName"
        req["LaunchTemplate"] = {key: template, "Version": "$Default"}
    else:
        req["ImageId"] = cfg.ami
        if cfg.security_groups:
            req["SecurityGroupIds"] = list(cfg.security_groups)
        if cfg.instance_profile:
            key = "Arn" if cfg.instance_profile.startswith("arn:") else "Name"
            req["IamInstanceProfile"] = {key: cfg.instance_profile}
        if cfg.key_name:
            req["KeyName"] = cfg.key_name
    if subnet:
        req["SubnetId"] = subnet
    if market == "spot":
        req["InstanceMarketOptions"] = {
            "MarketType": "spot",
            # Never more than on-demand: spot is only worth it when cheaper.
            "SpotOptions": {
                "MaxPrice": f"{max_price:.4f}",
                "SpotInstanceType": "one-time",
                "InstanceInterruptionBehavior": "terminate",
            },
        }
    return req


def launch(ec2: Any, machine_type: str, cfg: LaunchConfig, *, max_price: float) -> Launched:
    """Launch one agent instance: spot in each subnet, then on-demand in each; raise if none had room."""
    markets = ["spot", "on-demand"] if cfg.spot else ["on-demand"]
    subnets: list[str | None] = list(cfg.subnets) or [None]
    tried: list[str] = []
    for market in markets:
        for subnet in subnets:
            try:
                params = request(machine_type, cfg, subnet=subnet, market=market, max_price=max_price)
                resp = ec2.run_instances(**params)
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code", "")
                if code not in CAPACITY_ERRORS:
                    raise LaunchRefused(
                        f"AWS refused to launch {machine_type} ({market}, {subnet or 'default subnet'}): {code}: "
                        f"{exc.response.get('Error', {}).get('Message', '')}",
                        machine_type=machine_type,
                        code=code,
                    ) from exc
                tried.append(f"{market} in {subnet or 'default subnet'}: {code}")
                continue
            inst = resp["Instances"][0]
            return Launched(inst["InstanceId"], market, inst.get("SubnetId") or subnet)
    raise CapacityShort(f"no capacity for {machine_type}: " + "; ".join(tried), machine_type=machine_type, tried=tried)


def list_live(ec2: Any, fleet: str) -> list[LiveInstance]:
    """This fleet's instances that are not terminated, found by tag."""
    filters = [
        {"Name": f"tag:{TAG_APP}", "Values": ["traincast"]},
        {"Name": f"tag:{TAG_FLEET}", "Values": [fleet]},
        {"Name": "instance-state-name", "Values": LIVE_STATES},
    ]
    out = []
    for page in ec2.get_paginator("describe_instances").paginate(Filters=filters):
        for reservation in page["Reservations"]:
            for inst in reservation["Instances"]:
                tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
                out.append(
                    LiveInstance(
                        instance_id=inst["InstanceId"],
                        machine_type=tags.get(TAG_TYPE, inst["InstanceType"]),
                        launched_at=inst["LaunchTime"],
                        market="spot" if inst.get("InstanceLifecycle") == "spot" else "on-demand",
                        subnet_id=inst.get("SubnetId"),
                    )
                )
    return out


def terminate(ec2: Any, instance_ids: list[str]) -> None:
    """Terminate instances; the agent on each gets SIGTERM, finishes its window and requeues the rest."""
    if instance_ids:
        ec2.terminate_instances(InstanceIds=instance_ids)

"""The EC2 calls of the fleet: launch an agent instance, list the fleet's instances, terminate."""

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from fleet import boot
from fleet.boot import BootConfig
from fleet.quotas import quota_message
from shared.core.errors import CapacityShort, LaunchRefused, QuotaShort
from shared.core.settings import Settings

TAG_APP = "app"
TAG_TYPE = "traincast:machine-type"
TAG_FLEET = "traincast:fleet"
# "Not here, not now": the next market or subnet may have room, or a later pass. Every other
# error is a configuration problem (permissions, AMI, subnet, quota) and pauses the type with backoff.
CAPACITY_ERRORS = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientCapacity",
        "InsufficientHostCapacity",
        "InsufficientFreeAddressesInSubnet",
        "SpotMaxPriceTooLow",
        "Unsupported",  # the type is not offered in this subnet's availability zone
        # botocore already retried these; a later pass may get through.
        "RequestLimitExceeded",
        "InternalError",
        "ServiceUnavailable",
        "Unavailable",
    }
)
# The region's vCPU quota of the type's family and market is too low (0 in a new account): another
# subnet will not help, the other market might; a person must raise it in Service Quotas.
QUOTA_ERRORS = frozenset({"VcpuLimitExceeded", "MaxSpotInstanceCountExceeded", "InstanceLimitExceeded"})
DECODE_HINT = (
    "`aws sts decode-authorization-message --encoded-message <the encoded message> --query DecodedMessage "
    "--output text` decodes AWS's encoded authorization message"
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
    boot: BootConfig | None = None  # None: from these fields and the defaults (tests)

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
            boot=BootConfig(
                fleet=s.fleet_name,
                ssm_path=s.fleet_ssm_path,
                artifact=s.fleet_artifact,
                max_lifetime_s=s.fleet_max_lifetime_s,
                idle_exit_s=s.fleet_agent_idle_exit_s,
                pip_index_url=s.fleet_pip_index_url,
                torch_index_url=s.fleet_torch_index_url,
                torch_variants=s.fleet_torch_variants,
                log_group=s.fleet_log_group,
            ),
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
    skipped: tuple["Skipped", ...] = ()  # markets passed over on the way (quota, spot not permitted)


@dataclass(frozen=True)
class Skipped:
    """A market the launch passed over for a reason a person must fix."""

    market: str
    code: str  # AWS's error code
    kind: str  # 'quota' or 'spot_not_permitted'
    detail: str


@dataclass(frozen=True)
class LiveInstance:
    """A fleet instance EC2 reports as not terminated."""

    instance_id: str
    machine_type: str
    launched_at: datetime
    market: str
    subnet_id: str | None


def user_data(machine_type: str, cfg: LaunchConfig) -> str:
    """The boot script (fleet/boot.sh) for one instance of this type; it carries no secret."""
    boot_cfg = cfg.boot or BootConfig(
        fleet=cfg.fleet, ssm_path=cfg.ssm_path, artifact="", max_lifetime_s=6 * 3600, idle_exit_s=1800
    )
    return boot.user_data(machine_type, boot_cfg)


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


def launch(ec2: Any, machine_type: str, cfg: LaunchConfig, *, max_price: float, vcpus: int | None = None) -> Launched:
    """Launch one agent instance: spot in each subnet, then on-demand in each; raise if none would.

    Capacity errors move to the next subnet; a quota error, or spot refused by the IAM policy, to
    the next market. Raises CapacityShort if some try was short of capacity, QuotaShort if every
    market's quota was too low, LaunchRefused at the first other error.
    """
    markets = ["spot", "on-demand"] if cfg.spot else ["on-demand"]
    subnets: list[str | None] = list(cfg.subnets) or [None]
    tried: list[str] = []
    skipped: list[Skipped] = []
    for m, market in enumerate(markets):
        for subnet in subnets:
            where = f"{market} in {subnet or 'default subnet'}"
            try:
                params = request(machine_type, cfg, subnet=subnet, market=market, max_price=max_price)
                resp = ec2.run_instances(**params)
            except ClientError as exc:
                code, message = _error(exc)
                if code in CAPACITY_ERRORS:
                    tried.append(f"{where}: {code}")
                    continue
                if code in QUOTA_ERRORS:
                    detail = f"{quota_message(machine_type, market, vcpus)} ({code}: {message})"
                    skipped.append(Skipped(market, code, "quota", detail))
                    break
                if code == "UnauthorizedOperation" and market == "spot" and m < len(markets) - 1:
                    detail = (
                        f"spot launches of {machine_type} are not permitted by the IAM policy: allow ec2:RunInstances "
                        f"on arn:aws:ec2:*:*:spot-instances-request/* ({code}: {message}); {DECODE_HINT}"
                    )
                    skipped.append(Skipped(market, code, "spot_not_permitted", detail))
                    break
                hint = f"; {DECODE_HINT}" if code == "UnauthorizedOperation" else ""
                raise LaunchRefused(
                    f"AWS refused to launch {machine_type} ({where}): {code}: {message}{hint}"
                    + "".join(f"; before that, {s.market}: {s.detail}" for s in skipped),
                    machine_type=machine_type,
                    code=code,
                    skipped=skipped,
                ) from exc
            inst = resp["Instances"][0]
            return Launched(inst["InstanceId"], market, inst.get("SubnetId") or subnet, tuple(skipped))
    also = [f"{s.market}: {s.detail}" for s in skipped]
    if tried:
        raise CapacityShort(
            f"no capacity for {machine_type}: " + "; ".join(tried + also),
            machine_type=machine_type,
            tried=tried,
            skipped=skipped,
        )
    raise QuotaShort(
        f"cannot launch {machine_type}: " + "; ".join(s.detail for s in skipped),
        machine_type=machine_type,
        code=skipped[-1].code,
        skipped=skipped,
    )


def _error(exc: ClientError) -> tuple[str, str]:
    err = exc.response.get("Error", {})
    return str(err.get("Code", "")), str(err.get("Message", ""))


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

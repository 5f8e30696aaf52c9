"""Helpers for the fleet tests: moto's EC2, a controller on it, agent rows, capacity errors."""

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from fleet.controller import Controller
from fleet.ec2 import LaunchConfig
from fleet.policy import Limits
from shared.core.db import one, transaction
from tests.support.stack import broker

REGION = "us-east-1"
LIMITS = Limits(
    max_per_type=2, max_usd_per_hour=10.0, max_lifetime_s=6 * 3600, idle_s=600, boot_grace_s=900, tasks_per_agent=1000
)
INSERT_ENV = """
INSERT INTO environments (hash, details) VALUES (%s, '{"device": "test"}') RETURNING id"""
INSERT_AGENT = """
INSERT INTO agents (id, machine_type, host, pid, device, environment_id, started_at, instance_id, current_work)
VALUES (%s, %s, 'fleet-test', 1, 'cuda', %s, now(), %s, %s)"""
# Those agents must not look alive to the next test (a job there would not wait for an agent).
STOP_TEST_AGENTS = "UPDATE agents SET stopped_at = now() WHERE host = 'fleet-test' AND stopped_at IS NULL"


@contextmanager
def aws() -> Iterator[tuple[Any, LaunchConfig]]:
    """Moto's EC2 with a VPC and two subnets, and a launch config naming them."""
    with mock_aws():
        client = boto3.client("ec2", region_name=REGION)
        vpc = client.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        subnets = tuple(
            client.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{i}.0/24", AvailabilityZone=f"{REGION}{az}")["Subnet"][
                "SubnetId"
            ]
            for i, az in ((1, "a"), (2, "b"))
        )
        ami = client.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        boto3.client("iam", region_name=REGION).create_instance_profile(InstanceProfileName="traincast-agent")
        cfg = LaunchConfig(
            fleet=f"test-{uuid.uuid4().hex[:8]}", ami=ami, subnets=subnets, instance_profile="traincast-agent"
        )
        yield client, cfg


def controller(client: Any, cfg: LaunchConfig, **limits: Any) -> Controller:
    """A controller on moto's EC2 and this run's Redis."""
    lim = Limits(**(LIMITS.__dict__ | limits))
    return Controller(ec2_client=client, broker=broker(), cfg=cfg, limits=lim)


def instances(client: Any, cfg: LaunchConfig, states: tuple[str, ...] = ("pending", "running")) -> list[dict[str, Any]]:
    """The fleet's instances in moto, in the given states."""
    filters = [
        {"Name": "tag:traincast:fleet", "Values": [cfg.fleet]},
        {"Name": "instance-state-name", "Values": list(states)},
    ]
    return [i for r in client.describe_instances(Filters=filters)["Reservations"] for i in r["Instances"]]


def agent_on(instance_id: str, machine_type: str, *, busy: bool = False) -> None:
    """An agent row beating now on that instance (what a real agent writes when it registers)."""
    with transaction() as cur:
        cur.execute(INSERT_ENV, (uuid.uuid4().hex,))
        env = one(cur)["id"]
        work = '{"task": "gpu_agent.bench_layers"}' if busy else None
        cur.execute(INSERT_AGENT, (uuid.uuid4(), machine_type, env, instance_id, work))


@pytest.fixture(autouse=True)
def stop_test_agents() -> Iterator[None]:
    """After each test, the agent rows it wrote are stopped."""
    yield
    with transaction() as cur:
        cur.execute(STOP_TEST_AGENTS)


def events(action: str | None = None) -> list[dict[str, Any]]:
    """Fleet events, oldest first."""
    with transaction() as cur:
        cur.execute("SELECT * FROM fleet_events WHERE %(a)s::text IS NULL OR action = %(a)s ORDER BY id", {"a": action})
        return [dict(r) for r in cur.fetchall()]


def fleet_row(instance_id: str) -> dict[str, Any]:
    """The fleet_instances row of an instance."""
    with transaction() as cur:
        cur.execute("SELECT * FROM fleet_instances WHERE instance_id = %s", (instance_id,))
        return one(cur)


class ShortOfCapacity:
    """An EC2 client that answers RunInstances with a capacity error where `short(params)` says so.

    Moto never runs out of capacity; AWS does. Everything else goes to the real (moto) client.
    """

    def __init__(self, client: Any, short: Any) -> None:
        self._client, self._short, self.calls = client, short, []  # type: ignore[var-annotated]

    def run_instances(self, **params: Any) -> Any:
        """Refuse with InsufficientInstanceCapacity when short, else launch."""
        self.calls.append(params)
        if self._short(params):
            error = {"Code": "InsufficientInstanceCapacity", "Message": "We currently do not have sufficient capacity"}
            raise ClientError({"Error": error}, "RunInstances")
        return self._client.run_instances(**params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


class Failing:
    """An EC2 client that answers chosen calls with an AWS error; every other call goes to moto.

    rules: method name → function of the call's parameters giving an error code, or None to pass
    the call on. Moto cannot refuse on its own (no IAM, quotas or console failures).
    """

    def __init__(self, client: Any, **rules: Any) -> None:
        self._client, self._rules, self.calls = client, rules, []  # type: ignore[var-annotated]

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._client, name)
        rule = self._rules.get(name)
        if rule is None:
            return real

        def call(**params: Any) -> Any:
            self.calls.append((name, params))
            code = rule(params)
            if code:
                raise ClientError({"Error": {"Code": code, "Message": f"test refusal: {code}"}}, name)
            return real(**params)

        return call


def stubbed_ec2() -> Any:
    """A real boto3 EC2 client with fake credentials, for botocore's Stubber."""
    return boto3.client("ec2", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")


def listing(*instances: dict[str, Any]) -> dict[str, Any]:
    """A DescribeInstances answer holding these instances (one reservation)."""
    return {"Reservations": [{"Instances": list(instances)}] if instances else []}


def described(iid: str, machine_type: str, fleet: str, launched: Any, state: str = "running") -> dict[str, Any]:
    """One instance as DescribeInstances shows it, with the fleet's tags."""
    tags = [{"Key": "app", "Value": "traincast"}, {"Key": "traincast:machine-type", "Value": machine_type},
            {"Key": "traincast:fleet", "Value": fleet}]  # fmt: skip
    return {"InstanceId": iid, "InstanceType": machine_type, "LaunchTime": launched, "Tags": tags,
            "State": {"Name": state, "Code": 16 if state == "running" else 48}}  # fmt: skip

"""End to end: the real controller process against moto's EC2 server launches an instance for a job's
machine type; a real local agent stands in for that instance; the job completes; the idle instance goes."""

import logging
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from tests.support.stack import Stack, free_port, http
from tests.support.wait import wait_until

AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    """Moto's AWS endpoints as an HTTP server, so other processes can reach them."""
    # Its request log would outlive pytest's captured stream and print "Logging error" tracebacks.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


def wait_for(what: str, check: Callable[[], Any], stack: Stack, timeout: float = 240) -> Any:
    """Poll until check() returns something truthy."""

    def logs() -> str:
        return "\n".join(f"--- {n}\n{stack.log(n)[-3000:]}" for n in ("fleet", "worker", "agent") if n in stack.procs)

    return wait_until(check, timeout, what, interval=0.5, log=logs)


def test_fleet_launches_an_agent_the_job_completes_and_the_idle_instance_goes(
    clean_db: None, service_env: dict[str, str], moto_url: str, tmp_path: Path
) -> None:
    """Job on g4dn.xlarge, no agent → the controller launches one instance (tagged, on-demand here),
    the job says so; the agent registers with that instance id; the job succeeds; idle → terminated."""
    ec2 = boto3.client("ec2", endpoint_url=moto_url, **{k.lower(): v for k, v in AWS.items() if "KEY" in k},
                       region_name="us-east-1")  # fmt: skip
    iam = boto3.client("iam", endpoint_url=moto_url, region_name="us-east-1",
                       aws_access_key_id="testing", aws_secret_access_key="testing")  # fmt: skip
    iam.create_instance_profile(InstanceProfileName="traincast-agent-e2e")
    fleet = f"e2e-{uuid.uuid4().hex[:8]}"
    env = (
        service_env
        | AWS
        | {
            "AWS_ENDPOINT_URL": moto_url,
            "FLEET_ENABLED": "true",
            "FLEET_NAME": fleet,
            "FLEET_AMI": ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"],
            "FLEET_INSTANCE_PROFILE": "traincast-agent-e2e",
            "FLEET_SPOT": "false",
            "FLEET_EVERY_S": "1",
            "FLEET_IDLE_S": "3",
            "FLEET_BOOT_GRACE_S": "600",
        }
    )
    stack = Stack(env, tmp_path)
    for name in ("api", "worker", "fleet"):
        stack.start(name)
    try:
        stack.wait_ready()
        body = {"cnns": ["resnet18"], "machines": ["g4dn.xlarge"], "batch_sizes": [1, 2], "image_size": 32}
        body["wait_for_benchmarks"] = True  # measured by the agent the fleet starts, not answered by reference
        job = http.post(f"{stack.url}/v1/jobs", json=body).json()

        def live(states: tuple[str, ...] = ("pending", "running")) -> list[dict[str, Any]]:
            filters = [{"Name": "tag:traincast:fleet", "Values": [fleet]},
                       {"Name": "instance-state-name", "Values": list(states)}]  # fmt: skip
            return [i for r in ec2.describe_instances(Filters=filters)["Reservations"] for i in r["Instances"]]

        [inst] = wait_for("the controller to launch an instance", live, stack)
        assert inst["InstanceType"] == "g4dn.xlarge" and inst.get("InstanceLifecycle") != "spot"
        tags = {t["Key"]: t["Value"] for t in inst["Tags"]}
        assert tags["traincast:machine-type"] == "g4dn.xlarge" and tags["app"] == "traincast"

        def says_booting() -> str:
            waiting = http.get(f"{stack.url}/v1/jobs/{job['id']}").json()["progress"]["machines"]["g4dn.xlarge"]
            return str(waiting.get("waiting_for", "")) if inst["InstanceId"] in str(waiting.get("waiting_for")) else ""

        assert "waiting for an agent on g4dn.xlarge" in wait_for("the job to name the instance", says_booting, stack)
        assert len(live()) == 1  # the controller waits for it rather than launching more

        # The stand-in for the instance's boot script: an agent of that machine type and instance id.
        stack.start(
            "agent",
            AGENT_MACHINE_TYPE="g4dn.xlarge",
            AGENT_INSTANCE_ID=inst["InstanceId"],
            AGENT_DEVICE="cpu",
            AGENT_REQUIRE_GPU="false",  # a CPU stands in for the T4
        )

        def finished() -> dict[str, Any] | None:
            got: dict[str, Any] = http.get(f"{stack.url}/v1/jobs/{job['id']}").json()
            return got if got["status"] in ("succeeded", "failed") else None

        done = wait_for("the job to finish", finished, stack, timeout=400)
        assert done["status"] == "succeeded", done.get("error")
        assert {p["machine"] for p in done["result"]["predictions"]} == {"g4dn.xlarge"}
        # Its layers are measured now, but with no whole-step model of g4dn.xlarge yet the answer stays reference.
        assert {p["source"] for p in done["result"]["predictions"]} == {"reference"}
        assert "no whole-step model yet" in done["result"]["models"]["g4dn.xlarge"]["detail"]

        wait_for("the idle instance to be terminated", lambda: live(("shutting-down", "terminated")), stack)

        def recorded() -> dict[str, Any] | None:
            # EC2 sees the terminate call a moment before the controller writes its row and event.
            got: dict[str, Any] = http.get(f"{stack.url}/v1/fleet").json()
            return got if any(e["action"] == "terminated" for e in got["events"]) else None

        status = wait_for("the termination to be recorded", recorded, stack, timeout=30)
        actions = {e["action"]: e for e in status["events"]}
        assert actions["launched"]["instance_id"] == inst["InstanceId"]
        assert "idle" in actions["terminated"]["detail"] and status["instances"] == []
    finally:
        stack.stop_all()


def test_api_reads_its_database_url_from_ssm(clean_db: None, service_env: dict[str, str], moto_url: str,
                                            tmp_path: Path) -> None:  # fmt: skip
    """With only TRAINCAST_SSM_PATH set, the API process takes DATABASE_URL from SSM: its job lands in this run's
    database (not the default one), and the URL is not printed."""
    ssm = boto3.client("ssm", endpoint_url=moto_url, region_name="us-east-1",
                       aws_access_key_id="testing", aws_secret_access_key="testing")  # fmt: skip
    path = f"/traincast/{uuid.uuid4().hex[:8]}/"
    ssm.put_parameter(Name=f"{path}database_url", Value=service_env["DATABASE_URL"], Type="SecureString")
    stack = Stack({**AWS, "AWS_ENDPOINT_URL": moto_url, "TRAINCAST_SSM_PATH": path}, tmp_path)
    del stack.env["DATABASE_URL"]  # the default would reach another database on this server
    stack.start("api")
    try:
        stack.wait_ready()
        body = {"cnns": ["resnet18"], "machines": ["local"], "batch_sizes": [1], "image_size": 32}
        job = http.post(f"{stack.url}/v1/jobs", json=body).json()
        from shared import jobs

        assert jobs.get(job_id=job["id"])["status"] == "queued"
        assert service_env["DATABASE_URL"] not in stack.log("api")
    finally:
        stack.stop("api")

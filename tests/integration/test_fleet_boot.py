"""The fleet's user data, run end to end on this machine as cloud-init would run it on a fresh instance.

What stands in for what, and nothing else: tests/support/imds.py for the instance metadata service
(IMDSv2, the instance role's credentials, spot and rebalance notices); moto's server for S3 (the
wheel `traincast fleet publish` uploads) and SSM (the agent's secrets); tests/support/fake_systemctl.py for
systemd and `shutdown` (recorded, not carried out); an nvidia-smi that names a driver; and the
CUDA check, which passes (`true`) except in the test that shows the real check refusing a CPU.
Python 3.11 is this machine's. The script creates its own venv and pip installs the published
wheel into it; the dependencies (torch, celery, …) are already satisfied through PYTHONPATH from
this test run's environment (without the traincast package itself) and the pip index is a local
one that holds nothing, so any download the script tried would fail the test. The agent then runs
from the installed wheel, reads its DATABASE_URL and REDIS_URL from SSM with the instance role's
credentials, and connects to this run's PostgreSQL (as the agent's role) and Redis.
"""

import json
import logging
import os
import signal
import subprocess
import sys
import sysconfig
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import boto3
import httpx
import pytest
from moto.server import ThreadedMotoServer

from fleet import boot, publish
from shared.core import tasks
from shared.measurements import layers
from tests.support.agent_role import agent_url
from tests.support.agentkit import rows
from tests.support.faultkit import until
from tests.support.imds import Imds
from tests.support.stack import free_port, queued_tasks

T = TypeVar("T")
SUPPORT = Path(__file__).resolve().parents[1] / "support"
MACHINE = "g4dn.xlarge"
INSTANCE_ID = "i-0b007ab1e5eed0001"
ARTIFACT = "s3://traincast-artifacts/agent/"
SSM_PATH = "/traincast/agent/"
NVIDIA_SMI = "| NVIDIA-SMI 570.86.15    Driver Version: 570.86.15    CUDA Version: 12.8 |"
# One batch size per window, each running to its time cap: a row about every second, so the
# interruption lands mid-task (as in tests/integration/test_agent_life.py).
SLOW_AGENT = {
    "BENCH_WINDOW_POINTS": "1",
    "BENCH_TIME_CAP_S": "1",
    "BENCH_TARGET_SPREAD": "-1",
    "BENCH_QUIET_WAIT": "inf",
}


@dataclass
class Host:
    """A pretend instance: its directories, metadata service, AWS endpoint and the script's environment."""

    root: Path
    state: Path
    console: Path
    imds: Imds
    env: dict[str, str]

    def shutdowns(self) -> list[str]:
        """Every `shutdown` the instance asked for, in order."""
        path = self.state / "shutdown.log"
        return path.read_text().splitlines() if path.exists() else []

    def agent_pid(self) -> int | None:
        """The agent's pid once the unit runs it."""
        path = self.state / "traincast-agent.service.pid"
        return int(path.read_text()) if path.exists() else None

    def exit_code(self) -> int | None:
        """The agent's exit status once it has ended."""
        path = self.state / "traincast-agent.service.exit"
        return int(path.read_text()) if path.exists() else None

    def log(self) -> str:
        """Console and agent output, for failure messages."""
        agent = self.state / "traincast-agent.service.log"
        text = self.console.read_text(errors="replace") if self.console.exists() else ""
        return text + (agent.read_text(errors="replace") if agent.exists() else "")

    def boot(self, cfg: boot.BootConfig, **extra: str) -> subprocess.CompletedProcess[str]:
        """Run the user data for MACHINE as cloud-init would: as a script, as this user."""
        script = self.root.parent.parent / "user-data"
        script.write_text(boot.user_data(MACHINE, cfg))
        return subprocess.run(["bash", str(script)], env={**self.env, **extra}, capture_output=True, text=True,
                              timeout=300)  # fmt: skip


def wait_for(check: Callable[[], T | None], what: str, host: Host, timeout: float = 120) -> T:
    """Poll until check() returns something truthy (tests/support/faultkit.py's loop, with this host's output)."""
    return until(what, check, timeout, log=lambda: "console and agent:\n" + host.log())


def dependencies_without_traincast(dest: Path) -> Path:
    """This run's site-packages as links, minus traincast itself (which must come from the wheel)."""
    dest.mkdir()
    site = Path(sysconfig.get_paths()["purelib"])
    for entry in site.iterdir():
        if not entry.name.startswith(("traincast", "__editable__")) and entry.suffix != ".pth":
            (dest / entry.name).symlink_to(entry)
    return dest


def stub_bin(dest: Path, state: Path) -> Path:
    """systemctl, shutdown, nvidia-smi and python3.11 for the script to find first on PATH."""
    dest.mkdir()
    for name in ("systemctl", "shutdown"):
        (dest / name).write_text(f'#!/bin/sh\nexec {sys.executable} {SUPPORT / "fake_systemctl.py"} {name} "$@"\n')
    (dest / "nvidia-smi").write_text(f"#!/bin/sh\necho '{NVIDIA_SMI}'\n")
    for path in dest.iterdir():
        path.chmod(0o755)
    (dest / "python3.11").symlink_to(sys._base_executable)  # type: ignore[attr-defined]
    return dest


@pytest.fixture(scope="module")
def aws_side(service_env: dict[str, str]) -> Iterator[str]:
    """moto's server with the published wheel in S3 and the agent's secrets in SSM; yields its URL."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # its request log outlives pytest's captured stream
    port = free_port()
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    moto.start()
    moto_url = f"http://127.0.0.1:{port}"
    httpx.post(f"{moto_url}/moto-api/reset")  # moto's state is per process, not per server
    aws = {"region_name": "us-east-1", "endpoint_url": moto_url, "aws_access_key_id": "x", "aws_secret_access_key": "x"}
    s3 = boto3.client("s3", **aws)
    s3.create_bucket(Bucket="traincast-artifacts")
    publish.publish(artifact=ARTIFACT, s3=s3)
    ssm = boto3.client("ssm", **aws)
    secrets = {"database_url": agent_url(service_env["DATABASE_URL"]), "redis_url": service_env["REDIS_URL"]}
    for name, value in secrets.items():
        ssm.put_parameter(Name=SSM_PATH + name, Value=value, Type="SecureString")
    yield moto_url
    moto.stop()


@pytest.fixture
def host(aws_side: str, tmp_path: Path) -> Iterator[Host]:
    """A pretend instance: its metadata service, an empty local pip index, stubs, and the script's environment."""
    moto_url = aws_side
    empty_index = tmp_path / "index"
    (empty_index / "simple").mkdir(parents=True)
    index = ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: SimpleHTTPRequestHandler(*a, directory=str(empty_index)))
    threading.Thread(target=index.serve_forever, daemon=True).start()
    imds = Imds(instance_id=INSTANCE_ID)
    state = tmp_path / "systemd"
    bindir = stub_bin(tmp_path / "bin", state)
    root = tmp_path / "opt" / "traincast"
    (tmp_path / "units").mkdir()
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "DATABASE_", "REDIS_", "PYTHON"))}
    env = {
        **keep,
        **SLOW_AGENT,
        "PATH": f"{bindir}:{os.environ['PATH']}",
        "PYTHONPATH": str(dependencies_without_traincast(tmp_path / "deps")),
        "TRAINCAST_ROOT": str(root),
        "TRAINCAST_UNIT_DIR": str(tmp_path / "units"),
        "TRAINCAST_LOG_DIR": str(tmp_path / "log"),
        "TRAINCAST_CONSOLE": str(tmp_path / "console"),
        "TRAINCAST_REQUIRE_GPU": "false",  # the CPU stands in for the T4 once the CUDA check passed
        "FAKE_SYSTEMD_STATE": str(state),
        "AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.url,
        "AWS_ENDPOINT_URL": moto_url,
        "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-aws-credentials"),
        "AGENT_IMDS_POLL_S": "0.5",
        "AGENT_HEARTBEAT_S": "1",
        "PIP_NO_CACHE_DIR": "1",
    }
    h = Host(root=root, state=state, console=tmp_path / "console", imds=imds, env=env)
    h.env["LOCAL_INDEX"] = f"http://127.0.0.1:{index.server_address[1]}/simple"
    yield h
    if (pid := h.agent_pid()) and h.exit_code() is None:
        os.kill(pid, signal.SIGKILL)
    imds.close()
    index.shutdown()


def config(host: Host, **over: Any) -> boot.BootConfig:
    """The boot settings of these tests: the published artifact, the local (empty) index."""
    values: dict[str, Any] = {
        "fleet": "test",
        "ssm_path": SSM_PATH,
        "artifact": ARTIFACT,
        "max_lifetime_s": 3600,
        "idle_exit_s": 0,
        "pip_index_url": host.env["LOCAL_INDEX"],
        "torch_index_url": host.env["LOCAL_INDEX"],
    }
    return boot.BootConfig(**(values | over))


def agent_row() -> dict[str, Any] | None:
    """The agent registered from this instance."""
    found = rows("SELECT * FROM agents WHERE instance_id = %s ORDER BY started_at DESC", INSTANCE_ID)
    return found[0] if found else None


SIZES = list(range(2, 10))


def send_layer_work() -> int:
    """One layer task for MACHINE (ResNet-18's first conv, eight batch sizes: time for the notice to land mid-task on
    a loaded host, where four were once all measured before it did); returns its signature id."""
    sig_id = layers.register_builtin(name="resnet18", image_size=224)[0][0]
    item = {"signature_id": sig_id, **layers.specs(signature_ids=[sig_id])[sig_id], "batch_sizes": SIZES}
    tasks.send(tasks.BENCH_LAYERS, queue=tasks.bench_queue(MACHINE), machine_type=MACHINE, precision="fp32",
               items=[item])  # fmt: skip
    return int(sig_id)


def test_boot_installs_the_published_wheel_registers_and_leaves_on_a_spot_notice(host: Host, clean_db: None) -> None:
    """Stock image → agent from S3 heartbeating; a spot notice mid-task → rows kept, rest requeued, stopped, off."""
    done = host.boot(config(host), TRAINCAST_CUDA_CHECK="true")
    assert done.returncode == 0, host.log()[-4000:]
    console = host.console.read_text()
    assert f"instance {INSTANCE_ID} in us-east-1" in console and "driver supports CUDA 12.8: torch" in console
    assert "started traincast-agent.service" in console
    # The dead-man switch, first thing: the controller's lifetime (60 min) plus 15 min.
    assert host.shutdowns()[0].startswith("-h +75 ")
    env_file = (host.root / "agent.env").read_text()
    assert f"AGENT_MACHINE_TYPE={MACHINE}\n" in env_file and f"AGENT_INSTANCE_ID={INSTANCE_ID}\n" in env_file
    assert oct((host.root / "agent.env").stat().st_mode & 0o777) == "0o600"

    first = wait_for(agent_row, "the agent to register with the instance id", host)
    assert first["machine_type"] == MACHINE and first["stopped_at"] is None
    pid = host.agent_pid()
    assert pid is not None
    # It runs the wheel installed in the instance's venv, not this checkout.
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert cmdline[0].decode() == str(host.root / "venv" / "bin" / "python")
    where = subprocess.run([str(host.root / "venv/bin/python"), "-c", "import gpu_agent; print(gpu_agent.__file__)"],
                           env=host.env, capture_output=True, text=True, cwd=host.root)  # fmt: skip
    assert where.stdout.strip().startswith(str(host.root / "venv" / "lib"))
    wait_for(lambda: (r := agent_row()) and r["heartbeat_at"] > first["heartbeat_at"], "a second heartbeat", host)
    assert any("iam/security-credentials" in p for p in host.imds.requests)  # SSM read with the instance role

    sig_id = send_layer_work()
    wait_for(lambda: rows("SELECT 1 FROM layer_benchmarks WHERE signature_id = %s", sig_id), "a first row", host)
    host.imds.interrupt()
    # In a list: an exit code of 0 is falsy, and wait_for waits for something truthy.
    code = wait_for(
        lambda: [host.exit_code()] if host.exit_code() is not None else None, "the agent to leave", host, 60
    )[0]

    assert code == 0
    stored = rows("SELECT batch_size FROM layer_benchmarks WHERE signature_id = %s", sig_id)
    assert 1 <= len(stored) < len(SIZES), "the interruption should land mid-task"
    # Handed back at once, not after the 6 h visibility timeout: the next agent starts from the stored rows.
    assert queued_tasks(tasks.bench_queue(MACHINE)) == [tasks.BENCH_LAYERS]
    row = agent_row()
    assert row is not None and row["stopped_at"] is not None and row["current_work"] is None
    assert row["stop_reason"].startswith("spot interruption notice: terminate at ")
    # ExecStopPost: the agent's exit powers the instance off.
    off = wait_for(lambda: [s for s in host.shutdowns() if s.startswith("-h now")], "the power-off", host, 30)
    assert off == ["-h now traincast agent exited: success 0"]


def test_boot_refuses_an_instance_where_torch_cannot_use_cuda(host: Host) -> None:
    """The real CUDA check on a machine without a usable GPU: a console message, power off, no agent."""
    done = host.boot(config(host))
    assert done.returncode != 0
    console = host.console.read_text()
    assert "cuda_check: torch" in console and "cannot use a GPU" in console
    assert (
        f"FATAL: CUDA is not usable by torch here (see above); nothing will be measured on the CPU under {MACHINE}"
        in console
    )
    assert host.shutdowns()[-1] == "-h now traincast: boot failed"
    assert host.agent_pid() is None and not (host.root.parent.parent / "units" / "traincast-agent.service").exists()


def test_boot_without_an_artifact_or_a_baked_agent_says_so_and_powers_off(host: Host) -> None:
    """No FLEET_ARTIFACT and nothing at /opt/traincast/venv: one clear line, then off."""
    done = host.boot(config(host, artifact=""))
    assert done.returncode != 0
    assert "FATAL: no FLEET_ARTIFACT and no agent baked into this AMI" in host.console.read_text()
    assert host.shutdowns()[-1] == "-h now traincast: boot failed"


def test_pointer_names_the_wheel_by_digest(host: Host) -> None:
    """current.json points at a wheel stored under its own digest, whose bytes match it."""
    s3 = boto3.client("s3", region_name="us-east-1", endpoint_url=host.env["AWS_ENDPOINT_URL"],
                      aws_access_key_id="x", aws_secret_access_key="x")  # fmt: skip
    pointer = json.loads(s3.get_object(Bucket="traincast-artifacts", Key="agent/current.json")["Body"].read())
    import hashlib

    body = s3.get_object(Bucket="traincast-artifacts", Key=pointer["wheel"])["Body"].read()
    assert hashlib.sha256(body).hexdigest() == pointer["sha256"]
    assert pointer["wheel"] == f"agent/wheels/{pointer['sha256'][:16]}/traincast-0.1.0-py3-none-any.whl"


def test_publish_command_uploads_and_repoints(host: Host) -> None:
    """`traincast fleet publish` as an operator runs it: the pointer moves to the new upload; no location → one line."""
    env = {**host.env, "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "PYTHONPATH": ""}
    traincast = str(Path(sys.executable).parent / "traincast")
    done = subprocess.run([traincast, "fleet", "publish", "--artifact", "s3://traincast-artifacts/other"], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "FLEET_ARTIFACT=s3://traincast-artifacts/other/" in done.stdout
    s3 = boto3.client("s3", region_name="us-east-1", endpoint_url=host.env["AWS_ENDPOINT_URL"],
                      aws_access_key_id="x", aws_secret_access_key="x")  # fmt: skip
    pointer = json.loads(s3.get_object(Bucket="traincast-artifacts", Key="other/current.json")["Body"].read())
    assert f"published {pointer['wheel']} (sha256 {pointer['sha256']})" in done.stdout

    env.pop("FLEET_ARTIFACT", None)
    missing = subprocess.run([traincast, "fleet", "publish"], env=env, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2
    assert missing.stderr.strip() == (
        "error: no artifact location: pass --artifact s3://bucket/prefix/ or set FLEET_ARTIFACT"
    )

"""The user data that turns a stock Deep Learning AMI into a benchmark agent (the body is boot.sh)."""

import math
import re
import shlex
from dataclasses import dataclass
from functools import cache
from importlib import metadata, resources

from shared.core.errors import FleetError

# User data above this is refused by RunInstances.
MAX_USER_DATA_BYTES = 16 * 1024
# After the controller's own lifetime limit, so the dead-man switch only fires when it is gone.
DEAD_MAN_MARGIN_S = 900


@dataclass(frozen=True)
class BootConfig:
    """What the boot script needs besides the machine type: where the agent comes from, and its limits."""

    fleet: str
    ssm_path: str
    artifact: str  # s3://bucket/prefix/ holding current.json; empty: the AMI has /opt/traincast/venv baked in
    max_lifetime_s: float
    idle_exit_s: float
    pip_index_url: str = ""
    torch_index_url: str = "https://download.pytorch.org/whl"
    torch_variants: str = "13.0=cu130 12.8=cu128 12.6=cu126"
    log_group: str = ""


@cache
def _body() -> str:
    return resources.files("fleet").joinpath("boot.sh").read_text()


def pinned(package: str) -> str:
    """The exact version Traincast pins for a package (so the agent runs what the service was tested with)."""
    try:
        requires = metadata.requires("traincast") or []
    except metadata.PackageNotFoundError as exc:
        raise FleetError("traincast is not installed (pip install -e .): its pinned versions are unknown") from exc
    for req in requires:
        m = re.fullmatch(rf"{re.escape(package)}(\[[^\]]*\])?==([^;\s]+)", req.split(";")[0].strip())
        if m:
            return m.group(2)
    raise FleetError(f"traincast does not pin {package}")


def user_data(machine_type: str, cfg: BootConfig) -> str:
    """The boot script for one instance of this type; it carries no secret (those come from SSM)."""
    values = {
        "MACHINE_TYPE": machine_type,
        "FLEET": cfg.fleet,
        "TRAINCAST_VERSION": metadata.version("traincast"),
        "SSM_PATH": cfg.ssm_path,
        "ARTIFACT": cfg.artifact if not cfg.artifact or cfg.artifact.endswith("/") else cfg.artifact + "/",
        "LIFETIME_MIN": str(math.ceil((cfg.max_lifetime_s + DEAD_MAN_MARGIN_S) / 60)),
        "IDLE_EXIT_S": f"{cfg.idle_exit_s:.0f}",
        "PIP_INDEX_URL": cfg.pip_index_url,
        "TORCH_INDEX_URL": cfg.torch_index_url.rstrip("/"),
        "TORCH_VARIANTS": cfg.torch_variants,
        "TORCH_VERSION": pinned("torch"),
        "TORCHVISION_VERSION": pinned("torchvision"),
        "BOTO3_VERSION": pinned("boto3"),
        "LOG_GROUP": cfg.log_group,
    }
    header = "#!/bin/bash\n" + "".join(f"{k}={shlex.quote(v)}\n" for k, v in values.items())
    script = header + _body()
    if len(script.encode()) > MAX_USER_DATA_BYTES:
        raise FleetError(f"user data is {len(script.encode())} bytes; EC2 accepts {MAX_USER_DATA_BYTES}")
    return script


def example() -> str:
    """The user data for a g4dn.xlarge with every optional part set (for linting and for reading)."""
    cfg = BootConfig(
        fleet="default",
        ssm_path="/traincast/agent/",
        artifact="s3://traincast-artifacts/agent/",
        max_lifetime_s=6 * 3600,
        idle_exit_s=1800,
        pip_index_url="https://pypi.example.internal/simple",
        log_group="/traincast/agents",
    )
    return user_data("g4dn.xlarge", cfg)

"""`traincast fleet publish`: build the agent's wheel from this checkout and put it where instances fetch it."""

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from shared.core.errors import FleetError

ROOT = Path(__file__).resolve().parents[1]
POINTER = "current.json"
# What the wheel is built from: copied first, since setuptools' build/ directory keeps files
# deleted from the source and would ship them.
SOURCES = ("pyproject.toml", "README.md", "api", "worker", "gpu_agent", "shared", "cli")


@dataclass(frozen=True)
class Published:
    """Where a publish put the wheel, and its digest."""

    uri: str
    wheel_key: str
    sha256: str


def split(artifact: str) -> tuple[str, str]:
    """s3://bucket/prefix/ → (bucket, "prefix/")."""
    if not artifact.startswith("s3://") or len(artifact) <= len("s3://"):
        raise FleetError(f"artifact {artifact!r}: give an S3 location like s3://my-bucket/traincast/")
    bucket, _, prefix = artifact.removeprefix("s3://").partition("/")
    if not bucket:
        raise FleetError(f"artifact {artifact!r} names no bucket")
    return bucket, prefix if not prefix or prefix.endswith("/") else prefix + "/"


def build_wheel(out: Path, root: Path = ROOT) -> Path:
    """Build traincast's wheel (no dependencies: the boot script installs those) into out."""
    if not (root / "pyproject.toml").is_file():
        raise FleetError(f"{root} is not a Traincast checkout: run `traincast fleet publish` from one")
    src = out / "src"
    for name in SOURCES:
        path = root / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            src.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, src / name)
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(out), str(src)]
    if _has_setuptools():
        cmd.append("--no-build-isolation")  # no download of a build environment when we have one
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise FleetError(f"building the wheel failed: {(done.stderr or done.stdout).strip()[-2000:]}")
    [wheel] = sorted(out.glob("traincast-*.whl"))
    return wheel


def publish(*, artifact: str, s3: Any, root: Path = ROOT) -> Published:
    """Upload the wheel under its digest, then point current.json at it (so no boot sees a half-written pointer)."""
    bucket, prefix = split(artifact)
    with tempfile.TemporaryDirectory() as tmp:
        wheel = build_wheel(Path(tmp), root)
        data = wheel.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    # Under its digest: a boot downloading the previous wheel is never handed a different file.
    key = f"{prefix}wheels/{digest[:16]}/{wheel.name}"
    s3.put_object(Bucket=bucket, Key=key, Body=data)
    pointer = {"wheel": key, "sha256": digest, "published_at": datetime.now(UTC).isoformat(), "git": _git(root)}
    s3.put_object(
        Bucket=bucket, Key=prefix + POINTER, Body=json.dumps(pointer).encode(), ContentType="application/json"
    )
    return Published(uri=f"s3://{bucket}/{prefix}", wheel_key=key, sha256=digest)


def _git(root: Path) -> str | None:
    done = subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty"], capture_output=True, text=True)
    return done.stdout.strip() or None


def _has_setuptools() -> bool:
    try:
        return int(metadata.version("setuptools").split(".")[0]) >= 68  # pyproject's build requirement
    except (metadata.PackageNotFoundError, ValueError):
        return False

"""Installing: scripts/venv.sh with uv or pip, its system-torch and wheelhouse switches, wheelhouse.sh's pip command.

venv.sh runs for real against a stand-in Python and pip (tests/support/fake_python.sh: they log their arguments and
install nothing), so no wheel is downloaded here.
"""

import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.support.stack import ROOT

FAKE_PYTHON = ROOT / "tests/support/fake_python.sh"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
EVERYTHING = PYPROJECT["project"]["dependencies"] + [
    r for extra in ("dev", "embedded") for r in PYPROJECT["project"]["optional-dependencies"][extra]
]
PROJECT = ["-e", ".[dev,embedded]"]  # the project with its extras, as pip installs it by default
TORCHES = [r for r in EVERYTHING if r.split("==")[0] in ("torch", "torchvision")]


def script(name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run scripts/<name> with these arguments and environment additions."""
    return subprocess.run(
        [str(ROOT / "scripts" / name), *args], env={**os.environ, **(env or {})}, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip


def fake_venv(path: Path, *, system_site: bool) -> None:
    """A venv whose python and pip are the stand-in (as `python -m venv` of the stand-in makes it)."""
    (path / "bin").mkdir(parents=True)
    for tool in ("python", "pip"):
        (path / "bin" / tool).symlink_to(FAKE_PYTHON)
    (path / "pyvenv.cfg").write_text(f"include-system-site-packages = {str(system_site).lower()}\n")


def pip_calls(venv: Path, tool: str = "pip") -> list[list[str]]:
    """The arguments of each pip (or uv) call the stand-in logged."""
    log = venv / f"{tool}.calls"
    return [line.split("\t") for line in log.read_text().splitlines()] if log.exists() else []


PIP_CONFIG = """global.extra-index-url='file:///a/simple file:///b/simple'
global.constraint='/etc/caps.txt'
global.cert='/etc/ssl/ca.crt'
:env:.find-links='/opt/wheels'
"""


def test_the_default_install_is_uv_with_pips_sources_and_pip_where_uv_fails(tmp_path: Path) -> None:
    """uv, pinned, put in by pip, gets pip's indexes, links and constraints; a failing uv leaves it to pip."""
    venv = tmp_path / "venv"
    fake_venv(venv, system_site=False)
    env = {"VENV": str(venv), "FAKE_UV": "1", "FAKE_PIP_CONFIG": PIP_CONFIG}
    run = script("venv.sh", env=env)
    assert run.returncode == 0, run.stderr
    put_in, config = pip_calls(venv)
    assert put_in[0] == "install" and put_in[-1].startswith("uv==") and config == ["config", "list"]
    [uv] = pip_calls(venv, "uv")
    assert uv[:4] == ["pip", "install", "--python", str(venv / "bin/python")] and uv[-2:] == PROJECT
    # bytecode compiled at install: where PYTHONDONTWRITEBYTECODE is set nothing else keeps it
    options = uv[4:-2]
    assert options.count("--compile-bytecode") == 1
    options.remove("--compile-bytecode")
    pairs = list(zip(options[::2], options[1::2], strict=True))
    assert pairs == [
        ("--index-strategy", "unsafe-best-match"),
        ("--extra-index-url", "file:///a/simple"),
        ("--extra-index-url", "file:///b/simple"),
        ("--constraint", "/etc/caps.txt"),
        ("--find-links", "/opt/wheels"),
    ]
    assert list(venv.glob(".installed-*"))
    failing = tmp_path / "failing"
    fake_venv(failing, system_site=False)
    run = script("venv.sh", env={**env, "VENV": str(failing), "FAKE_UV": "fail"})
    assert run.returncode == 0, run.stderr
    assert len(pip_calls(failing, "uv")) == 1 and pip_calls(failing)[-1] == ["install", "--disable-pip-version-check",
                                                                             *PROJECT]  # fmt: skip
    offline = tmp_path / "offline"
    fake_venv(offline, system_site=False)
    (tmp_path / "wheels").mkdir()
    run = script("venv.sh", env={**env, "VENV": str(offline), "TRAINCAST_WHEELHOUSE": str(tmp_path / "wheels")})
    assert run.returncode == 0, run.stderr
    assert not pip_calls(offline, "uv") and [c[-2:] for c in pip_calls(offline)] == [PROJECT]


def test_requirements_leave_out_exactly_what_is_asked() -> None:
    """pyproject.toml's requirements with the extras; --without drops torch and torchvision; --build adds setuptools."""
    run = subprocess.run(
        ["python3", str(ROOT / "scripts/requirements.py"), "--without", "torch,TorchVision", "dev", "embedded"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert TORCHES and run.stdout.split() == [r for r in EVERYTHING if r not in TORCHES]
    build = subprocess.run(
        ["python3", str(ROOT / "scripts/requirements.py"), "--build"], capture_output=True, text=True, check=True
    )
    assert build.stdout.split() == PYPROJECT["project"]["dependencies"] + PYPROJECT["build-system"]["requires"]
    wrong = subprocess.run(["python3", str(ROOT / "scripts/requirements.py"), "gpu"], capture_output=True, text=True)
    assert wrong.returncode != 0 and "no extra gpu" in wrong.stderr


def test_the_wheelhouse_is_wheels_for_the_target_python_and_platform() -> None:
    """Wheels only, into DIR, for Python 3.11 and every older glibc tag of the platform; pip options passed on."""
    run = script("wheelhouse.sh", "--dry-run", "--platform", "manylinux_2_28_aarch64", "/tmp/wh", "--", "--pre")
    assert run.returncode == 0, run.stderr
    command, *requirements = run.stdout.splitlines()
    args = command.split()
    assert args[1:4] == ["-m", "pip", "download"] and "--only-binary=:all:" in args and args[-1] == "--pre"
    assert args[args.index("--dest") + 1] == "/tmp/wh" and args[args.index("--python-version") + 1] == "3.11"
    platforms = [args[i + 1] for i, a in enumerate(args) if a == "--platform"]
    assert platforms[0] == "manylinux_2_28_aarch64" and "manylinux_2_17_aarch64" in platforms
    assert {"manylinux2014_aarch64", "manylinux1_aarch64"} <= set(platforms) and len(platforms) == 24 + 3
    assert requirements == EVERYTHING + PYPROJECT["build-system"]["requires"]
    no_torch = script("wheelhouse.sh", "--dry-run", "--no-torch", "--python-version", "3.12")
    command, *requirements = no_torch.stdout.splitlines()
    assert "--platform" not in command and "--dest wheelhouse " in command and "--python-version 3.12 " in command
    assert requirements == [r for r in EVERYTHING if r not in TORCHES] + PYPROJECT["build-system"]["requires"]
    assert script("wheelhouse.sh", "--gpu").returncode == 2


def test_system_torch_makes_a_venv_that_sees_it_and_installs_everything_else(tmp_path: Path) -> None:
    """TRAINCAST_SYSTEM_TORCH=1 with a wheelhouse: --system-site-packages, torch kept out, offline, once."""
    venv, wheels = tmp_path / "venv", tmp_path / "wheels"
    wheels.mkdir()
    env = {"VENV": str(venv), "TRAINCAST_SYSTEM_TORCH": "1", "TRAINCAST_PYTHON": str(FAKE_PYTHON)}
    env["TRAINCAST_WHEELHOUSE"] = str(wheels)
    run = script("venv.sh", env=env)
    assert run.returncode == 0, run.stderr
    assert (venv / "made-by").read_text().split() == ["-m", "venv", "--system-site-packages", str(venv)]
    assert "using the system's torch 2.11.0 (CUDA 12.8)" in run.stderr
    offline = ["install", "--disable-pip-version-check", "--no-index", "--find-links", str(wheels)]
    requirements = str(venv / "requirements-without-torch.txt")
    assert pip_calls(venv) == [[*offline, "-r", requirements], [*offline, "--no-deps", "-e", "."]]
    assert Path(requirements).read_text().split() == [r for r in EVERYTHING if r not in TORCHES]
    again = script("venv.sh", env=env)  # installed: nothing to do
    assert again.returncode == 0 and len(pip_calls(venv)) == 2
    # The default install's stamp differs: switching the switch off installs again (torch into the venv).
    plain = script("venv.sh", env={"VENV": str(venv)})
    assert plain.returncode == 0 and pip_calls(venv)[-1] == [
        "install",
        "--disable-pip-version-check",
        "-e",
        ".[dev,embedded]",
    ]


def test_system_torch_refuses_a_venv_blind_to_the_system_and_falls_back_where_torch_is_missing(tmp_path: Path) -> None:
    """An existing venv without system site-packages is an error; a system without torch installs it as usual."""
    blind = tmp_path / "blind"
    fake_venv(blind, system_site=False)
    env = {"VENV": str(blind), "TRAINCAST_SYSTEM_TORCH": "1", "TRAINCAST_PYTHON": str(FAKE_PYTHON)}
    run = script("venv.sh", env=env)
    assert run.returncode == 1 and "made without the system's site-packages" in run.stderr and not pip_calls(blind)
    bare = tmp_path / "bare"
    run = script("venv.sh", env={**env, "VENV": str(bare), "FAKE_NO_TORCH": "1"})
    assert run.returncode == 0 and "do not import" in run.stderr
    assert pip_calls(bare) == [["install", "--disable-pip-version-check", *PROJECT]]
    wrong = script("venv.sh", env={**env, "VENV": str(tmp_path / "py312"), "FAKE_PYTHON_VERSION": "3.12"})
    assert wrong.returncode == 1 and "needs 3.11" in wrong.stderr
    assert script("venv.sh", env={**env, "TRAINCAST_SYSTEM_TORCH": "maybe"}).returncode == 2
    missing = script("venv.sh", env={"VENV": str(bare), "TRAINCAST_WHEELHOUSE": str(tmp_path / "nowhere")})
    assert missing.returncode == 1 and "is not a folder" in missing.stderr


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed (scripts/browser.sh does)")
def test_the_install_scripts_pass_shellcheck() -> None:
    """venv.sh, wheelhouse.sh and run.sh, and the stand-in, at shellcheck's default severity."""
    paths = [str(ROOT / "scripts" / n) for n in ("venv.sh", "wheelhouse.sh", "run.sh")] + [str(FAKE_PYTHON)]
    run = subprocess.run(["shellcheck", *paths], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout

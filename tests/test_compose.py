"""docker-compose.yml and the Dockerfile checked against the code, without Docker."""

import copy
import importlib
import importlib.util
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from celery import Celery
from fastapi import FastAPI
from pydantic import ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from shared.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
COMPOSE: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
DOCKERFILE = (ROOT / "Dockerfile").read_text()
SEED_SQL = (ROOT / "migrations" / "0002_seed_machine_types.sql").read_text()
PYTHON_SERVICES = ("migrate", "api", "worker", "beat", "agent", "gpu-agent", "fleet")
APP_SERVICES = ("api", "worker", "agent", "gpu-agent", "fleet")
NEEDED_DEPS = {"postgres": "service_healthy", "redis": "service_healthy", "migrate": "service_completed_successfully"}
COPIED_FOR_COMMANDS = {"api", "worker", "gpu_agent", "shared", "migrations", "pyproject.toml"}


class ServiceSettings(Settings):
    """Settings built only from a service's compose environment, not from the test runner's."""

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource, *args: Any, **kwargs: Any
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Read init arguments only."""
        return (init_settings,)


def env_of(service: dict[str, Any]) -> dict[str, str]:
    """A service's environment as a dict, whether written as a mapping or a list."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


def argv_of(service: dict[str, Any]) -> list[str]:
    """A service's command as an argument list."""
    command = service.get("command", [])
    return shlex.split(command) if isinstance(command, str) else [str(a) for a in command]


def module_problems(module: str) -> list[str]:
    """Why `python -m module` would not run, if it would not."""
    try:
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.submodule_search_locations is not None:
            spec = importlib.util.find_spec(f"{module}.__main__")
    except ModuleNotFoundError:
        spec = None
    if spec is None or spec.origin is None:
        return [f"python -m {module}: no such module (or package without __main__)"]
    if '__name__ == "__main__"' not in Path(spec.origin).read_text() and not spec.name.endswith("__main__"):
        return [f"python -m {module}: module has no __main__ guard"]
    return []


def command_problems(compose: dict[str, Any]) -> list[str]:
    """Commands of Python services that name missing modules, apps or queues."""
    problems: list[str] = []
    for name in PYTHON_SERVICES:
        service = compose["services"][name]
        argv = argv_of(service)
        try:
            values: dict[str, Any] = {k.lower(): v for k, v in env_of(service).items()}
            settings = ServiceSettings(**values)
        except ValidationError as exc:
            problems.append(f"{name}: invalid settings: {exc}")
            continue
        try:
            if argv[:2] == ["python", "-m"]:
                problems += [f"{name}: {p}" for p in module_problems(argv[2])]
            elif argv[0] == "uvicorn":
                module, attr = argv[1].split(":")
                if not isinstance(getattr(importlib.import_module(module), attr, None), FastAPI):
                    problems.append(f"{name}: {argv[1]} is not a FastAPI app")
            elif argv[0] == "celery":
                if not isinstance(getattr(importlib.import_module(argv[argv.index("-A") + 1]), "app", None), Celery):
                    problems.append(f"{name}: -A module has no Celery `app`")
                if "-Q" in argv and argv[argv.index("-Q") + 1].split(",") != [settings.jobs_queue]:
                    problems.append(f"{name}: -Q is not the jobs queue {settings.jobs_queue!r}")
            else:
                problems.append(f"{name}: unrecognised command {argv}")
        except (ImportError, ValueError, IndexError) as exc:
            problems.append(f"{name}: {argv}: {exc!r}")
    return problems


def env_problems(compose: dict[str, Any]) -> list[str]:
    """Environment keys that are not settings, and URLs not pointing at the compose services."""
    problems: list[str] = []
    for name in PYTHON_SERVICES:
        env = env_of(compose["services"][name])
        problems += [f"{name}: {k} is not a Settings field" for k in env if k.lower() not in Settings.model_fields]
        for key, host in (("DATABASE_URL", "postgres"), ("REDIS_URL", "redis")):
            if urlsplit(env.get(key, "")).hostname != host or host not in compose["services"]:
                problems.append(f"{name}: {key} does not point at service {host!r}")
    return problems


def depends_problems(compose: dict[str, Any]) -> list[str]:
    """Start-order conditions that are missing, wrong, or wait on a health nobody checks."""
    services = compose["services"]
    problems: list[str] = []
    for name in APP_SERVICES:
        deps = services[name].get("depends_on") or {}
        for dep, condition in NEEDED_DEPS.items():
            if not isinstance(deps, dict) or (deps.get(dep) or {}).get("condition") != condition:
                problems.append(f"{name}: depends_on {dep} needs condition {condition}")
    for name, service in services.items():
        deps = service.get("depends_on") or {}
        for dep, spec in deps.items() if isinstance(deps, dict) else []:
            if spec.get("condition") == "service_healthy" and "healthcheck" not in services.get(dep, {}):
                problems.append(f"{name}: waits for {dep} to be healthy but {dep} has no healthcheck")
    return problems


def seeded_machine_types(seed_sql: str) -> set[str]:
    """Machine type names inserted by the seed migration."""
    return set(re.findall(r"^\s*\('([^']+)'", seed_sql, flags=re.MULTILINE))


def machine_problems(compose: dict[str, Any], seed_sql: str = SEED_SQL) -> list[str]:
    """Agents configured for machine types the database does not know."""
    problems: list[str] = []
    for name in ("agent", "gpu-agent"):
        value = env_of(compose["services"][name]).get("AGENT_MACHINE_TYPE", "")
        default = re.fullmatch(r"\$\{\w+:-([^}]+)\}", value)
        machine = default.group(1) if default else value
        if machine not in seeded_machine_types(seed_sql):
            problems.append(f"{name}: machine type {machine!r} is not seeded")
    return problems


def dockerfile_problems(dockerfile: str) -> list[str]:
    """Directories the commands need that the Dockerfile does not copy."""
    copied: set[str] = set()
    for line in dockerfile.splitlines():
        parts = line.split()
        if parts and parts[0].upper() == "COPY" and not any(p.startswith("--from") for p in parts):
            copied |= {p.rstrip("/") for p in parts[1:-1] if not p.startswith("--")}
    return [f"Dockerfile does not copy {d}" for d in sorted(COPIED_FOR_COMMANDS - copied)]


CHECKS: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "command": command_problems,
    "env": env_problems,
    "depends": depends_problems,
    "machine": machine_problems,
}


def test_services_and_gpu_profile() -> None:
    """All services exist; gpu-agent (NVIDIA device) and fleet only in their profiles; agents have time to drain."""
    services = COMPOSE["services"]
    assert set(services) == {"postgres", "redis", *PYTHON_SERVICES}
    assert services["gpu-agent"]["profiles"] == ["gpu"] and services["fleet"]["profiles"] == ["fleet"]
    assert all("profiles" not in s for n, s in services.items() if n not in ("gpu-agent", "fleet"))
    assert all(services[n]["stop_grace_period"] == "10m" for n in ("agent", "gpu-agent"))
    devices = services["gpu-agent"]["deploy"]["resources"]["reservations"]["devices"]
    assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in devices)
    assert "--appendonly" in argv_of(services["redis"])


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_compose_matches_code(check: str) -> None:
    """The real compose file passes every check."""
    assert CHECKS[check](COMPOSE) == []


def test_dockerfile_copies_what_commands_need() -> None:
    """The image holds every package the commands run and the migrations."""
    assert dockerfile_problems(DOCKERFILE) == []
    assert dockerfile_problems(DOCKERFILE.replace("COPY migrations/", "# COPY migrations/")) != []


@pytest.mark.parametrize(
    ("check", "service", "key", "value"),
    [
        ("command", "agent", "command", ["python", "-m", "gpu_agentx"]),
        ("command", "migrate", "command", "python -m shared.settings"),
        ("command", "api", "command", ["uvicorn", "api.main:application"]),
        ("command", "worker", "command", ["celery", "-A", "worker.appx", "worker"]),
        ("command", "worker", "command", ["celery", "-A", "worker.app", "worker", "-Q", "jobz"]),
        ("command", "agent", "environment", {"BENCH_TIME_CAP_S": "soon"}),
        ("env", "api", "environment", {"DATABSE_URL": "x", "REDIS_URL": "redis://redis:6379/0"}),
        ("env", "worker", "environment", ["DATABASE_URL=postgresql://localhost/traincast", "REDIS_URL=redis://redis"]),
        ("depends", "api", "depends_on", {"postgres": {"condition": "service_healthy"}}),
        ("depends", "worker", "depends_on", {d: {"condition": "service_started"} for d in NEEDED_DEPS}),
        ("depends", "migrate", "depends_on", {"worker": {"condition": "service_healthy"}}),
        ("machine", "agent", "environment", {"AGENT_MACHINE_TYPE": "nope"}),
        ("machine", "gpu-agent", "environment", {"AGENT_MACHINE_TYPE": "${GPU_MACHINE_TYPE:-g9.mega}"}),
    ],
)
def test_broken_compose_is_rejected(check: str, service: str, key: str, value: Any) -> None:
    """A wrong module, app, queue, env name, dependency or machine type fails its check."""
    broken = copy.deepcopy(COMPOSE)
    broken["services"][service][key] = value
    assert CHECKS[check](broken) != []

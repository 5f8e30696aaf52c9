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

from shared.core import logins, redis_acl
from shared.core.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
# As written, with ${…} references: what the port and password checks read.
RAW_COMPOSE: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
# Passwords an operator would set: the other checks read the file as compose would, interpolated.
TEST_ENV = {"POSTGRES_PASSWORD": "pg-test-pw", "REDIS_PASSWORD": "redis-test-pw"}
TEST_ENV |= {f"{kind.upper()}_DB_PASSWORD": f"{kind}-db-test-pw" for kind in logins.GROUPS}
TEST_ENV |= {variable: f"{kind}-redis-test-pw" for kind, variable in redis_acl.PASSWORD_VARIABLES.items()}
DOCKERFILE = (ROOT / "Dockerfile").read_text()
SEED_SQL = (ROOT / "migrations" / "0002_seed_machine_types.sql").read_text()
# uvicorn's protocol with a deadline for request heads (api/server.py), which every launch of the API must name.
HEAD_DEADLINE = "api.server:Protocol"
PYTHON_SERVICES = ("migrate", "db-logins", "api", "worker", "beat", "agent", "gpu-agent", "fleet")
APP_SERVICES = ("api", "worker", "beat", "agent", "gpu-agent", "fleet")
# Only these connect as the owner: they run once and exit (and `docker compose run --rm migrate traincast …`).
ONE_SHOTS = ("migrate", "db-logins")
OWNER = "postgres"
# The process kind (shared/core/logins.py) whose login each long-running service connects as.
OWNER_URLS = {"DATABASE_URL": "postgresql://postgres:pw@postgres:5432/traincast", "REDIS_URL": "redis://redis:6379/0"}
KIND_OF = {"api": "api", "worker": "worker", "beat": "worker", "fleet": "fleet", "agent": "agent", "gpu-agent": "agent"}
NEEDED_DEPS = {"postgres": "service_healthy", "redis": "service_healthy", "db-logins": "service_completed_successfully"}
COPIED_FOR_COMMANDS = {"api", "worker", "gpu_agent", "shared", "migrations", "pyproject.toml"}


REFERENCE = re.compile(r"\$\{(\w+)(?:(:?[-?])([^}]*))?\}")
REQUIRED = re.compile(r"\$\{\w+:\?[^}]*\}")  # `:?`: unset and empty are both refused
URL_PASSWORD = re.compile(r"^\w[\w+.-]*://[^/@:]*:(.*)@[^@]*$")
SECRET_KEY = re.compile(r"PASSWORD|AUTH|SECRET", re.IGNORECASE)


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """value with compose's ${VAR}, ${VAR:-default} and ${VAR:?error} filled from env; ValueError as compose fails."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def fill(m: re.Match[str]) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3)
        unset = env.get(name) is None or (op is not None and op.startswith(":") and env.get(name) == "")
        if not unset:
            return env[name]
        if op is not None and op.endswith("?"):
            raise ValueError(f"{name}: {arg}")
        return arg if op is not None else ""

    return "$".join(REFERENCE.sub(fill, part) for part in value.split("$$"))


def strings(value: Any, where: str = "") -> list[tuple[str, str]]:
    """Every string in a parsed compose file, with where it is (keys joined by dots, list items by index)."""
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in strings(v, f"{where}.{k}")]
    if isinstance(value, list):
        return [s for i, v in enumerate(value) for s in strings(v, f"{where}[{i}]")]
    return [(where, value)] if isinstance(value, str) else []


def port_problems(compose: dict[str, Any]) -> list[str]:
    """Published ports that listen on more than 127.0.0.1 (compose's default is every interface)."""
    problems: list[str] = []
    for name, service in compose["services"].items():
        for port in service.get("ports") or []:
            host_ip = port.get("host_ip") if isinstance(port, dict) else str(port).rsplit(":", 2)[0]
            if host_ip != "127.0.0.1" or (isinstance(port, str) and port.count(":") != 2):
                problems.append(f"{name}: port {port!r} is not bound to 127.0.0.1")
    return problems


def password_problems(compose: dict[str, Any]) -> list[str]:
    """Passwords written in the file, or taken from the environment with a default instead of required."""
    problems: list[str] = []
    for where, text in strings(compose):
        for m in REFERENCE.finditer(text):
            if SECRET_KEY.search(m.group(1)) and not REQUIRED.fullmatch(m.group(0)):
                problems.append(f"{where}: {m.group(0)} has a default or is optional; use ${{{m.group(1)}:?…}}")
        url = URL_PASSWORD.match(text)
        if url and not REQUIRED.fullmatch(url.group(1)):
            problems.append(f"{where}: a URL's password is not a required ${{VAR:?…}}")
        if SECRET_KEY.search(where.rsplit(".", 1)[-1]) and ".environment." in where and not REQUIRED.fullmatch(text):
            problems.append(f"{where}: not a required ${{VAR:?…}}")
    for name, service in compose["services"].items():
        argv = argv_of(service)
        for i, arg in enumerate(argv[:-1]):
            if arg == "--requirepass" and not REQUIRED.fullmatch(argv[i + 1]):
                problems.append(f"{name}: --requirepass is not a required ${{VAR:?…}}")
        # redis-server --user …: `>password` adds a password, `nopass` lets any password in.
        for arg in argv:
            if (arg.startswith(">") and not REQUIRED.fullmatch(arg[1:])) or arg == "nopass":
                problems.append(f"{name}: a --user password {arg[:1]}… is not a required ${{VAR:?…}}")
    return problems


COMPOSE: dict[str, Any] = interpolate(RAW_COMPOSE, TEST_ENV)


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
                if "--http" not in argv or argv[argv.index("--http") + 1] != HEAD_DEADLINE:
                    problems.append(f"{name}: uvicorn without --http {HEAD_DEADLINE}: request heads have no deadline")
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
        # db-logins alone also reads the processes' passwords (shared/core/logins.py), which no Settings holds.
        known = set(Settings.model_fields)
        if name == "db-logins":
            known |= set(logins.LoginSettings.model_fields)
        problems += [f"{name}: {k} is not a Settings field" for k in env if k.lower() not in known]
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
    # The logins' group roles and agent_logins exist only once the migrations ran.
    if ((services["db-logins"].get("depends_on") or {}).get("migrate") or {}).get("condition") != (
        "service_completed_successfully"
    ):
        problems.append("db-logins: depends_on migrate needs condition service_completed_successfully")
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
        machine_type = default.group(1) if default else value
        if machine_type not in seeded_machine_types(seed_sql):
            problems.append(f"{name}: machine type {machine_type!r} is not seeded")
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


RAW_CHECKS: dict[str, Callable[[dict[str, Any]], list[str]]] = {"ports": port_problems, "passwords": password_problems}


@pytest.mark.parametrize("check", sorted(RAW_CHECKS))
def test_ports_are_local_and_passwords_required(check: str) -> None:
    """Every published port binds 127.0.0.1; every password comes from the environment, with no default."""
    assert RAW_CHECKS[check](RAW_COMPOSE) == []


def test_compose_refuses_to_start_without_passwords() -> None:
    """Leaving out either password is an error (as `docker compose` reports it), not an empty or default one."""
    for missing in TEST_ENV:
        with pytest.raises(ValueError, match=f"set {missing}"):
            interpolate(RAW_COMPOSE, {k: v for k, v in TEST_ENV.items() if k != missing})
    env = env_of(COMPOSE["services"]["api"])
    assert urlsplit(env["DATABASE_URL"]).password == TEST_ENV["API_DB_PASSWORD"]
    assert urlsplit(env_of(COMPOSE["services"]["migrate"])["DATABASE_URL"]).password == TEST_ENV["POSTGRES_PASSWORD"]
    assert urlsplit(env["REDIS_URL"]).password == TEST_ENV["REDIS_API_PASSWORD"]


@pytest.mark.parametrize(
    ("check", "service", "key", "value"),
    [
        ("ports", "api", "ports", ["8000:8000"]),
        ("ports", "postgres", "ports", ["0.0.0.0:5432:5432"]),
        ("ports", "redis", "ports", [{"target": 6379, "published": 6379}]),
        ("ports", "redis", "ports", ["6379"]),
        ("passwords", "postgres", "environment", {"POSTGRES_PASSWORD": "postgres"}),
        ("passwords", "postgres", "environment", {"POSTGRES_PASSWORD": "${POSTGRES_PASSWORD:-postgres}"}),
        ("passwords", "postgres", "environment", {"POSTGRES_PASSWORD": "${POSTGRES_PASSWORD}"}),
        ("passwords", "postgres", "environment", {"POSTGRES_PASSWORD": "${POSTGRES_PASSWORD?empty is fine}"}),
        ("passwords", "api", "environment", {"DATABASE_URL": "postgresql://postgres:postgres@postgres/traincast"}),
        ("passwords", "worker", "environment", {"REDIS_URL": "redis://:${REDIS_PASSWORD-x}@redis:6379/0"}),
        ("passwords", "redis", "command", ["redis-server", "--requirepass", "hunter2"]),
        ("passwords", "redis", "command", ["redis-server", "--user", "traincast-api", "on", ">hunter2", "+@all"]),
        ("passwords", "redis", "command", ["redis-server", "--user", "traincast-api", "on", "nopass", "+@all"]),
        ("passwords", "api", "environment", {"REDIS_URL": "redis://traincast-api:${REDIS_API_PASSWORD:-x}@redis/0"}),
    ],
)
def test_exposed_port_or_default_password_is_rejected(check: str, service: str, key: str, value: Any) -> None:
    """A port on every interface, a written password or one with a default fails its check."""
    broken = copy.deepcopy(RAW_COMPOSE)
    broken["services"][service][key] = value
    assert RAW_CHECKS[check](broken) != []


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
        ("command", "migrate", "command", "python -m shared.core.settings"),
        ("command", "api", "command", ["uvicorn", "api.main:application"]),
        ("command", "api", "command", ["uvicorn", "api.main:app", "--host", "0.0.0.0"]),
        ("command", "worker", "command", ["celery", "-A", "worker.appx", "worker"]),
        ("command", "worker", "command", ["celery", "-A", "worker.app", "worker", "-Q", "jobz"]),
        ("command", "agent", "environment", {"BENCH_TIME_CAP_S": "soon"}),
        ("env", "api", "environment", {"DATABSE_URL": "x", "REDIS_URL": "redis://redis:6379/0"}),
        ("env", "worker", "environment", ["DATABASE_URL=postgresql://localhost/traincast", "REDIS_URL=redis://redis"]),
        ("depends", "api", "depends_on", {"postgres": {"condition": "service_healthy"}}),
        ("depends", "worker", "depends_on", {d: {"condition": "service_started"} for d in NEEDED_DEPS}),
        ("depends", "migrate", "depends_on", {"worker": {"condition": "service_healthy"}}),
        ("depends", "db-logins", "depends_on", {"postgres": {"condition": "service_healthy"}}),
        ("depends", "beat", "depends_on", {"postgres": {"condition": "service_healthy"}}),
        ("env", "db-logins", "environment", {"APIDB_PASSWORD": "x", **OWNER_URLS}),
        ("machine", "agent", "environment", {"AGENT_MACHINE_TYPE": "nope"}),
        ("machine", "gpu-agent", "environment", {"AGENT_MACHINE_TYPE": "${GPU_MACHINE_TYPE:-g9.mega}"}),
    ],
)
def test_broken_compose_is_rejected(check: str, service: str, key: str, value: Any) -> None:
    """A wrong module, app, queue, env name, dependency or machine type fails its check."""
    broken = copy.deepcopy(COMPOSE)
    broken["services"][service][key] = value
    assert CHECKS[check](broken) != []


def test_every_launch_of_the_api_names_the_protocol_with_a_head_deadline() -> None:
    """The Dockerfile, compose, Kubernetes, `make up` and the tests' and benches' stacks all run api.server's
    protocol (without it a half-sent request head holds a connection for as long as the client likes), and without
    uvicorn's proxy headers (which believe X-Forwarded-For from 127.0.0.1: API_TRUSTED_PROXIES decides instead)."""
    for path in ["Dockerfile", "docker-compose.yml", "deploy/k8s/api.yaml", "scripts/up.sh"]:
        text = (ROOT / path).read_text()
        assert text.count("api.main:app") == text.count(HEAD_DEADLINE) == text.count("--no-proxy-headers") >= 1, path
    from uvicorn.protocols.http.h11_impl import H11Protocol

    from api import server

    assert issubclass(server.Protocol, H11Protocol)
    argv = server.command("uvicorn", host="h", port=1)
    assert argv[argv.index("--http") + 1] == HEAD_DEADLINE and "api.main:app" in argv and "--no-proxy-headers" in argv
    for path in ["tests/support/stack.py", "bench/service.py", "bench/metrics.py"]:  # they run server.command
        text = (ROOT / path).read_text()
        assert "server.command(" in text and "api.main:app" not in text, path

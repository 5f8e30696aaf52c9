"""docker-compose.yml's database logins, without Docker: the owner only in the one-shots, each process its own login.

tests/integration/test_db_logins.py runs the command db-logins runs (shared/core/logins.py) against a real PostgreSQL.
"""

import copy
from typing import Any
from urllib.parse import urlsplit

import pytest

from shared.core import logins
from tests.unit.test_compose import (
    COMPOSE,
    KIND_OF,
    ONE_SHOTS,
    OWNER,
    OWNER_URLS,
    RAW_COMPOSE,
    TEST_ENV,
    argv_of,
    env_of,
    interpolate,
)


def login_problems(compose: dict[str, Any]) -> list[str]:
    """Services connecting as the owner or another kind's login, and logins db-logins would not make or map."""
    services = compose["services"]
    problems: list[str] = []
    for name, service in services.items():
        url = urlsplit(env_of(service).get("DATABASE_URL", ""))
        if url.username == OWNER and (name not in ONE_SHOTS or service.get("restart") != "no"):
            problems.append(f"{name}: connects as the owner {OWNER!r} but is not a one-shot ({', '.join(ONE_SHOTS)})")
    for name, kind in KIND_OF.items():
        url = urlsplit(env_of(services[name]).get("DATABASE_URL", ""))
        variable = f"{kind.upper()}_DB_PASSWORD"
        if (url.username, url.password) != (logins.LOGINS[kind], TEST_ENV[variable]):
            problems.append(f"{name}: DATABASE_URL is not {logins.LOGINS[kind]} with ${{{variable}}}")
    made = services["db-logins"]
    if argv_of(made) != ["python", "-m", "shared.core.logins"]:
        problems.append("db-logins: does not run python -m shared.core.logins")
    if urlsplit(env_of(made).get("DATABASE_URL", "")).username != OWNER:
        problems.append("db-logins: must run as the owner (it creates roles and maps agent logins)")
    # pydantic validates the environment's strings into SecretStr; the signature says SecretStr only.
    settings = logins.LoginSettings(**{k.lower(): v for k, v in env_of(made).items()})  # type: ignore[arg-type]
    wanted = {kind: TEST_ENV[f"{kind.upper()}_DB_PASSWORD"] for kind in logins.GROUPS}
    if settings.passwords() != wanted:
        problems.append("db-logins: does not get every kind's password from its own variable")
    for name in ("agent", "gpu-agent"):
        machine_type = env_of(services[name]).get("AGENT_MACHINE_TYPE", "")
        if machine_type not in settings.machine_types():
            problems.append(f"{name}: machine type {machine_type!r} is not in db-logins' AGENT_DB_MACHINE_TYPES")
    return problems


def test_each_service_connects_as_its_own_login() -> None:
    """Only migrate and db-logins use the owner; api, worker, beat, fleet and both agents use their kind's login."""
    assert login_problems(COMPOSE) == []
    assert {urlsplit(env_of(COMPOSE["services"][n])["DATABASE_URL"]).username for n in ONE_SHOTS} == {OWNER}


def test_a_chosen_gpu_machine_type_is_mapped_too() -> None:
    """GPU_MACHINE_TYPE names the gpu-agent's type and is mapped to the agents' login, not the default."""
    compose = interpolate(RAW_COMPOSE, TEST_ENV | {"GPU_MACHINE_TYPE": "g4dn.xlarge"})
    assert login_problems(compose) == []
    env = env_of(compose["services"]["db-logins"])
    # pydantic validates the environment's strings into SecretStr; the signature says SecretStr only.
    made = logins.LoginSettings(**{k.lower(): v for k, v in env.items()})  # type: ignore[arg-type]
    assert made.machine_types() == ["local", "g4dn.xlarge"]


def _with_env(service: str, **env: str) -> dict[str, Any]:
    broken = copy.deepcopy(COMPOSE)
    broken["services"][service]["environment"] = {**env_of(broken["services"][service]), **env}
    return broken


def _url(login: str, password: str) -> str:
    return f"postgresql://{login}:{password}@postgres:5432/traincast"


@pytest.mark.parametrize(
    ("service", "env"),
    [
        ("api", {"DATABASE_URL": OWNER_URLS["DATABASE_URL"]}),
        ("worker", {"DATABASE_URL": _url(OWNER, TEST_ENV["POSTGRES_PASSWORD"])}),
        ("beat", {"DATABASE_URL": _url("traincast_api_login", TEST_ENV["API_DB_PASSWORD"])}),
        ("agent", {"DATABASE_URL": _url("traincast_agent_login", TEST_ENV["WORKER_DB_PASSWORD"])}),
        ("fleet", {"DATABASE_URL": _url("traincast_fleet", TEST_ENV["FLEET_DB_PASSWORD"])}),
        ("db-logins", {"AGENT_DB_MACHINE_TYPES": "local"}),
        ("db-logins", {"FLEET_DB_PASSWORD": TEST_ENV["API_DB_PASSWORD"]}),
        ("db-logins", {"DATABASE_URL": _url("traincast_api_login", TEST_ENV["API_DB_PASSWORD"])}),
    ],
)
def test_a_wrong_login_is_rejected(service: str, env: dict[str, str]) -> None:
    """The owner in a long-running service, another kind's login or password, an unmapped agent type: caught."""
    assert login_problems(_with_env(service, **env)) != []


def test_the_owner_in_a_restarting_one_shot_is_rejected() -> None:
    """A service with the owner's URL that compose restarts is long-running, whatever its name."""
    broken = copy.deepcopy(COMPOSE)
    broken["services"]["db-logins"]["restart"] = "unless-stopped"
    assert login_problems(broken) != []

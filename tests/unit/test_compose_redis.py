"""docker-compose.yml's Redis users, without Docker: each kind its own user, password and shared/core/redis_acl.py
rules.

tests/integration/test_compose_redis_server.py starts redis-server with the arguments compose gives it.
"""

import copy
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from shared.core import redis_acl
from tests.unit.test_compose import COMPOSE, KIND_OF, ONE_SHOTS, RAW_COMPOSE, TEST_ENV, argv_of, env_of, interpolate

HEAD = ["redis-server", "--appendonly", "yes", "--requirepass", "${REDIS_PASSWORD:?set REDIS_PASSWORD}"]
FLEET_MD = (Path(__file__).resolve().parents[2] / "docs" / "FLEET.md").read_text()


def server_users(argv: list[str]) -> dict[str, list[str]]:
    """The users redis-server's `--user <name> <rules…>` arguments make: name → its rules (passwords included)."""
    users: dict[str, list[str]] = {}
    for i, arg in enumerate(argv):
        if arg == "--user":
            end = next((j for j in range(i + 1, len(argv)) if argv[j].startswith("--")), len(argv))
            users[argv[i + 1]] = argv[i + 2 : end]
    return users


def db_of(url: str) -> int:
    """The db number a Redis URL names (0 if none)."""
    return int(urlsplit(url).path.lstrip("/") or 0)


def redis_problems(compose: dict[str, Any]) -> list[str]:
    """Services not under their kind's user and password, users whose rules are not shared/core/redis_acl.py's."""
    services = compose["services"]
    users = server_users(argv_of(services["redis"]))
    agent_types = [env_of(services[n]).get("AGENT_MACHINE_TYPE", "") for n in ("agent", "gpu-agent")]
    problems: list[str] = []
    for name, service in services.items():
        url = env_of(service).get("REDIS_URL")
        if url is not None and urlsplit(url).username in (None, "", "default") and name not in ONE_SHOTS:
            problems.append(f"{name}: connects to Redis as the default user but is not a one-shot")
        if url is not None and name in ONE_SHOTS and urlsplit(url).password != TEST_ENV["REDIS_PASSWORD"]:
            problems.append(f"{name}: the operator's REDIS_URL is not the default user with ${{REDIS_PASSWORD}}")
    for name, kind in KIND_OF.items():
        url = env_of(services[name]).get("REDIS_URL", "")
        user, variable = redis_acl.USERS[kind], redis_acl.PASSWORD_VARIABLES[kind]
        if (urlsplit(url).username, urlsplit(url).password) != (user, TEST_ENV[variable]):
            problems.append(f"{name}: REDIS_URL is not {user} with ${{{variable}}}")
            continue
        # Agents: the types compose's agents run as (and no other); rules() refuses a name that is not one.
        types = agent_types if kind == "agent" else None
        wanted = ["on", f">{TEST_ENV[variable]}", *redis_acl.rules(kind, db=db_of(url), machine_types=types)]
        if users.get(user) != wanted:
            problems.append(f"{name}: redis-server's user {user} is not `on >${{{variable}}}` with its kind's rules")
    if set(users) != set(redis_acl.USERS.values()):
        problems.append(f"redis: users {sorted(users)}, not one per process kind {sorted(redis_acl.USERS.values())}")
    if env_of(services["redis"]).get("REDISCLI_AUTH") != TEST_ENV["REDIS_PASSWORD"]:
        problems.append("redis: the healthcheck's REDISCLI_AUTH is not the default user's ${REDIS_PASSWORD}")
    return problems


def test_each_service_uses_its_own_redis_user() -> None:
    """api, worker, beat, fleet, both agents: their kind's user and password; the default user only in one-shots."""
    assert redis_problems(COMPOSE) == []
    kinds = {urlsplit(env_of(COMPOSE["services"][n])["REDIS_URL"]).username for n in KIND_OF}
    assert kinds == set(redis_acl.USERS.values())


def test_a_chosen_gpu_machine_type_is_granted_instead_of_the_default() -> None:
    """GPU_MACHINE_TYPE names the gpu-agent's type, and the agents' user is granted its queue and not g5.xlarge's."""
    compose = interpolate(RAW_COMPOSE, TEST_ENV | {"GPU_MACHINE_TYPE": "g4dn.xlarge"})
    assert redis_problems(compose) == []
    agent = server_users(argv_of(compose["services"]["redis"]))["traincast-agent"]
    assert "~bench.g4dn.xlarge" in agent and "~unacked.bench.g4dn.xlarge:*" in agent
    assert not any("g5" in rule for rule in agent)


def test_compose_lines_are_the_generated_ones() -> None:
    """redis's command is HEAD then compose_user_args() exactly; `--compose` prints YAML that parses back to it."""
    assert argv_of(RAW_COMPOSE["services"]["redis"]) == [*HEAD, *redis_acl.compose_user_args()]
    assert yaml.safe_load(f"[{redis_acl.compose_yaml()}]") == redis_acl.compose_user_args()


def test_fleet_md_lines_are_the_generated_ones() -> None:
    """docs/FLEET.md's ACL SETUSER lines are `python -m shared.core.redis_acl`'s (every agent type, db 0)."""
    documented = re.findall(r"^ACL SETUSER .*$", FLEET_MD, flags=re.MULTILINE)
    generated = redis_acl.setuser_lines(redis_acl.KINDS)
    assert sorted(documented) == sorted(generated)


def _with(service: str, key: str, value: Any) -> dict[str, Any]:
    broken = copy.deepcopy(COMPOSE)
    if key == "environment":
        value = {**env_of(broken["services"][service]), **value}
    broken["services"][service][key] = value
    return broken


def _url(user: str, password: str) -> str:
    return f"redis://{user}:{password}@redis:6379/0"


def _without_user(user: str) -> list[str]:
    argv = argv_of(COMPOSE["services"]["redis"])
    start = argv.index(user) - 1
    end = next((i for i in range(start + 1, len(argv)) if argv[i] == "--user"), len(argv))
    return argv[:start] + argv[end:]


def _with_rule(user: str, rule: str) -> list[str]:
    argv = argv_of(COMPOSE["services"]["redis"])
    return [*argv[: argv.index(user) + 3], rule, *argv[argv.index(user) + 3 :]]


@pytest.mark.parametrize(
    ("service", "key", "value"),
    [
        ("api", "environment", {"REDIS_URL": _url("traincast-worker", TEST_ENV["REDIS_WORKER_PASSWORD"])}),
        ("beat", "environment", {"REDIS_URL": _url("default", TEST_ENV["REDIS_PASSWORD"])}),
        ("worker", "environment", {"REDIS_URL": f"redis://:{TEST_ENV['REDIS_PASSWORD']}@redis:6379/0"}),
        ("agent", "environment", {"REDIS_URL": _url("traincast-agent", TEST_ENV["REDIS_API_PASSWORD"])}),
        ("fleet", "environment", {"REDIS_URL": _url("traincast-agent", TEST_ENV["REDIS_AGENT_PASSWORD"])}),
        ("gpu-agent", "environment", {"AGENT_MACHINE_TYPE": "p4d.24xlarge"}),
        ("agent", "environment", {"REDIS_URL": _url("traincast-agent", TEST_ENV["REDIS_AGENT_PASSWORD"])[:-1] + "3"}),
        ("migrate", "environment", {"REDIS_URL": _url("traincast-worker", TEST_ENV["REDIS_WORKER_PASSWORD"])}),
        ("redis", "command", _without_user("traincast-fleet")),
        ("redis", "command", _with_rule("traincast-agent", "~unacked")),
        ("redis", "command", _with_rule("traincast-api", "+@all")),
        ("redis", "command", [*argv_of(COMPOSE["services"]["redis"]), "--user", "spare", "on", ">x", "+@all"]),
        ("redis", "environment", {"REDISCLI_AUTH": TEST_ENV["REDIS_API_PASSWORD"]}),
    ],
)
def test_a_wrong_redis_user_is_rejected(service: str, key: str, value: Any) -> None:
    """Another kind's user or password, the default user in a long-running service, rules not redis_acl's: caught."""
    assert redis_problems(_with(service, key, value)) != []


@pytest.mark.parametrize("variable", sorted(redis_acl.PASSWORD_VARIABLES.values()))
def test_compose_refuses_to_start_without_a_redis_password(variable: str) -> None:
    """Each kind's Redis password is required: unset or empty, compose stops with `set <VAR>`."""
    for env in ({k: v for k, v in TEST_ENV.items() if k != variable}, TEST_ENV | {variable: ""}):
        with pytest.raises(ValueError, match=f"set {variable}"):
            interpolate(RAW_COMPOSE, env)


def test_the_printed_lines_limit_agents_to_the_types_given(capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m shared.core.redis_acl agent --types local --db 3`: local's keys only, db 3's channels."""
    assert redis_acl.main(["agent", "--types", "local", "--db", "3"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    rules = redis_acl.rules("agent", db=3, machine_types=["local"])
    assert line == " ".join(["ACL SETUSER traincast-agent on >PASSWORD", *rules])
    assert "~bench.local" in line and "~bench.*" not in line and "&/3.celery.pidbox" in line


@pytest.mark.parametrize("argv", [["agent", "--types", "g5*"], ["agent", "--types", "g5:x"], ["nobody"]])
def test_a_bad_type_or_kind_is_refused_in_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """A glob character or ':' in a type would grant other types' keys; an unknown kind has no user: exit 2."""
    assert redis_acl.main(argv) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.startswith("error: ") and out.err.count("\n") == 1

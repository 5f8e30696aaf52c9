"""`python -m shared.core.logins` (compose's db-logins) on a PostgreSQL that asks every login but the owner for its
password.

The tests' shared cluster trusts 127.0.0.1, so a password there proves nothing: this cluster is the test's own,
with scram-sha-256 for every role but postgres, as a deployment's would be. What each group role may do is
tests/integration/test_least_privilege.py's subject; here, that the logins the command makes are the ones processes
can use.
"""

import os
import secrets
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psycopg2
import psycopg2.errors
import pytest

from shared.agents import UPSERT_AGENT
from shared.core import logins
from shared.core.db import Json, one, transaction
from shared.core.migrate import migrate
from shared.measurements.environments import INSERT_ENVIRONMENT
from tests.support.faultkit import OwnPostgres, OwnRedis, copy_api_keys
from tests.support.stack import ROOT, Stack, http

# The owner over its socket and 127.0.0.1 without a password (the fixture's own setup); everyone else with one.
HBA = "local all postgres trust\nhost all postgres 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 scram-sha-256\n"
JOB = {"cnns": ["resnet18"], "machines": ["local"], "batch_sizes": [1, 2], "image_size": 32}
OTHER = "g4dn.xlarge"
MAPPED = "SELECT machine_type FROM agent_logins WHERE role = %s"
WHO = "SELECT current_user AS me, pg_has_role(current_user, %s, 'MEMBER') AS member"
GROUPS_OF = """
SELECT array_agg(g.rolname ORDER BY g.rolname) AS groups FROM pg_auth_members m
JOIN pg_roles g ON g.oid = m.roleid JOIN pg_roles u ON u.oid = m.member WHERE u.rolname = %s"""


@pytest.fixture(scope="module")
def owner_url(service_env: dict[str, str]) -> Iterator[str]:
    """The owner's URL to a migrated database (with this run's API keys) on a cluster of this module's own."""
    pg = OwnPostgres()
    try:
        (pg.data / "pg_hba.conf").write_text(HBA)
        pg.start()
        conn = psycopg2.connect(pg.admin_url)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE traincast")
        conn.close()
        url = pg.admin_url.rsplit("/", 1)[0] + "/traincast"
        migrate(url)
        copy_api_keys(service_env["DATABASE_URL"], url)
        yield url
    finally:
        pg.remove()


def run_logins(owner: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run the command as compose's db-logins does: the owner's DATABASE_URL, passwords in the environment."""
    environ = {k: v for k, v in os.environ.items() if not k.endswith("_DB_PASSWORD")}
    environ |= {"DATABASE_URL": owner, **env}
    command = [sys.executable, "-m", "shared.core.logins"]
    return subprocess.run(command, cwd=ROOT, env=environ, capture_output=True, text=True, timeout=120)


def passwords() -> dict[str, str]:
    """A fresh password per process kind, as the README generates them."""
    return {f"{kind.upper()}_DB_PASSWORD": secrets.token_hex(24) for kind in logins.GROUPS}


def login_url(owner: str, kind: str, given: dict[str, str]) -> str:
    """owner's URL as kind's login with its password from given."""
    host = owner.split("@", 1)[1]
    return f"postgresql://{logins.LOGINS[kind]}:{given[f'{kind.upper()}_DB_PASSWORD']}@{host}"


def refused(url: str) -> bool:
    """Whether PostgreSQL refuses this URL's password."""
    try:
        psycopg2.connect(url).close()
    except psycopg2.OperationalError as exc:
        assert "password authentication failed" in str(exc), exc
        return True
    return False


def register_agent(url: str, machine_type: str) -> None:
    """What an agent does first, as url's login: store its environment, then its agents row for machine."""
    with transaction(url) as cur:
        cur.execute(INSERT_ENVIRONMENT, (f"logins-{uuid.uuid4()}", Json({})))
        env_id = one(cur)["id"]
        row = {"id": uuid.uuid4(), "machine_type": machine_type, "host": "logins-test", "pid": 1, "device": "cpu"}
        row |= {"env": env_id, "started_at": datetime.now(UTC), "instance": None, "description": None}
        cur.execute(UPSERT_AGENT, row)


def test_the_logins_work_for_their_processes(owner_url: str, tmp_path: Path) -> None:
    """Each login is in its group, with its password; the API serves jobs as its login; the agent writes local only."""
    given = passwords()
    done = run_logins(owner_url, **given, AGENT_DB_MACHINE_TYPES="local")
    assert done.returncode == 0, done.stderr
    for kind, group in logins.GROUPS.items():
        with transaction(login_url(owner_url, kind, given)) as cur:
            cur.execute(WHO, (group,))
            assert cur.fetchone() == {"me": logins.LOGINS[kind], "member": True}
        with transaction(owner_url) as cur:
            cur.execute(GROUPS_OF, (logins.LOGINS[kind],))
            assert one(cur)["groups"] == [group]  # in its own group, no other
        assert refused(login_url(owner_url, kind, passwords()))

    redis = OwnRedis(tmp_path)  # the job's queued message reaches no other test's worker
    redis.start()
    api = Stack({"DATABASE_URL": login_url(owner_url, "api", given), "REDIS_URL": redis.url}, tmp_path)
    try:
        api.start("api")
        api.wait_ready()
        submitted = http.post(f"{api.url}/v1/jobs", json=JOB)
        assert submitted.status_code == 202, submitted.text
        job = http.get(f"{api.url}/v1/jobs/{submitted.json()['id']}").json()
        assert job["status"] == "queued" and job["request"]["cnns"] == ["resnet18"], job
        assert http.post(f"{api.url}/v1/jobs/{job['id']}/cancel").json()["status"] == "canceled"
    finally:
        api.stop("api")
        redis.stop()
    assert "permission denied" not in api.log("api")

    agent = login_url(owner_url, "agent", given)
    register_agent(agent, "local")
    with pytest.raises(psycopg2.errors.InsufficientPrivilege, match="row-level security"):
        register_agent(agent, OTHER)


def test_running_again_rotates_passwords_and_sets_the_mapping(owner_url: str) -> None:
    """A second run with new passwords refuses the old ones; the agent login's types become exactly those given."""
    old, new = passwords(), passwords()
    assert run_logins(owner_url, **old, AGENT_DB_MACHINE_TYPES="local").returncode == 0
    rotated = run_logins(owner_url, **new, AGENT_DB_MACHINE_TYPES=f"{OTHER}, local")
    assert rotated.returncode == 0, rotated.stderr
    assert rotated.stdout.count("password set") == len(logins.GROUPS) and "created" not in rotated.stdout
    for kind in logins.GROUPS:
        assert refused(login_url(owner_url, kind, old)), kind
        assert not refused(login_url(owner_url, kind, new)), kind
    register_agent(login_url(owner_url, "agent", new), OTHER)

    again = run_logins(owner_url, **new, AGENT_DB_MACHINE_TYPES="local")
    assert again.returncode == 0, again.stderr
    with transaction(owner_url) as cur:
        cur.execute(MAPPED, (logins.LOGINS["agent"],))
        assert [r["machine_type"] for r in cur.fetchall()] == ["local"]
        cur.execute("SELECT count(*) AS n FROM pg_roles WHERE rolname = ANY(%s)", (list(logins.LOGINS.values()),))
        assert one(cur)["n"] == len(logins.GROUPS)
    assert not refused(login_url(owner_url, "api", new))
    with pytest.raises(psycopg2.errors.InsufficientPrivilege, match="row-level security"):
        register_agent(login_url(owner_url, "agent", new), OTHER)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "no password given"),
        ({"API_DB_PASSWORD": "short"}, "API_DB_PASSWORD: under 16 characters"),
        ({"AGENT_DB_PASSWORD": secrets.token_hex(24)}, "AGENT_DB_MACHINE_TYPES is empty"),
        (
            {"API_DB_PASSWORD": secrets.token_hex(24), "AGENT_DB_PASSWORD": secrets.token_hex(24)}
            | {"AGENT_DB_MACHINE_TYPES": "local nope"},
            "machine type 'nope' is not in the catalog",
        ),
    ],
)
def test_bad_input_is_one_line_and_changes_nothing(owner_url: str, env: dict[str, str], message: str) -> None:
    """Missing, short passwords, no or unknown types: exit 1, one line, and the logins keep their passwords."""
    before = passwords()
    assert run_logins(owner_url, **before, AGENT_DB_MACHINE_TYPES="local").returncode == 0
    failed = run_logins(owner_url, **env)
    lines = failed.stderr.strip().splitlines()
    assert failed.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
    assert not refused(login_url(owner_url, "api", before))  # all or nothing: the API's new password was not kept
    with transaction(owner_url) as cur:
        cur.execute(MAPPED, (logins.LOGINS["agent"],))
        assert [r["machine_type"] for r in cur.fetchall()] == ["local"]


def test_a_login_that_could_bypass_row_security_is_refused(owner_url: str) -> None:
    """A role of a login's name with BYPASSRLS is not given a password: the operator is told, one line."""
    given = passwords()
    assert run_logins(owner_url, **given, AGENT_DB_MACHINE_TYPES="local").returncode == 0
    with transaction(owner_url) as cur:
        cur.execute("ALTER ROLE traincast_agent_login BYPASSRLS")
    try:
        failed = run_logins(owner_url, AGENT_DB_PASSWORD=secrets.token_hex(24), AGENT_DB_MACHINE_TYPES="local")
        assert (
            failed.returncode == 1 and "traincast_agent_login is a superuser, CREATEROLE or BYPASSRLS" in failed.stderr
        )
        assert not refused(login_url(owner_url, "agent", given))
    finally:
        with transaction(owner_url) as cur:
            cur.execute("ALTER ROLE traincast_agent_login NOBYPASSRLS")

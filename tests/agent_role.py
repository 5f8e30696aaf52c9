"""Connecting as the agent's PostgreSQL role (migrations/0007_agent_role.sql) in tests.

The migration's traincast_agent stays NOLOGIN, as in production until an operator gives it a
password. Tests log in as traincast_agent_login instead: a member of traincast_agent with LOGIN and
no privileges of its own, so whatever it can do comes from traincast_agent's grants (or PUBLIC's).
A separate role, rather than ALTER ROLE traincast_agent LOGIN, because roles are cluster-wide and
the cluster is shared: a test run must not change the role other runs (and deployments) see.

Since migrations/0014_least_privilege.sql a login stores rows only for the machine types
agent_logins maps it to. That table is per database, so each run maps its own login.
"""

from collections.abc import Iterable
from urllib.parse import urlsplit, urlunsplit

import psycopg2

AGENT_LOGIN = "traincast_agent_login"
# The machine types the end-to-end tests run agents as (the Stack's `local`, and the fleet's and
# instance tests' g4dn.xlarge); an agent of any other type is refused by the database.
TEST_MACHINES = ("local", "g4dn.xlarge")
# Trust auth in the tests' cluster: LOGIN without a password. Created once per cluster, kept.
CREATE_LOGIN = """
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{login}') THEN
        CREATE ROLE {login} LOGIN INHERIT IN ROLE {group};
    END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;
END
$$"""
MAP_LOGIN = "INSERT INTO agent_logins (role, machine_type) VALUES (%s, %s) ON CONFLICT DO NOTHING"


def login_role(owner_url: str, login: str, group: str) -> None:
    """Create login as a LOGIN member of group, once per cluster (never altered or dropped: shared)."""
    conn = psycopg2.connect(owner_url)
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(CREATE_LOGIN.format(login=login, group=group))
    finally:
        conn.close()


def as_user(owner_url: str, login: str) -> str:
    """owner_url with login as its user (trust auth: no password)."""
    parts = urlsplit(owner_url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{login}@{host}"))


def agent_url(owner_url: str, machines: Iterable[str] = TEST_MACHINES, login: str = AGENT_LOGIN) -> str:
    """owner_url (a migrated database) as an agent login mapped to machines; creates and maps it if missing."""
    login_role(owner_url, login, "traincast_agent")
    conn = psycopg2.connect(owner_url)
    try:
        with conn, conn.cursor() as cur:
            for machine in machines:
                cur.execute(MAP_LOGIN, (login, machine))
    finally:
        conn.close()
    return as_user(owner_url, login)

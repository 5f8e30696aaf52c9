"""Connecting as the agent's PostgreSQL role (migrations/0007_agent_role.sql) in tests.

The migration's traincast_agent stays NOLOGIN, as in production until an operator gives it a
password. Tests log in as traincast_agent_login instead: a member of traincast_agent with LOGIN and
no privileges of its own, so whatever it can do comes from traincast_agent's grants (or PUBLIC's).
A separate role, rather than ALTER ROLE traincast_agent LOGIN, because roles are cluster-wide and
the cluster is shared: a test run must not change the role other runs (and deployments) see.
"""

from urllib.parse import urlsplit, urlunsplit

import psycopg2

AGENT_LOGIN = "traincast_agent_login"
# Trust auth in the tests' cluster: LOGIN without a password. Created once per cluster, kept.
CREATE_LOGIN = f"""
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{AGENT_LOGIN}') THEN
        CREATE ROLE {AGENT_LOGIN} LOGIN INHERIT IN ROLE traincast_agent;
    END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;
END
$$"""


def agent_url(owner_url: str) -> str:
    """owner_url (a migrated database) with the agent's login role as user; creates that role if missing."""
    conn = psycopg2.connect(owner_url)
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(CREATE_LOGIN)
    finally:
        conn.close()
    parts = urlsplit(owner_url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{AGENT_LOGIN}@{host}"))

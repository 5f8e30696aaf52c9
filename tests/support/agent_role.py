"""Connecting as the agent's PostgreSQL role (migrations/0007_agent_role.sql) in tests.

The migration's traincast_agent stays NOLOGIN, as in production until an operator gives it a
password. Tests log in as traincast_agent_login instead: a member of traincast_agent with LOGIN and
no privileges of its own, so whatever it can do comes from traincast_agent's grants (or PUBLIC's).
A separate role, rather than ALTER ROLE traincast_agent LOGIN, because roles are cluster-wide and
the cluster is shared: a test run must not change the role other runs (and deployments) see.

Since migrations/0014_least_privilege.sql a login stores rows only for the machine types
agent_logins maps it to. That table is per database, so each run maps its own login. Both go through
shared/core/logins.py, the operator's `traincast db-logins`, without passwords: the tests' cluster trusts 127.0.0.1.
"""

from collections.abc import Iterable
from urllib.parse import urlsplit, urlunsplit

from shared.core import logins
from shared.core.db import transaction

AGENT_LOGIN = logins.LOGINS["agent"]
# The machine types the end-to-end tests run agents as (the Stack's `local`, and the fleet's and
# instance tests' g4dn.xlarge); an agent of any other type is refused by the database.
TEST_MACHINES = ("local", "g4dn.xlarge")


def login_role(owner_url: str, login: str, group: str) -> None:
    """Make login a LOGIN member of group without a password (trust auth here); an existing one is left as it is."""
    with transaction(owner_url) as cur:
        logins.ensure_login(cur, login, group, password=None)


def as_user(owner_url: str, login: str) -> str:
    """owner_url with login as its user (trust auth: no password)."""
    parts = urlsplit(owner_url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{login}@{host}"))


def agent_url(owner_url: str, machine_types: Iterable[str] = TEST_MACHINES, login: str = AGENT_LOGIN) -> str:
    """owner_url (a migrated database) as an agent login mapped to machines; creates and maps it if missing."""
    login_role(owner_url, login, "traincast_agent")
    with transaction(owner_url) as cur:
        logins.map_agent(cur, login, machine_types)
    return as_user(owner_url, login)

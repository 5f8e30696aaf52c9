"""The processes' PostgreSQL logins: `python -m shared.core.logins` or `traincast db-logins`, as the owner.

One LOGIN role per process kind, a member of that kind's NOLOGIN group role (migrations 0007 and 0014), with
the password the operator gives in API_DB_PASSWORD, WORKER_DB_PASSWORD, FLEET_DB_PASSWORD, AGENT_DB_PASSWORD;
kinds without a password are left alone. Running it again sets the passwords again (rotation) and changes
nothing else. The agent's login is mapped to exactly AGENT_DB_MACHINE_TYPES in agent_logins, which this
module owns: row-level security lets an agent login store rows only for the types mapped to it.

Passwords reach the server as SCRAM verifiers computed here, never in clear: statement logs and
pg_stat_activity cannot show them.
"""

import re
import sys
from collections.abc import Iterable

import psycopg2.errors
import psycopg2.extensions
import psycopg2.extras
from psycopg2 import sql
from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.core.db import transaction
from shared.core.errors import InvalidRequest, TraincastError

GROUPS = {"api": "traincast_api", "worker": "traincast_worker", "fleet": "traincast_fleet", "agent": "traincast_agent"}
# The login each process kind connects as (docker-compose.yml puts these in the services' DATABASE_URLs).
LOGINS = {kind: f"{group}_login" for kind, group in GROUPS.items()}
# Long enough that guessing is hopeless; `openssl rand -hex 24` gives 48 characters.
MIN_PASSWORD_CHARS = 16

ROLE = "SELECT rolcanlogin, rolinherit, rolsuper, rolcreaterole, rolbypassrls FROM pg_roles WHERE rolname = %s"
IS_MEMBER = "SELECT pg_has_role(%s, %s, 'MEMBER') AS member"
UNMAP_OTHERS = "DELETE FROM agent_logins WHERE role = %s AND NOT (machine_type = ANY(%s))"
MAP = "INSERT INTO agent_logins (role, machine_type) VALUES (%s, %s) ON CONFLICT DO NOTHING"


class LoginSettings(BaseSettings):
    """The passwords and the agent's types, from the environment (not in Settings: no process needs them)."""

    model_config = SettingsConfigDict(env_prefix="", extra="ignore")

    api_db_password: SecretStr | None = None
    worker_db_password: SecretStr | None = None
    fleet_db_password: SecretStr | None = None
    agent_db_password: SecretStr | None = None
    # Comma- or space-separated machine type names the agent login may store rows for.
    agent_db_machine_types: str = ""

    def passwords(self) -> dict[str, str]:
        """Process kind → password, for the kinds given a non-empty one."""
        given = {kind: getattr(self, f"{kind}_db_password") for kind in GROUPS}
        return {kind: value.get_secret_value() for kind, value in given.items() if value and value.get_secret_value()}

    def machine_types(self) -> list[str]:
        """AGENT_DB_MACHINE_TYPES as a list, in order, without repeats."""
        return list(dict.fromkeys(t for t in re.split(r"[\s,]+", self.agent_db_machine_types) if t))


def ensure_login(cur: psycopg2.extras.RealDictCursor, login: str, group: str, password: str | None) -> str:
    """Make login a LOGIN member of group, with password if given; return what was done ("created", …)."""
    cur.execute(ROLE, (login,))
    role = cur.fetchone()
    verifier = None if password is None else _verifier(cur.connection, login, password)
    if role is None:
        create = sql.SQL("CREATE ROLE {} LOGIN INHERIT IN ROLE {}").format(sql.Identifier(login), sql.Identifier(group))
        if verifier is not None:
            create += sql.SQL(" PASSWORD {}").format(sql.Literal(verifier))
        cur.execute("SAVEPOINT ensure_login")
        try:
            cur.execute(create)
            return "created"
        except (psycopg2.errors.DuplicateObject, psycopg2.errors.UniqueViolation):
            # Roles are cluster-wide: another database's run created it between the check and the CREATE.
            cur.execute("ROLLBACK TO SAVEPOINT ensure_login")
            cur.execute(ROLE, (login,))
            role = cur.fetchone()
            if role is None:
                raise InvalidRequest(f"role {login} was created and dropped meanwhile; run again") from None
    if role["rolsuper"] or role["rolcreaterole"] or role["rolbypassrls"]:
        # A login that can bypass RLS or make roles is no least-privilege login: the operator must look.
        raise InvalidRequest(f"role {login} is a superuser, CREATEROLE or BYPASSRLS role; drop it or pick another")
    done = []
    if verifier is not None or not (role["rolcanlogin"] and role["rolinherit"]):
        alter = sql.SQL("ALTER ROLE {} LOGIN INHERIT").format(sql.Identifier(login))
        if verifier is not None:
            alter += sql.SQL(" PASSWORD {}").format(sql.Literal(verifier))
            done.append("password set")
        cur.execute(alter)
    # Only when missing: re-granting writes the catalog row, and parallel writers of one row collide.
    cur.execute(IS_MEMBER, (login, group))
    member = cur.fetchone()
    if not (member and member["member"]):
        cur.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(group), sql.Identifier(login)))
        done.append(f"added to {group}")
    return ", ".join(done) or "unchanged"


def map_agent(cur: psycopg2.extras.RealDictCursor, login: str, machine_types: Iterable[str]) -> None:
    """Map an agent login to exactly these machine types in this database (others are taken away)."""
    wanted = list(machine_types)
    cur.execute(UNMAP_OTHERS, (login, wanted))
    for machine_type in wanted:
        try:
            cur.execute(MAP, (login, machine_type))
        except psycopg2.errors.ForeignKeyViolation:
            raise InvalidRequest(f"machine type {machine_type!r} is not in the catalog (traincast machines)") from None


def apply(settings: LoginSettings, url: str | None = None) -> list[str]:
    """Create or update every login given a password, all or nothing; return one line per login."""
    passwords = settings.passwords()
    if not passwords:
        names = ", ".join(f"{kind.upper()}_DB_PASSWORD" for kind in GROUPS)
        raise InvalidRequest(f"no password given: set at least one of {names}")
    short = [f"{kind.upper()}_DB_PASSWORD" for kind, pw in passwords.items() if len(pw) < MIN_PASSWORD_CHARS]
    if short:
        raise InvalidRequest(f"{', '.join(short)}: under {MIN_PASSWORD_CHARS} characters; use `openssl rand -hex 24`")
    machine_types = settings.machine_types()
    if "agent" in passwords and not machine_types:
        raise InvalidRequest("AGENT_DB_MACHINE_TYPES is empty: an agent login mapped to no type stores nothing")
    lines = []
    with transaction(url) as cur:
        for kind, password in passwords.items():
            done = ensure_login(cur, LOGINS[kind], GROUPS[kind], password)
            if kind == "agent":
                map_agent(cur, LOGINS[kind], machine_types)
                done += f"; machine types {', '.join(machine_types)}"
            lines.append(f"{LOGINS[kind]} ({GROUPS[kind]}): {done}")
    return lines


def _verifier(conn: psycopg2.extensions.connection, login: str, password: str) -> str:
    # libpq computes the SCRAM verifier (PQencryptPasswordConn); the server stores it as given.
    return psycopg2.extensions.encrypt_password(password, login, conn, "scram-sha-256")


def main() -> int:
    """Command-line entry: apply the environment's logins and say what was done."""
    try:
        for line in apply(LoginSettings()):
            print(line)
    except TraincastError as exc:
        print(f"error: {exc.detail}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

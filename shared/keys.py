"""API keys in PostgreSQL (owns `api_keys`): create, list, revoke, and the bearer check of every request.

A key reads `tc_<id>_<secret>`: the 12 hex digits of `id` are public and find the row, the 32 random bytes of
`secret` are stored only as their SHA-256 and compared in constant time. A random 256-bit secret needs no slow
hash (nothing to guess from a dictionary), so a lookup costs one indexed SELECT.
"""

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from typing import Any

from shared.db import transaction
from shared.errors import Conflict, Forbidden, InvalidRequest, NotFound, Unauthorized

SCOPES = ("read", "submit", "admin")  # each includes the ones before it
PREFIX = "tc"
KEY = re.compile(r"^tc_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$")
NAME = re.compile(r"^[^\x00-\x1f\x7f]{1,100}$")
SHOWN = "id, name, scope, rate_per_s, created_at, last_used_at, revoked_at"

INSERT_KEY = f"""
INSERT INTO api_keys (id, name, scope, secret_sha256, rate_per_s) VALUES (%s, %s, %s, %s, %s)
RETURNING {SHOWN}"""
SELECT_KEYS = f"SELECT {SHOWN} FROM api_keys ORDER BY created_at, id"
SELECT_FOR_AUTH = "SELECT id, name, scope, secret_sha256, rate_per_s, revoked_at FROM api_keys WHERE id = %s"
# A write per request would be wasteful: once a minute is enough to tell a used key from an idle one.
TOUCH_KEY = """
UPDATE api_keys SET last_used_at = now()
WHERE id = %s AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')"""
SELECT_BY_REF = f"SELECT {SHOWN} FROM api_keys WHERE id = %(ref)s OR (name = %(ref)s AND revoked_at IS NULL)"
REVOKE_KEY = f"UPDATE api_keys SET revoked_at = now() WHERE id = %s AND revoked_at IS NULL RETURNING {SHOWN}"


@dataclass(frozen=True)
class Principal:
    """Who sent a request: the key's id (the owner of what it creates), name, scope and rate."""

    key_id: str
    name: str
    scope: str
    rate_per_s: float | None = None

    @property
    def is_admin(self) -> bool:
        """Admin keys see and act on everyone's jobs and CNNs."""
        return self.scope == "admin"

    @property
    def visible_owner(self) -> str | None:
        """The owner to filter by: None (everyone's) for admin, else this key's own id."""
        return None if self.is_admin else self.key_id

    def allows(self, scope: str) -> bool:
        """True when this key's scope includes `scope`."""
        return SCOPES.index(self.scope) >= SCOPES.index(scope)


def digest(secret: str) -> str:
    """The stored form of a key's secret."""
    return hashlib.sha256(secret.encode()).hexdigest()


def create(*, name: str, scope: str, rate_per_s: float | None = None) -> tuple[dict[str, Any], str]:
    """Store a new key; returns its row (no secret) and the key itself, which is never shown again."""
    if scope not in SCOPES:
        raise InvalidRequest(f"scope {scope!r}: use one of {', '.join(SCOPES)}")
    if not NAME.match(name):
        raise InvalidRequest("a key's name is 1-100 characters with no control characters")
    if rate_per_s is not None and not 0 < rate_per_s <= 1e6:
        raise InvalidRequest(f"rate {rate_per_s}: requests per second must be above 0 and at most 1000000")
    key_id, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
    with transaction() as cur:
        cur.execute(INSERT_KEY, (key_id, name, scope, digest(secret), rate_per_s))
        row: dict[str, Any] = dict(cur.fetchone() or {})
    return row, f"{PREFIX}_{key_id}_{secret}"


def list_all() -> list[dict[str, Any]]:
    """Every key, oldest first, revoked ones included; never a secret or its hash."""
    with transaction() as cur:
        cur.execute(SELECT_KEYS)
        return [dict(r) for r in cur.fetchall()]


def revoke(*, ref: str) -> dict[str, Any]:
    """Revoke the key with this id, or the one unrevoked key with this name."""
    with transaction() as cur:
        cur.execute(SELECT_BY_REF, {"ref": ref})
        rows = [dict(r) for r in cur.fetchall()]
        by_id = [r for r in rows if r["id"] == ref]
        if not by_id and len(rows) > 1:
            ids = ", ".join(r["id"] for r in rows)
            raise Conflict(f"{len(rows)} keys are named {ref!r} ({ids}); revoke one by its id")
        if not by_id and not rows:
            raise NotFound(f"no unrevoked key with id or name {ref!r}; see `traincast keys list`")
        target = (by_id or rows)[0]
        if target["revoked_at"] is not None:
            return target
        cur.execute(REVOKE_KEY, (target["id"],))
        return dict(cur.fetchone() or target)


def authenticate(*, token: str | None) -> Principal:
    """The key's principal, or Unauthorized: missing, malformed, unknown, wrong secret or revoked."""
    if not token:
        raise Unauthorized("send an API key: Authorization: Bearer <key> (create one with `traincast keys create`)")
    match = KEY.match(token)
    if match is None:
        raise Unauthorized("the API key is not a Traincast key (tc_<id>_<secret>)")
    key_id, secret = match.groups()
    with transaction() as cur:
        cur.execute(SELECT_FOR_AUTH, (key_id,))
        row = cur.fetchone()
        # Compared even for an unknown id, so the time taken does not tell which ids exist.
        stored = row["secret_sha256"] if row else "0" * 64
        if not hmac.compare_digest(stored, digest(secret)) or row is None:
            raise Unauthorized(f"API key {key_id} is unknown or its secret is wrong", key_id=key_id)
        if row["revoked_at"] is not None:
            raise Unauthorized(f"API key {key_id} ({row['name']}) was revoked", key_id=key_id)
        cur.execute(TOUCH_KEY, (key_id,))
    return Principal(key_id=key_id, name=row["name"], scope=row["scope"], rate_per_s=row["rate_per_s"])


def require(principal: Principal, scope: str) -> None:
    """Forbidden unless the principal's scope includes `scope`."""
    if not principal.allows(scope):
        raise Forbidden(
            f"API key {principal.key_id} ({principal.name}) has scope {principal.scope}; this needs {scope}",
            key_scope=principal.scope,
            needed_scope=scope,
        )

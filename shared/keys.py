"""API keys in PostgreSQL (owns `api_keys`): create, list, revoke, and the bearer check of every request.

A key reads `tc_<id>_<secret>`: the 12 hex digits of `id` are public and find the row, the 32 random bytes of
`secret` are stored only as their SHA-256 and compared in constant time. A random 256-bit secret needs no slow
hash (nothing to guess from a dictionary), so a lookup costs one indexed SELECT.
"""

import hashlib
import hmac
import math
import re
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Literal, cast

from typing_extensions import TypedDict  # pydantic reads typing's only from Python 3.12

from shared.core.db import transaction
from shared.core.errors import Conflict, Forbidden, InvalidRequest, NotFound, OverBudget, RateLimited, Unauthorized
from shared.core.settings import get_settings

if TYPE_CHECKING:
    from shared.jobs.store import KeyUsage

Scope = Literal["read", "submit", "admin"]
SCOPES: tuple[Scope, ...] = ("read", "submit", "admin")  # each includes the ones before it
PREFIX = "tc"
KEY = re.compile(r"^tc_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$")
# No control characters, nor lone surrogates (JSON can carry them; PostgreSQL's UTF-8 cannot store them).
NAME = re.compile(r"^[^\x00-\x1f\x7f\ud800-\udfff]{1,100}$")
# A key's own limits (migrations/0013_key_limits.sql); NULL: the setting's default.
# The largest daily benchmark budget a key may have: no limit in practice (the local admin key of `make up` has it).
MAX_BENCH_SECONDS_PER_DAY = 1e9
LIMITS = "max_unfinished_jobs, max_points_per_job, bench_seconds_per_day"
SHOWN = f"id, name, scope, rate_per_s, {LIMITS}, created_at, last_used_at, revoked_at"
# Seconds a client refused for too many unfinished jobs should wait: about one job's planning and a poll.
UNFINISHED_RETRY_AFTER_S = 10

INSERT_KEY = f"""
INSERT INTO api_keys (id, name, scope, secret_sha256, rate_per_s, {LIMITS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
RETURNING {SHOWN}"""
SELECT_KEYS = f"SELECT {SHOWN} FROM api_keys ORDER BY created_at, id"
SELECT_FOR_AUTH = f"SELECT id, name, scope, secret_sha256, rate_per_s, {LIMITS}, revoked_at FROM api_keys WHERE id = %s"
# A write per request would be wasteful: once a minute is enough to tell a used key from an idle one.
TOUCH_KEY = """
UPDATE api_keys SET last_used_at = now()
WHERE id = %s AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')"""
SELECT_BY_REF = f"SELECT {SHOWN} FROM api_keys WHERE id = %(ref)s OR (name = %(ref)s AND revoked_at IS NULL)"
SELECT_KEY = f"SELECT {SHOWN} FROM api_keys WHERE id = %s"
# The worker's one read of api_keys (migrations/0028): the column it is granted, for planning's budget check.
SELECT_BUDGET = "SELECT bench_seconds_per_day FROM api_keys WHERE id = %s"
# Row locks on every active admin key: of two concurrent revocations of the last two, the second sees one left.
LOCK_ACTIVE_ADMINS = "SELECT id FROM api_keys WHERE scope = 'admin' AND revoked_at IS NULL ORDER BY id FOR UPDATE"
REVOKE_KEY = f"UPDATE api_keys SET revoked_at = now() WHERE id = %s AND revoked_at IS NULL RETURNING {SHOWN}"


class KeyRow(TypedDict):
    """An `api_keys` row as shown (SHOWN): never the secret nor its hash. Limits None: the setting's default."""

    id: str
    name: str
    scope: Scope
    rate_per_s: float | None
    max_unfinished_jobs: int | None
    max_points_per_job: int | None
    bench_seconds_per_day: float | None
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


@dataclass(frozen=True)
class Principal:
    """Who sent a request: the key's id (the owner of what it creates), name, scope, rate and limits (None: default)."""

    key_id: str
    name: str
    scope: str
    rate_per_s: float | None = None
    max_unfinished_jobs: int | None = None
    max_points_per_job: int | None = None
    bench_seconds_per_day: float | None = None

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


def create(
    *,
    name: str,
    scope: str,
    rate_per_s: float | None = None,
    max_unfinished_jobs: int | None = None,
    max_points_per_job: int | None = None,
    bench_seconds_per_day: float | None = None,
) -> tuple[KeyRow, str]:
    """Store a new key; returns its row (no secret) and the key itself, which is never shown again."""
    if scope not in SCOPES:
        raise InvalidRequest(f"scope {scope!r}: use one of {', '.join(SCOPES)}")
    if not NAME.match(name):
        raise InvalidRequest("a key's name is 1-100 characters with no control characters")
    if rate_per_s is not None and not 0 < rate_per_s <= 1e6:
        raise InvalidRequest(f"rate {rate_per_s}: requests per second must be above 0 and at most 1000000")
    for what, value, low in (("max jobs", max_unfinished_jobs, 1), ("max points", max_points_per_job, 1)):
        if value is not None and not low <= value <= 2**31 - 1:
            raise InvalidRequest(f"{what} {value}: must be a whole number from {low} to {2**31 - 1}")
    if bench_seconds_per_day is not None and not 0 <= bench_seconds_per_day <= MAX_BENCH_SECONDS_PER_DAY:
        raise InvalidRequest(
            f"bench seconds per day {bench_seconds_per_day}: must be from 0 to {MAX_BENCH_SECONDS_PER_DAY:.0f}"
        )
    key_id, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
    with transaction() as cur:
        limits = (max_unfinished_jobs, max_points_per_job, bench_seconds_per_day)
        cur.execute(INSERT_KEY, (key_id, name, scope, digest(secret), rate_per_s, *limits))
        row = cast(KeyRow, cur.fetchone())
    return row, f"{PREFIX}_{key_id}_{secret}"


def list_all() -> list[KeyRow]:
    """Every key, oldest first, revoked ones included; never a secret or its hash."""
    with transaction() as cur:
        cur.execute(SELECT_KEYS)
        return cast(list[KeyRow], cur.fetchall())


def get(*, key_id: str) -> KeyRow:
    """One key by id (revoked or not); never its secret or hash."""
    with transaction() as cur:
        cur.execute(SELECT_KEY, (key_id,))
        row = cur.fetchone()
    if row is None:
        raise NotFound(f"no API key with id {key_id}", key_id=key_id)
    return cast(KeyRow, row)


def revoke_id(*, key_id: str) -> KeyRow:
    """Revoke a key by id, as `DELETE /v1/keys/{id}` does: a revoked one stays as it is; never the last active admin.

    Keeping one admin key means nobody locks the API's administration out over HTTP; `traincast keys` (straight in
    the database) can still revoke any key and make a new admin one.
    """
    with transaction() as cur:
        cur.execute(SELECT_KEY, (key_id,))
        row = cur.fetchone()
        if row is None:
            raise NotFound(f"no API key with id {key_id}", key_id=key_id)
        if row["revoked_at"] is not None:
            return cast(KeyRow, row)
        if row["scope"] == "admin":
            cur.execute(LOCK_ACTIVE_ADMINS)
            if [r["id"] for r in cur.fetchall()] == [key_id]:
                raise Conflict(
                    f"API key {key_id} ({row['name']}) is the last active admin key; create another admin key"
                    " first (POST /v1/keys), or revoke it with `traincast keys revoke`",
                    key_id=key_id,
                )
        cur.execute(REVOKE_KEY, (key_id,))
        return cast(KeyRow, cur.fetchone() or row)


def revoke(*, ref: str) -> KeyRow:
    """Revoke the key with this id, or the one unrevoked key with this name (the CLI: any key, even the last admin)."""
    with transaction() as cur:
        cur.execute(SELECT_BY_REF, {"ref": ref})
        rows = cast(list[KeyRow], cur.fetchall())
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
        return cast(KeyRow, cur.fetchone() or target)


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
    return Principal(
        key_id=key_id,
        name=row["name"],
        scope=row["scope"],
        rate_per_s=row["rate_per_s"],
        max_unfinished_jobs=row["max_unfinished_jobs"],
        max_points_per_job=row["max_points_per_job"],
        bench_seconds_per_day=row["bench_seconds_per_day"],
    )


def require(principal: Principal, scope: str) -> None:
    """Forbidden unless the principal's scope includes `scope`."""
    if not principal.allows(scope):
        raise Forbidden(
            f"API key {principal.key_id} ({principal.name}) has scope {principal.scope}; this needs {scope}",
            key_scope=principal.scope,
            needed_scope=scope,
        )


def check_submission(principal: Principal, usage: "KeyUsage") -> None:
    """RateLimited when one more job would pass the key's unfinished jobs or its benchmark seconds of the day.

    `usage` is shared/jobs.py's key_usage(): unfinished jobs, benchmark seconds charged in the last 24 h and
    seconds until the oldest charge of them leaves the window.
    """
    settings = get_settings()
    most = principal.max_unfinished_jobs
    most = settings.max_unfinished_jobs_per_key if most is None else most
    unfinished = int(usage["unfinished"])
    if unfinished >= most:
        raise RateLimited(
            f"API key {principal.key_id} has {unfinished} unfinished jobs (queued or running); at most {most} at"
            f" once are allowed: wait for one to finish or cancel one",
            retry_after_s=UNFINISHED_RETRY_AFTER_S,
            unfinished_jobs=unfinished,
            limit=most,
        )
    budget = principal.bench_seconds_per_day
    budget = settings.max_bench_seconds_per_key_day if budget is None else budget
    spent = float(usage["bench_seconds_day"])
    if spent > budget:
        retry_after = max(1, math.ceil(frees_in(usage, needed=spent - budget)))
        raise RateLimited(
            f"API key {principal.key_id} sent agents {spent:g} s of layer benchmarks in the last 24 h; its budget is"
            f" {budget:g} s a day: retry after {retry_after} s",
            retry_after_s=retry_after,
            bench_seconds_day=spent,
            limit=budget,
        )


def bench_budget(*, key_id: str) -> float:
    """The key's benchmark seconds a day: its own limit, else the setting's default (a revoked key's too)."""
    with transaction() as cur:
        cur.execute(SELECT_BUDGET, (key_id,))
        row = cur.fetchone()
    own = None if row is None else row["bench_seconds_per_day"]
    return get_settings().max_bench_seconds_per_key_day if own is None else float(own)


def frees_in(usage: "KeyUsage", *, needed: float) -> float:
    """Seconds until the charges leaving the key's 24 h window add up to `needed` benchmark seconds."""
    freed = 0.0
    for expires_in, seconds in sorted(usage.get("bench_charges") or []):
        freed += seconds
        if freed >= needed - 1e-9:
            return max(0.0, expires_in)
    return 24 * 3600.0  # pragma: no cover - the charges sum to the spent seconds, which exceed `needed`


def check_charge(usage: "KeyUsage", *, key_id: str, budget_s: float, charge_s: float) -> None:
    """RateLimited when a job's benchmark seconds would take the key past its budget of the last 24 h."""
    spent = float(usage["bench_seconds_day"])
    if spent + charge_s <= budget_s:
        return
    if charge_s > budget_s:  # no wait makes room: say so rather than name a retry that fails again
        raise OverBudget(
            f"this job needs {charge_s:g} s of layer benchmarks on agents, more than API key {key_id}'s whole budget"
            f" of {budget_s:g} s a day, so no retry can run it: ask for fewer CNNs, batch sizes or machine types,"
            " or ask an admin for a key with a larger budget (traincast keys create --bench-seconds-per-day)",
            bench_seconds_day=spent,
            charge=charge_s,
            limit=budget_s,
        )
    retry_after = max(1, math.ceil(frees_in(usage, needed=spent + charge_s - budget_s)))
    raise RateLimited(
        f"this job needs {charge_s:g} s of layer benchmarks on agents, and API key {key_id} has"
        f" {max(0.0, budget_s - spent):g} s left of its {budget_s:g} s a day: ask for fewer CNNs, batch sizes or"
        f" machine types, or retry after {retry_after} s",
        retry_after_s=retry_after,
        bench_seconds_day=spent,
        charge=charge_s,
        limit=budget_s,
    )

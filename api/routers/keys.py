"""API keys over HTTP (admin scope; any key may revoke itself): create, list, show, revoke.

`traincast keys` does the same in the database."""

import logging
from typing import Annotated

from fastapi import APIRouter, Path, Response
from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypedDict

from api.auth import Admin, Reader
from api.routing import ParsedOffLoop
from shared import keys
from shared.core.errors import Forbidden

log = logging.getLogger(__name__)
router = APIRouter(route_class=ParsedOffLoop, prefix="/v1/keys", tags=["keys"])
KeyId = Annotated[str, Path(pattern=r"^[0-9a-f]{12}$", description="the key's public id: 12 hex digits")]
Scope = keys.Scope
MAX_INT = 2**31 - 1


class NewKey(BaseModel):
    """A key to create: who uses it, its scope and, optionally, limits of its own (null: the setting's default)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    name: str = Field(min_length=1, max_length=100, description="who or what uses it; no control characters")
    scope: Scope = Field(description="read ⊂ submit ⊂ admin")
    rate_per_s: float | None = Field(None, gt=0, le=1e6, description="requests per second (API_RATE_PER_KEY_S)")
    max_unfinished_jobs: int | None = Field(
        None, ge=1, le=MAX_INT, description="jobs queued or running at once (MAX_UNFINISHED_JOBS_PER_KEY)"
    )
    max_points_per_job: int | None = Field(
        None, ge=1, le=MAX_INT, description="prediction points per job (MAX_POINTS_PER_JOB)"
    )
    bench_seconds_per_day: float | None = Field(
        None, ge=0, le=1e9, description="benchmark seconds its jobs may send in 24 h (MAX_BENCH_SECONDS_PER_KEY_DAY)"
    )


# A key as the API shows it is shared/keys.py's KeyRow: never its secret nor the secret's hash.
class CreatedKey(keys.KeyRow):
    """A new key's metadata and the key itself, shown in this response only."""

    key: Annotated[str, Field(description="Authorization: Bearer <key>; only its hash is stored, never shown again")]


class KeyList(TypedDict):
    """Every key, oldest first, revoked ones included."""

    keys: list[keys.KeyRow]


@router.post("", status_code=201, response_model=CreatedKey)
def create_key(body: NewKey, response: Response, principal: Admin) -> CreatedKey:
    """Create a key; the response holds the key itself, which is never shown again."""
    row, key = keys.create(**body.model_dump())
    log.info("API key %s (%s, scope %s) created by key %s", row["id"], row["name"], row["scope"], principal.key_id)
    response.headers["Location"] = f"/v1/keys/{row['id']}"
    response.headers["Cache-Control"] = "no-store"  # the secret must not sit in a cache
    return CreatedKey(**row, key=key)


@router.get("", response_model=KeyList)
def list_keys(_principal: Admin) -> KeyList:
    """Every key with its scope, limits, when it was created, last used and revoked."""
    return KeyList(keys=keys.list_all())


@router.get("/{key_id}", response_model=keys.KeyRow)
def get_key(key_id: KeyId, _principal: Admin) -> keys.KeyRow:
    """One key by id (revoked ones too)."""
    return keys.get(key_id=key_id)


@router.delete("/{key_id}", status_code=204, response_class=Response)
def revoke_key(key_id: KeyId, principal: Reader) -> Response:
    """Revoke a key (again: still 204): an admin key any key, any key itself (a leaked one, at once); 409 for the
    last active admin key, so administration is never locked out."""
    if not principal.is_admin and key_id != principal.key_id:
        raise Forbidden(
            f"API key {principal.key_id} has scope {principal.scope}: it may revoke only itself; revoking another "
            "key needs scope admin"
        )
    row = keys.revoke_id(key_id=key_id)
    log.info("API key %s (%s) revoked by key %s", key_id, row["name"], principal.key_id)
    return Response(status_code=204)

"""API keys over HTTP (admin scope): create, list, show, revoke; the last active admin key is kept."""

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from shared.core.migrate import migrate
from tests.integration.test_keys import JOB, TRAINCAST, call, new_key
from tests.support.services import fresh_database, server_urls
from tests.support.stack import Stack, at_once

SHOWN = {
    "id", "name", "scope", "rate_per_s", "max_unfinished_jobs", "max_points_per_job", "bench_seconds_per_day",
    "created_at", "last_used_at", "revoked_at",
}  # fmt: skip


def assert_problem(r: httpx.Response, status: int, *words: str) -> None:
    """A problem+json answer with this status whose detail says each word."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    for word in words:
        assert word in r.json()["detail"], r.json()["detail"]


def test_admin_creates_shows_lists_and_revokes_a_key(api_only: Stack) -> None:
    """201 with the metadata and the key once (not cached), which then works with its scope and limits; list and
    show never hold a secret or hash; DELETE is 204, again 204, and the key is 401 from then on."""
    admin = new_key("admin")
    name = f"http-{uuid.uuid4().hex[:6]}"
    limits = {"rate_per_s": 50.0, "max_unfinished_jobs": 3, "max_points_per_job": 40, "bench_seconds_per_day": 9.5}
    made = call(api_only, "POST", "/v1/keys", admin, json={"name": name, "scope": "submit", **limits})
    assert made.status_code == 201, made.text
    body = made.json()
    key, key_id = body.pop("key"), body["id"]
    assert set(body) == SHOWN and body["name"] == name and body["scope"] == "submit" and body["revoked_at"] is None
    assert {k: body[k] for k in limits} == limits
    assert made.headers["location"] == f"/v1/keys/{key_id}" and made.headers["cache-control"] == "no-store"
    assert key.startswith(f"tc_{key_id}_")
    assert call(api_only, "POST", "/v1/jobs", key, json=JOB).status_code == 202
    assert call(api_only, "GET", "/v1/keys", key).status_code == 403  # submit, not admin

    secret = key.split("_", 2)[2]
    listed = call(api_only, "GET", "/v1/keys", admin)
    assert listed.status_code == 200 and secret not in listed.text and "sha256" not in listed.text
    mine = [k for k in listed.json()["keys"] if k["id"] == key_id]
    assert mine and set(mine[0]) == SHOWN and mine[0]["last_used_at"] is not None
    shown = call(api_only, "GET", f"/v1/keys/{key_id}", admin)
    assert shown.status_code == 200 and shown.json() == mine[0] and secret not in shown.text

    for _ in range(2):  # revoking a revoked key changes nothing and says so the same way
        gone = call(api_only, "DELETE", f"/v1/keys/{key_id}", admin)
        assert gone.status_code == 204 and not gone.content
    assert_problem(call(api_only, "GET", "/v1/jobs", key), 401, "revoked")
    revoked_at = call(api_only, "GET", f"/v1/keys/{key_id}", admin).json()["revoked_at"]
    assert revoked_at is not None
    call(api_only, "DELETE", f"/v1/keys/{key_id}", admin)
    assert call(api_only, "GET", f"/v1/keys/{key_id}", admin).json()["revoked_at"] == revoked_at


def test_unknown_and_malformed_ids(api_only: Stack) -> None:
    """An id nobody has is 404 to show or revoke; one that is not 12 hex digits is 422."""
    admin = new_key("admin")
    for method in ("GET", "DELETE"):
        assert_problem(call(api_only, method, "/v1/keys/000000000000", admin), 404, "000000000000")
        assert_problem(call(api_only, method, "/v1/keys/not-a-key-id", admin), 422)


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/keys", {"name": "x", "scope": "read"}),
        ("GET", "/v1/keys", None),
        ("GET", "/v1/keys/000000000000", None),
        ("DELETE", "/v1/keys/000000000000", None),
    ],
)
def test_keys_need_the_admin_scope(api_only: Stack, method: str, path: str, body: dict[str, Any] | None) -> None:
    """Read and submit keys are 403 naming the admin scope; no key is 401; nothing is created."""
    for scope in ("read", "submit"):
        r = call(api_only, method, path, new_key(scope), json=body)
        assert_problem(r, 403, f"scope {scope}", "admin")
    assert call(api_only, method, path, None, json=body).status_code == 401


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"name": "x", "scope": "root"}, "scope"),
        ({"name": "", "scope": "read"}, "name"),
        ({"name": "tab\there", "scope": "read"}, "control characters"),
        ({"name": "x" * 101, "scope": "read"}, "name"),
        ({"name": "x", "scope": "read", "rate_per_s": 0}, "rate_per_s"),
        ({"name": "x", "scope": "read", "max_unfinished_jobs": 0}, "max_unfinished_jobs"),
        ({"name": "x", "scope": "read", "bench_seconds_per_day": -1}, "bench_seconds_per_day"),
        ({"name": "x", "scope": "read", "secret_sha256": "0" * 64}, "secret_sha256"),
        ({"scope": "read"}, "name"),
    ],
)
def test_bad_new_keys_are_422(api_only: Stack, body: dict[str, Any], words: str) -> None:
    """Each bad field is a 422 problem naming it; no key is made."""
    admin = new_key("admin")
    before = len(call(api_only, "GET", "/v1/keys", admin).json()["keys"])
    assert_problem(call(api_only, "POST", "/v1/keys", admin, json=body), 422, words)
    assert len(call(api_only, "GET", "/v1/keys", admin).json()["keys"]) == before


def test_a_lone_surrogate_in_a_name_is_422(api_only: Stack) -> None:
    """JSON can escape half a UTF-16 pair, which PostgreSQL cannot store: 422, not 500."""
    raw = b'{"name": "half \\ud800 pair", "scope": "read"}'
    r = call(api_only, "POST", "/v1/keys", new_key("admin"), content=raw, headers={"content-type": "application/json"})
    assert_problem(r, 422, "name")


@pytest.fixture
def own_keys_api(service_env: dict[str, str], tmp_path: Path) -> Iterator[tuple[Stack, str]]:
    """An API on a fresh database whose one admin key is returned (made by the CLI, as an operator would)."""
    with fresh_database(server_urls()[0]) as db_url:
        migrate(db_url)
        made = subprocess.run(
            [TRAINCAST, "keys", "create", "--name", "first-admin", "--scope", "admin", "--rate", "10000"],
            env={**os.environ, "DATABASE_URL": db_url},
            capture_output=True,
            text=True,
            check=True,
        )
        stack = Stack({**service_env, "DATABASE_URL": db_url}, tmp_path)
        stack.start("api")
        try:
            stack.wait_ready()
            yield stack, made.stdout.strip().splitlines()[-1]
        finally:
            stack.stop("api")


def active_admins(stack: Stack, key: str) -> list[str]:
    """Ids of the unrevoked admin keys, as an admin key lists them."""
    listed = call(stack, "GET", "/v1/keys", key).json()["keys"]
    return [k["id"] for k in listed if k["scope"] == "admin" and k["revoked_at"] is None]


def new_admin(stack: Stack, key: str) -> str:
    """A new admin key made over HTTP with `key`."""
    made = call(stack, "POST", "/v1/keys", key, json={"name": "next-admin", "scope": "admin", "rate_per_s": 1e4})
    assert made.status_code == 201, made.text
    return str(made.json()["key"])


def test_the_last_active_admin_key_is_kept(own_keys_api: tuple[Stack, str]) -> None:
    """The only admin key cannot revoke itself (409, naming the CLI); with a second one it can; two admins
    revoking each other at once never leave none; the CLI can still revoke the last one."""
    stack, first = own_keys_api
    first_id = first.split("_")[1]
    assert_problem(call(stack, "DELETE", f"/v1/keys/{first_id}", first), 409, "last active admin", "traincast keys")
    second = new_admin(stack, first)
    assert call(stack, "DELETE", f"/v1/keys/{first_id}", second).status_code == 204
    assert active_admins(stack, second) == [second.split("_")[1]]

    survivor = second
    for _ in range(4):
        other = new_admin(stack, survivor)
        pair = (survivor, other)

        def revoke(i: int, p: tuple[str, str] = pair) -> httpx.Response:
            """Key i of the pair revokes the other."""
            return call(stack, "DELETE", f"/v1/keys/{p[1 - i].split('_')[1]}", p[i])

        answers = [r.status_code for r in at_once(2, revoke)]
        # One revocation wins; the other finds its target the last admin (409) or its own key gone (401).
        assert sorted(answers) in ([204, 401], [204, 409]), answers
        survivor = pair[answers.index(204)]
        assert active_admins(stack, survivor) == [survivor.split("_")[1]]

    env = {**os.environ, "DATABASE_URL": stack.env["DATABASE_URL"]}
    revoked = subprocess.run([TRAINCAST, "keys", "revoke", survivor.split("_")[1]], env=env, capture_output=True)
    assert revoked.returncode == 0
    assert call(stack, "GET", "/v1/keys", survivor).status_code == 401


def test_any_key_may_revoke_itself_and_only_itself(api_only: Stack) -> None:
    """A read or submit key revokes itself at once (204, then 401), as README promises (it got 403)."""
    for scope in ("read", "submit"):
        key, other = new_key(scope), new_key(scope)
        key_id, other_id = key.split("_")[1], other.split("_")[1]
        assert_problem(call(api_only, "DELETE", f"/v1/keys/{other_id}", key), 403, f"scope {scope}", "admin")
        assert call(api_only, "DELETE", f"/v1/keys/{key_id}", key).status_code == 204
        assert_problem(call(api_only, "GET", "/v1/jobs", key), 401, "revoked")
        assert call(api_only, "GET", "/v1/jobs", other).status_code == 200

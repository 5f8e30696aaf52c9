"""API keys over HTTP: 401 and 403 by scope, ownership of jobs, idempotency keys and CNNs, the rate, the CLI."""

import hashlib
import os
import stat
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from cli.keys import ensure_local_admin
from shared import keys
from shared.core.db import transaction
from tests.integration.test_api_cnns import LAYERS
from tests.integration.test_reference_jobs import OWN_GPU
from tests.support.stack import ROOT, Stack, bearer

TRAINCAST = str(Path(sys.executable).parent / "traincast")
JOB = {"cnns": ["resnet18"], "machines": ["local"], "batch_sizes": [8], "epochs": 1, "dataset_size": 100}


def new_key(scope: str, rate: float | None = 10_000.0) -> str:
    """A fresh key of a scope (fast by default, so only the rate test meets the limit)."""
    _row, key = keys.create(name=f"test-{scope}-{uuid.uuid4().hex[:6]}", scope=scope, rate_per_s=rate)
    return key


def call(stack: Stack, method: str, path: str, key: str | None, **kwargs: Any) -> httpx.Response:
    """One request with exactly this key (or none): never the run's admin key."""
    headers = (bearer(key) if key else {}) | kwargs.pop("headers", {})
    with httpx.Client(timeout=30) as client:
        return client.request(method, f"{stack.url}{path}", headers=headers, **kwargs)


def register(stack: Stack, key: str, name: str) -> httpx.Response:
    """POST /v1/cnns of a JSON layer list with a key."""
    return call(stack, "POST", "/v1/cnns", key, data={"name": name}, files={"file": ("l.json", LAYERS)})


def test_missing_wrong_and_revoked_keys_are_401(api_only: Stack) -> None:
    """No key, a malformed one, a wrong secret, an unknown id and a revoked key: 401 problem+json with
    WWW-Authenticate; health, the page and the API's description stay open."""
    good = new_key("read")
    key_id = good.split("_")[1]
    revoked = new_key("admin")
    keys.revoke(ref=revoked.split("_")[1])
    wrong_secret = good[:-4] + ("AAAA" if not good.endswith("AAAA") else "BBBB")
    for key in (None, "nonsense", wrong_secret, f"tc_{'0' * 12}_{good.split('_', 2)[2]}", revoked):
        r = call(api_only, "GET", "/v1/jobs", key)
        assert r.status_code == 401, (key, r.text)
        assert r.headers["content-type"] == "application/problem+json"
        assert r.headers["www-authenticate"].startswith("Bearer")
    assert "revoked" in call(api_only, "GET", "/v1/cnns", revoked).json()["detail"]
    assert call(api_only, "GET", "/v1/jobs", good).status_code == 200
    for path in ("/healthz", "/readyz", "/", "/openapi.json", "/docs", "/static/app.js"):
        assert call(api_only, "GET", path, None).status_code == 200, path
    schemes = call(api_only, "GET", "/openapi.json", None).json()["components"]["securitySchemes"]
    assert [s["scheme"] for s in schemes.values()] == ["bearer"]
    # The secret is in no log line of the API.
    assert good.split("_", 2)[2] not in api_only.log("api") and key_id


@pytest.mark.parametrize(
    ("scope", "method", "path", "body", "allowed"),
    [
        ("read", "GET", "/v1/machines", None, 200),
        ("read", "GET", "/v1/agents", None, 200),
        ("read", "GET", "/v1/fleet", None, 200),
        ("read", "POST", "/v1/jobs", JOB, 403),
        ("submit", "POST", "/v1/jobs", JOB, 202),
        ("submit", "PUT", "/v1/fleet/g5.xlarge", {"held": 1}, 403),
        ("submit", "POST", "/v1/fleet/g5.xlarge/drain", None, 403),
        ("read", "POST", "/v1/machines", OWN_GPU | {"name": "keys-read-box", "provider": "lab"}, 403),
        ("submit", "POST", "/v1/machines", OWN_GPU | {"name": "keys-own-box", "provider": "lab"}, 201),  # its own
        ("admin", "PUT", "/v1/fleet/g5.xlarge", {"held": None}, 200),
        ("admin", "POST", "/v1/machines", OWN_GPU | {"name": "keys-box", "provider": "lab"}, 201),
    ],
)
def test_each_scope_boundary(
    api_only: Stack, scope: str, method: str, path: str, body: dict[str, Any] | None, allowed: int
) -> None:
    """read ⊂ submit ⊂ admin: a key outside the scope gets 403 problem+json naming both scopes."""
    r = call(api_only, method, path, new_key(scope), json=body)
    assert r.status_code == allowed, r.text
    if allowed == 403:
        assert r.headers["content-type"] == "application/problem+json"
        assert f"scope {scope}" in r.json()["detail"] and r.json()["needed_scope"] in ("submit", "admin")


def test_read_key_cannot_register_or_delete_cnns(api_only: Stack) -> None:
    """Registering and deleting CNNs need submit."""
    reader = new_key("read")
    assert register(api_only, reader, f"r-{uuid.uuid4().hex[:6]}").status_code == 403
    assert call(api_only, "DELETE", "/v1/cnns/whatever", reader).status_code == 403


def test_jobs_belong_to_their_key(api_only: Stack) -> None:
    """Key B neither sees, lists nor cancels key A's job (404, as for no job); admin does all three."""
    a, b, admin = new_key("submit"), new_key("submit"), new_key("admin")
    created = call(api_only, "POST", "/v1/jobs", a, json=JOB)
    assert created.status_code == 202, created.text
    job_id = created.json()["id"]
    assert call(api_only, "GET", f"/v1/jobs/{job_id}", a).status_code == 200
    assert call(api_only, "GET", f"/v1/jobs/{job_id}", b).status_code == 404
    assert job_id not in [j["id"] for j in call(api_only, "GET", "/v1/jobs", b).json()["jobs"]]
    assert call(api_only, "GET", "/v1/jobs", None, params={"cursor": job_id}).status_code == 401
    assert call(api_only, "GET", "/v1/jobs", b, params={"cursor": job_id}).status_code == 422
    assert call(api_only, "POST", f"/v1/jobs/{job_id}/cancel", b).status_code == 404
    assert [j["id"] for j in call(api_only, "GET", "/v1/jobs", a).json()["jobs"]] == [job_id]
    assert job_id in [j["id"] for j in call(api_only, "GET", "/v1/jobs", admin, params={"limit": 100}).json()["jobs"]]
    assert call(api_only, "GET", f"/v1/jobs/{job_id}", admin).status_code == 200
    canceled = call(api_only, "POST", f"/v1/jobs/{job_id}/cancel", admin)
    assert canceled.status_code == 200 and canceled.json()["status"] == "canceled"


def test_idempotency_keys_are_per_owner(api_only: Stack) -> None:
    """Two keys may use the same Idempotency-Key for different jobs; each key's retry returns its own job."""
    a, b = new_key("submit"), new_key("submit")
    same = {"Idempotency-Key": f"retry-{uuid.uuid4().hex[:6]}"}
    job_a = call(api_only, "POST", "/v1/jobs", a, json=JOB, headers=same)
    job_b = call(api_only, "POST", "/v1/jobs", b, json=JOB | {"epochs": 2}, headers=same)
    assert job_a.status_code == job_b.status_code == 202 and job_a.json()["id"] != job_b.json()["id"]
    again = call(api_only, "POST", "/v1/jobs", a, json=JOB, headers=same)
    assert again.json()["id"] == job_a.json()["id"]
    assert call(api_only, "POST", "/v1/jobs", a, json=JOB | {"epochs": 3}, headers=same).status_code == 409


def test_cnns_belong_to_their_key_and_only_the_owner_deletes(api_only: Stack) -> None:
    """A's CNN is invisible to B (list, describe, jobs), its name is taken for B, only A or admin deletes it,
    and not while an unfinished job names it."""
    a, b, admin = new_key("submit"), new_key("submit"), new_key("admin")
    name = f"owned-{uuid.uuid4().hex[:6]}"
    assert register(api_only, a, name).status_code == 201
    assert name in [c["name"] for c in call(api_only, "GET", "/v1/cnns", a).json()["cnns"]]
    listed_b = [c["name"] for c in call(api_only, "GET", "/v1/cnns", b).json()["cnns"]]
    assert name not in listed_b and "resnet18" in listed_b  # built-ins are everyone's
    assert call(api_only, "GET", f"/v1/cnns/{name}", b).status_code == 404
    assert call(api_only, "GET", f"/v1/cnns/{name}", admin).status_code == 200
    refused = call(api_only, "POST", "/v1/jobs", b, json=JOB | {"cnns": [name], "image_size": 32})
    assert refused.status_code == 422 and "unknown CNN" in refused.json()["detail"]
    assert register(api_only, b, name).status_code == 409
    assert call(api_only, "DELETE", f"/v1/cnns/{name}", b).status_code == 404
    assert call(api_only, "DELETE", "/v1/cnns/resnet18", admin).status_code == 409

    job = call(api_only, "POST", "/v1/jobs", a, json=JOB | {"cnns": [name], "image_size": 32})
    assert job.status_code == 202, job.text
    assert call(api_only, "DELETE", f"/v1/cnns/{name}", b).status_code == 404  # not 409: B learns of no job
    busy = call(api_only, "DELETE", f"/v1/cnns/{name}", a)
    assert busy.status_code == 409 and job.json()["id"] in busy.json()["detail"]
    assert call(api_only, "POST", f"/v1/jobs/{job.json()['id']}/cancel", a).status_code == 200
    deleted = call(api_only, "DELETE", f"/v1/cnns/{name}", a)
    assert deleted.status_code == 204 and not deleted.content
    assert call(api_only, "GET", f"/v1/cnns/{name}", a).status_code == 404

    other = f"owned-{uuid.uuid4().hex[:6]}"
    assert register(api_only, a, other).status_code == 201
    assert call(api_only, "DELETE", f"/v1/cnns/{other}", admin).status_code == 204


def test_over_the_rate_is_429_with_retry_after(api_only: Stack) -> None:
    """A key allowed one request per 100 s gets its first answered and the next refused, saying when to retry;
    another key is not affected."""
    slow = new_key("read", rate=0.01)
    assert call(api_only, "GET", "/v1/machines", slow).status_code == 200
    refused = call(api_only, "GET", "/v1/machines", slow)
    assert refused.status_code == 429 and refused.headers["content-type"] == "application/problem+json"
    assert 1 <= int(refused.headers["retry-after"]) <= 100
    assert call(api_only, "GET", "/v1/machines", new_key("read")).status_code == 200


def cli(*args: str, key: str | None = None, url: str = "http://127.0.0.1:9") -> subprocess.CompletedProcess[str]:
    """The installed traincast command, with TRAINCAST_API_KEY set to `key` (or unset)."""
    env = {k: v for k, v in os.environ.items() if k != "TRAINCAST_API_KEY"} | {"TRAINCAST_API_URL": url}
    if key:
        env["TRAINCAST_API_KEY"] = key
    return subprocess.run([TRAINCAST, *args], env=env, capture_output=True, text=True, timeout=120, cwd=ROOT.parent)


def test_cli_creates_lists_and_revokes_keys(api_only: Stack) -> None:
    """`keys create` ends with the key, which works as a bearer; `keys list` shows no secret; after
    `keys revoke` the CLI's one-line error names the key it sent."""
    name = f"cli-{uuid.uuid4().hex[:6]}"
    created = cli("keys", "create", "--name", name, "--scope", "submit", "--rate", "50")
    assert created.returncode == 0, created.stderr
    key = created.stdout.splitlines()[-1]
    assert created.stdout.endswith(key + "\n")
    assert call(api_only, "GET", "/v1/jobs", key).status_code == 200
    assert cli("jobs", key=key, url=api_only.url).returncode == 0
    listed = cli("keys", "list")
    assert listed.returncode == 0 and name in listed.stdout and key.split("_", 2)[2] not in listed.stdout

    forbidden = cli("fleet", "scale", "g5.xlarge", "1", key=key, url=api_only.url)
    assert forbidden.returncode == 1 and forbidden.stderr.count("\n") == 1
    assert "Forbidden" in forbidden.stderr and "TRAINCAST_API_KEY" in forbidden.stderr

    assert cli("keys", "revoke", name).returncode == 0
    refused = cli("jobs", key=key, url=api_only.url)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1
    assert f"key {key.split('_')[1]} from TRAINCAST_API_KEY" in refused.stderr and key not in refused.stderr
    assert cli("keys", "revoke", "no-such-key").returncode == 1
    assert cli("keys", "create", "--name", "x", "--scope", "root").returncode == 2  # argparse: not a scope


def test_the_secret_is_never_stored_in_clear() -> None:
    """Only the SHA-256 of the secret is in the table; no column of any row holds the secret."""
    row, key = keys.create(name="hash-check", scope="read")
    secret = key.split("_", 2)[2]
    with transaction() as cur:
        cur.execute("SELECT t::text AS dump FROM api_keys t")
        dumped = "\n".join(r["dump"] for r in cur.fetchall())
        cur.execute("SELECT secret_sha256 FROM api_keys WHERE id = %s", (row["id"],))
        stored_row = cur.fetchone()
    assert stored_row is not None
    stored = stored_row["secret_sha256"]
    assert secret not in dumped and key not in dumped and "secret_sha256" not in row
    assert stored == hashlib.sha256(secret.encode()).hexdigest()


def test_local_admin_key_file_is_0600_and_reused(tmp_path: Path) -> None:
    """What `make up` runs: a 0600 file with a working admin key, kept across runs, replaced once revoked."""
    path = tmp_path / ".run" / "admin.key"
    made = subprocess.run([sys.executable, "-m", "cli.keys", str(path)], cwd=ROOT, capture_output=True, text=True)
    assert made.returncode == 0 and "created" in made.stdout, made.stderr
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    first = path.read_text().strip()
    assert keys.authenticate(token=first).is_admin
    # the operator's own key cannot lock itself out by a day of benchmark work
    assert keys.authenticate(token=first).bench_seconds_per_day == keys.MAX_BENCH_SECONDS_PER_DAY
    assert ensure_local_admin(path) is False and path.read_text().strip() == first
    keys.revoke(ref=first.split("_")[1])
    assert ensure_local_admin(path) is True
    assert path.read_text().strip() != first and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "cli.keys" in (ROOT / "scripts" / "up.sh").read_text()

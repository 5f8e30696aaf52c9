"""deploy/k8s/create-secrets.sh and apply.sh run against a stand-in kubectl (tests/support/fake_kubectl.py)."""

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from shared.core import logins, redis_acl
from tests.support.k8skit import K8S, containers, load

SUPPORT = Path(__file__).resolve().parents[1] / "support"
OBJECTS = load()
PASSWORDS = ["POSTGRES_PASSWORD", "REDIS_PASSWORD"]
PASSWORDS += [f"{kind.upper()}_DB_PASSWORD" for kind in logins.GROUPS] + list(redis_acl.PASSWORD_VARIABLES.values())


@pytest.fixture
def kubectl(tmp_path: Path) -> dict[str, str]:
    """An environment whose `kubectl` is the stand-in, logging to tmp_path/kubectl.log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "kubectl").write_text(f'#!/bin/sh\nexec {sys.executable} {SUPPORT / "fake_kubectl.py"} "$@"\n')
    (bin_dir / "kubectl").chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_KUBECTL_LOG": str(tmp_path / "kubectl.log")}


@pytest.fixture
def operator_env(tmp_path: Path, kubectl: dict[str, str]) -> dict[str, str]:
    """What an operator sets for create-secrets.sh: hosts, a distinct password per variable, CA files."""
    for name in ("db-ca.pem", "redis-ca.pem"):
        (tmp_path / name).write_text(f"-----BEGIN CERTIFICATE-----\n{name}\n-----END CERTIFICATE-----\n")
    env = {v: f"{v.lower().replace('_', '-')}-0123456789abcdef" for v in PASSWORDS}
    return (
        kubectl
        | env
        | {
            "POSTGRES_HOST": "db.example.rds.amazonaws.com",
            "REDIS_HOST": "master.cache.example.amazonaws.com",
            "DATABASE_CA_FILE": str(tmp_path / "db-ca.pem"),
            "REDIS_CA_FILE": str(tmp_path / "redis-ca.pem"),
        }
    )


def run(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run a deploy/k8s script with only this environment (and HOME)."""
    return subprocess.run(
        ["bash", str(K8S / script)],
        env=env | {"HOME": os.environ.get("HOME", "/")},
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def calls(env: dict[str, str]) -> list[dict[str, Any]]:
    """The stand-in's log."""
    path = Path(env["FAKE_KUBECTL_LOG"])
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def applied(env: dict[str, str]) -> dict[tuple[str, str], dict[str, str]]:
    """(kind, name) → data of every object applied from standard input, Secrets decoded."""
    out = {}
    for call in calls(env):
        for obj in call.get("objects", []):
            data = obj.get("data") or {}
            if obj["kind"] == "Secret":
                data = {k: base64.b64decode(v).decode() for k, v in data.items()}
            out[(obj["kind"], obj["metadata"]["name"])] = data
    return out


def test_secrets_give_each_process_kind_its_own_login_and_user(operator_env: dict[str, str]) -> None:
    """Every key the manifests read exists; each kind's URLs name its login and Redis user, with TLS verified."""
    result = run("create-secrets.sh", operator_env)
    assert result.returncode == 0, result.stderr
    made = applied(operator_env)
    for c in containers(OBJECTS):
        for e in c.spec.get("env") or []:
            ref = (e.get("valueFrom") or {}).get("secretKeyRef")
            if ref:
                assert ref["key"] in made.get(("Secret", ref["name"]), {}), f"{c.name}: {ref} is not made"
    users = {kind: (logins.LOGINS[kind], redis_acl.USERS[kind]) for kind in logins.GROUPS} | {
        "owner": ("postgres", "default")
    }
    for kind, (login, user) in users.items():
        secret = made[("Secret", f"traincast-{kind}")]
        db, redis = urlsplit(secret["DATABASE_URL"]), urlsplit(secret["REDIS_URL"])
        db_var, redis_var = (
            ("POSTGRES_PASSWORD", "REDIS_PASSWORD")
            if kind == "owner"
            else (f"{kind.upper()}_DB_PASSWORD", redis_acl.PASSWORD_VARIABLES[kind])
        )
        assert (db.username, db.password, db.hostname) == (login, operator_env[db_var], operator_env["POSTGRES_HOST"])
        assert parse_qs(db.query)["sslmode"] == ["verify-full"]
        assert (redis.scheme, redis.username, redis.password) == ("rediss", user, operator_env[redis_var])
        assert parse_qs(redis.query)["ssl_cert_reqs"] == ["required"]
    assert made[("Secret", "traincast-logins")] == {
        f"{k.upper()}_DB_PASSWORD": operator_env[f"{k.upper()}_DB_PASSWORD"] for k in logins.GROUPS
    }
    ca = made[("ConfigMap", "traincast-ca")]
    for c in containers(OBJECTS):
        for variable in ("DATABASE_CA_FILE", "REDIS_CA_FILE"):
            key = Path(c.literal_env()[variable]).name
            assert ca[key] == Path(operator_env[variable]).read_text(), f"{c.name}: {variable} is not the CA given"
    # Passwords travel on standard input only: no command line (ps) shows one.
    assert not [a for call in calls(operator_env) for a in call["argv"] for v in PASSWORDS if operator_env[v] in a]


@pytest.mark.parametrize("variable", ["REDIS_AGENT_PASSWORD", "POSTGRES_HOST", "REDIS_CA_FILE"])
def test_secrets_refuse_a_missing_variable(operator_env: dict[str, str], variable: str) -> None:
    """Leaving out a password, a host or a CA stops the script before it touches the cluster, naming it."""
    result = run("create-secrets.sh", {k: v for k, v in operator_env.items() if k != variable})
    assert result.returncode == 2 and variable in result.stderr
    assert calls(operator_env) == []


def test_secrets_refuse_a_password_unsafe_in_urls(operator_env: dict[str, str]) -> None:
    """A password with @ or / would change the URL it goes into."""
    result = run("create-secrets.sh", operator_env | {"API_DB_PASSWORD": "abc@def/0123456789abcdef"})
    assert result.returncode == 2 and "API_DB_PASSWORD" in result.stderr and calls(operator_env) == []


def applies(env: dict[str, str]) -> list[list[str]]:
    """The `apply -k` calls, in order."""
    return [c["argv"] for c in calls(env) if c["argv"][:2] == ["apply", "-k"]]


def test_apply_runs_migrations_before_the_apps(kubectl: dict[str, str]) -> None:
    """The finished Job goes, the setup stage is applied, and the apps only once the Job completed."""
    result = run("apply.sh", kubectl | {"FAKE_KUBECTL_JOB_CONDITIONS": "Complete "})
    assert result.returncode == 0, result.stderr
    verbs = [c["argv"][0] for c in calls(kubectl)]
    assert verbs == ["delete", "apply", "get", "apply"]
    assert applies(kubectl) == [["apply", "-k", str(K8S), "-l", "traincast.dev/stage=setup"], ["apply", "-k", str(K8S)]]
    # The setup stage holds the Job and everything it needs that the manifests make.
    setup = {
        (o["kind"], o["metadata"]["name"])
        for o in OBJECTS
        if o["metadata"].get("labels", {}).get("traincast.dev/stage") == "setup"
    }
    job = next(o for o in OBJECTS if o["kind"] == "Job")
    assert {("Job", job["metadata"]["name"]), ("Namespace", "traincast")} <= setup
    assert ("ServiceAccount", job["spec"]["template"]["spec"]["serviceAccountName"]) in setup


@pytest.mark.parametrize(("conditions", "timeout"), [("Failed ", "900"), ("", "0")])
def test_apply_leaves_the_apps_when_migrations_fail(kubectl: dict[str, str], conditions: str, timeout: str) -> None:
    """A failed (or overdue) Job stops the upgrade with its logs; the apps keep running the old version."""
    env = kubectl | {"FAKE_KUBECTL_JOB_CONDITIONS": conditions, "MIGRATE_TIMEOUT_S": timeout}
    result = run("apply.sh", env)
    assert result.returncode == 1 and "migrate Job" in result.stderr
    assert applies(env) == [["apply", "-k", str(K8S), "-l", "traincast.dev/stage=setup"]]
    assert any(c["argv"][0] == "logs" for c in calls(env))

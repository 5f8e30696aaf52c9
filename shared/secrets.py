"""Secrets from AWS SSM Parameter Store into the environment, and URLs with their password hidden.

A machine started by the fleet gets only TRAINCAST_SSM_PATH in its user data (a path, not a
secret); its instance profile may read that path. Call load_from_environment() before anything
reads settings: get_settings() reads os.environ once per process.
"""

import logging
import os
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

log = logging.getLogger(__name__)

# Set it to e.g. /traincast/prod/agent/ to load the parameters under that path.
SSM_PATH_VAR = "TRAINCAST_SSM_PATH"
# At DEBUG, botocore logs every response body: here, the decrypted values.
BOTOCORE_BODY_LOGGER = "botocore.parsers"
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")


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
        if name in os.environ:
            # An explicit environment variable wins: an operator can override one secret on one host.
            log.info("%s is set in the environment; SSM parameter %s not used", name, parameter["Name"])
            continue
        os.environ[name] = parameter["Value"]
        loaded.append(name)
    if loaded:
        # Settings read before this (there should be none) would miss what was loaded.
        from shared.settings import get_settings

        get_settings.cache_clear()
    return sorted(loaded)


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

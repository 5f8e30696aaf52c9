"""Logging for every process: JSON lines (or readable text on a terminal) that carry the job they serve.

Each entry point calls setup(kind) once. Fields bound with context() or bind() — job_id, machine_type,
signature, request_id, … — live in a contextvar, so every line logged inside a request or a task carries
them without passing them down each call; `extra={...}` adds fields to one line. URLs with a password are
redacted in every line.
"""

import json
import logging
import re
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

_fields: ContextVar[dict[str, Any] | None] = ContextVar("traincast_log_fields", default=None)
_kind = "python"
# Attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}
# scheme://user:password@host → scheme://user:***@host (user may be empty: redis://:password@host).
_PASSWORD_IN_URL = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*:)[^@\s/]+@")
# Loggers that configure handlers of their own; their lines go through ours instead.
_OWN_HANDLERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "celery", "celery.task", "celery.redirected")


def redact(text: str) -> str:
    """The text with the password of every URL in it replaced by ***."""
    return _PASSWORD_IN_URL.sub(r"\1***@", text)


def current() -> dict[str, Any]:
    """The fields bound in this context."""
    return dict(_fields.get() or {})


@contextmanager
def context(**fields: Any) -> Iterator[dict[str, Any]]:
    """Bind fields to every line logged inside the block (a request, a task, one job of a loop)."""
    merged = {**(_fields.get() or {}), **{k: v for k, v in fields.items() if v is not None}}
    token = _fields.set(merged)
    try:
        yield merged
    finally:
        _fields.reset(token)


def bind(**fields: Any) -> None:
    """Add fields to the innermost context() in place: its opener (a request's middleware) sees them too."""
    scope = _fields.get()
    if scope is None:
        _fields.set({k: v for k, v in fields.items() if v is not None})
        return
    scope.update({k: v for k, v in fields.items() if v is not None})


def _record_fields(record: logging.LogRecord) -> dict[str, Any]:
    extra = {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}
    return {**(_fields.get() or {}), **extra}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, message, process kind, pid, then the bound fields."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as a JSON line, passwords in URLs redacted."""
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": _kind,
            "pid": record.process,
            **_record_fields(record),
        }
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return redact(json.dumps(line, default=str))


class TextFormatter(logging.Formatter):
    """`time LEVEL logger [key=value …]: message` for a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one readable line (plus a traceback), passwords in URLs redacted."""
        fields = _record_fields(record)
        bound = " [" + " ".join(f"{k}={v}" for k, v in fields.items()) + "]" if fields else ""
        line = f"{self.formatTime(record)} {record.levelname} {record.name}{bound}: {record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return redact(line)


def use_json(setting: str, stream: Any = None) -> bool:
    """JSON unless LOG_FORMAT says text, or it is auto and the stream (stderr) is a terminal."""
    if setting in ("json", "text"):
        return setting == "json"
    if setting not in ("", "auto"):
        raise ValueError(f"LOG_FORMAT={setting!r}: use auto, json or text")
    isatty = getattr(stream or sys.stderr, "isatty", None)
    return not (isatty and isatty())


def setup(kind: str, *, level: str | None = None, file: str = "", **_: Any) -> None:
    """Send every logger's lines to stderr (and `file`) in this process's format; safe to call again.

    Extra keyword arguments are ignored, so it can receive Celery's setup_logging signal directly.
    """
    global _kind
    from shared.core.settings import get_settings

    settings = get_settings()
    _kind = kind
    formatter = JsonFormatter() if use_json(settings.log_format.lower()) else TextFormatter()
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if file:
        handlers.append(logging.FileHandler(file))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    for handler in handlers:
        handler.setFormatter(formatter if handler is handlers[0] else JsonFormatter())
        root.addHandler(handler)
    root.setLevel((level or settings.log_level).upper())
    for name in _OWN_HANDLERS:
        logger = logging.getLogger(name)
        logger.handlers = []
        logger.propagate = True
    # The API logs each request itself (api/observe.py), with its route, status, request id and job id.
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)


def fields_of_kwargs(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Log fields a task's keyword arguments name: job_id, machine_type, and the job ids its items carry."""
    out = {k: kwargs[k] for k in ("job_id", "machine_type", "cnn") if isinstance(kwargs.get(k), str)}
    ids = sorted({str(j) for item in kwargs.get("items") or [] for j in (item.get("job_ids") or [])})
    if len(ids) == 1:
        out["job_id"] = ids[0]
    elif ids:
        out["job_ids"] = ids
    return out


def connect_celery(kind: str, *, file: str = "") -> None:
    """In a Celery process: our setup instead of Celery's, and each task's name, id and job fields on its lines."""
    from celery import signals

    signals.setup_logging.connect(lambda **_: setup(kind, file=file), weak=False)
    tokens: dict[str, Any] = {}

    def prerun(task_id: str = "", task: Any = None, kwargs: Mapping[str, Any] | None = None, **_: Any) -> None:
        fields = {"task": getattr(task, "name", None), "task_id": task_id, **fields_of_kwargs(kwargs or {})}
        tokens[task_id] = _fields.set({k: v for k, v in fields.items() if v is not None})

    def postrun(task_id: str = "", **_: Any) -> None:
        token = tokens.pop(task_id, None)
        if token is not None:
            _fields.reset(token)

    signals.task_prerun.connect(prerun, weak=False)
    signals.task_postrun.connect(postrun, weak=False)

"""shared/core/logs.py in-process: the two formats, fields bound by context, redacted URLs, task kwargs' fields."""

import io
import json
import logging
from collections.abc import Iterator

import pytest

from shared.core import logs
from shared.core.settings import get_settings


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    """The root logger writing JSON lines into a buffer (as setup() does to stderr)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.JsonFormatter())
    root = logging.getLogger()
    root.addHandler(handler)
    old = root.level
    root.setLevel(logging.INFO)
    yield stream
    root.removeHandler(handler)
    root.setLevel(old)


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    """The JSON objects written so far."""
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_fields_follow_the_context_and_leave_with_it(captured: io.StringIO) -> None:
    """Lines inside context() carry its fields; bind() adds to it; after the block they are gone."""
    log = logging.getLogger("tests.logs")
    with logs.context(job_id="j1", machine_type="local") as scope:
        log.info("inside")
        logs.bind(signature=7)
        log.info("bound", extra={"route": "/v1/jobs/{job_id}"})
    log.info("outside")
    inside, bound, outside = lines(captured)
    assert inside["job_id"] == "j1" and inside["machine_type"] == "local" and inside["message"] == "inside"
    assert bound["signature"] == 7 and bound["route"] == "/v1/jobs/{job_id}" and scope["signature"] == 7
    assert "job_id" not in outside and {"ts", "level", "logger", "pid", "process"} <= set(outside)


def test_passwords_in_urls_are_redacted(captured: io.StringIO) -> None:
    """A URL's password never reaches a line, in the message or in a traceback; the rest of the URL does."""
    log = logging.getLogger("tests.logs")
    log.warning("connecting to %s", "postgresql://traincast_api_login:s3cret-pw@db:5432/traincast")
    try:
        raise ConnectionError("redis://:an0ther@redis:6379/0 refused")
    except ConnectionError:
        log.exception("broker down")
    text = captured.getvalue()
    assert "s3cret-pw" not in text and "an0ther" not in text
    assert "postgresql://traincast_api_login:***@db:5432/traincast" in text and "redis://:***@redis" in text


def test_format_follows_the_setting_and_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """auto: text on a terminal, JSON otherwise; json and text force either; anything else is refused."""

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert logs.use_json("auto", io.StringIO()) and not logs.use_json("auto", Tty())
    assert logs.use_json("json", Tty()) and not logs.use_json("text", io.StringIO())
    with pytest.raises(ValueError, match="LOG_FORMAT"):
        logs.use_json("yaml")
    monkeypatch.setenv("LOG_FORMAT", "text")
    get_settings.cache_clear()
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        logs.setup("tests")
        [handler] = root.handlers
        record = logging.LogRecord("x", logging.INFO, __file__, 1, "hello", None, None)
        with logs.context(job_id="j2"):
            line = handler.format(record)
        assert line.endswith("INFO x [job_id=j2]: hello")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        monkeypatch.delenv("LOG_FORMAT")
        get_settings.cache_clear()


def test_task_kwargs_name_their_jobs() -> None:
    """A layer task's items carry the jobs that sent them: one job is job_id, several job_ids; old tasks none."""
    one = {"machine_type": "local", "items": [{"signature_id": 1, "job_ids": ["a"]}, {"signature_id": 2}]}
    assert logs.fields_of_kwargs(one) == {"machine_type": "local", "job_id": "a"}
    two = {"machine_type": "local", "items": [{"job_ids": ["b"]}, {"job_ids": ["a", "b"]}]}
    assert logs.fields_of_kwargs(two)["job_ids"] == ["a", "b"]
    assert logs.fields_of_kwargs({"machine_type": "local", "items": [{"signature_id": 3}]}) == {"machine_type": "local"}

"""A request is validated once, at the door: the worker loads a stored one under whatever limits hold now."""

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import ValidationError

from shared import jobs
from shared.core import tasks
from shared.core.settings import get_settings
from shared.jobs.request import JobRequest, points_limit
from tests.support.stack import Stack
from tests.support.wait import wait_until

# Accepted under the default limits (MAX_BATCH_SIZE 4096, MAX_BATCH_SIZES 1000).
BODY: dict[str, Any] = {"cnns": ["resnet18"], "machines": ["local"], "batch_sizes": [2048, 8, 8], "image_size": 64}
LOWERED = {"MAX_BATCH_SIZE": "64", "MAX_BATCH_SIZES": "2"}


@pytest.fixture
def lowered_limits(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process's settings with the batch-size limits lowered below what BODY asks."""
    for name, value in LOWERED.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    yield
    monkeypatch.undo()
    get_settings.cache_clear()


def test_stored_request_loads_under_lowered_limits(lowered_limits: None) -> None:
    """A request stored under higher limits fails the door's validation now, but loads as stored."""
    with pytest.raises(ValidationError, match="between 1 and 64"):
        JobRequest.model_validate({**BODY, "batch_sizes": [8, 2048]})
    request = JobRequest.stored({**BODY, "batch_sizes": [8, 2048]})
    assert request.batch_size_list() == [8, 2048] and request.points() == 2


def test_stored_range_is_spelt_out_whole(lowered_limits: None) -> None:
    """A stored range longer than today's MAX_BATCH_SIZES keeps all its sizes (the door capped it when it was sent)."""
    request = JobRequest.stored({**BODY, "batch_sizes": {"min": 8, "max": 32, "step": 8}})
    assert request.batch_size_list() == [8, 16, 24, 32]


def test_stored_request_ignores_the_points_limit() -> None:
    """The points limit of the door is not applied to a stored request, even if one is set in the context."""
    body = {**BODY, "machines": [f"m{i}" for i in range(3)]}
    token = points_limit.set(2)
    try:
        with pytest.raises(ValidationError, match="at most 2 are allowed per job"):
            JobRequest.model_validate(body)
        assert JobRequest.stored(body).points() == 6
    finally:
        points_limit.reset(token)


def test_batch_sizes_are_worked_out_once() -> None:
    """The validated request carries its sorted sizes; asking again returns the same list, not a new one."""
    request = JobRequest.model_validate({**BODY, "batch_sizes": {"min": 4, "max": 12, "step": 4}})
    first = request.batch_size_list()
    assert first == [4, 8, 12] and request.batch_size_list() is first
    assert JobRequest.model_validate({**BODY}).batch_size_list() == [8, 2048]


@pytest.fixture(scope="module")
def lowered_worker(service_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The API and a worker whose batch-size limits were lowered after jobs were accepted."""
    stack = Stack({**service_env, **LOWERED}, tmp_path_factory.mktemp("lowered"))
    stack.start("worker")
    stack.start("api")
    stack.wait_ready()
    yield stack
    stack.stop_all()


def planned(job_id: Any, stack: Stack) -> dict[str, Any]:
    """The job once the worker has taken it out of `queued`."""
    return wait_until(lambda: (j := jobs.get(job_id=job_id))["status"] != "queued" and j, 120, "planning",
                      interval=0.2, log=lambda: stack.log("worker"))  # fmt: skip


def test_queued_job_plans_after_the_limit_is_lowered(lowered_worker: Stack) -> None:
    """A job stored under MAX_BATCH_SIZE 4096 is planned by a worker running under 64, not failed."""
    get_settings.cache_clear()
    request = JobRequest.model_validate(BODY)  # this process: the default limits, as the API had them
    job, created = jobs.create(request=request)
    assert created and job["request"]["batch_sizes"] == [8, 2048]
    tasks.send(tasks.PLAN_JOB, args=[str(job["id"])])
    current = planned(job["id"], lowered_worker)
    try:
        seen = (current["status"], current["error"], lowered_worker.log("worker")[-2000:])
        assert current["status"] == "running", seen
        assert current["plan"]["cnns"]["resnet18"] and current["progress"]
    finally:
        jobs.cancel(job_id=uuid.UUID(str(job["id"])))


def test_size_the_door_did_not_know_fails_the_job_with_the_reason(lowered_worker: Stack) -> None:
    """A CNN that cannot run at the size, stored without the door's check, fails at planning within seconds."""
    request = JobRequest.model_validate({**BODY, "cnns": ["vit_b_16"], "image_size": 256})
    job, _created = jobs.create(request=request)
    tasks.send(tasks.PLAN_JOB, args=[str(job["id"])])
    current = planned(job["id"], lowered_worker)
    assert current["status"] == "failed", (current["status"], lowered_worker.log("worker")[-2000:])
    assert current["error"].startswith("vit_b_16 cannot run on 256x256 images")
    assert current["finished_at"] is not None

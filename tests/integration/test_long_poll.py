"""Long polls: GET /v1/jobs/{id}?wait=S is answered when the job ends, woken by PostgreSQL's job_finished channel."""

import asyncio
import threading
import time
from typing import Any

import httpx

from api import waits
from shared import jobs
from shared.jobs.request import JobRequest
from tests.support.stack import Stack, http

JOB: dict[str, Any] = {"cnns": ["resnet18"], "machines": ["local"], "batch_sizes": [8], "image_size": 64}


def test_a_finished_job_wakes_its_waiter() -> None:
    """A waiter registered before a job ends is woken by the notification, not by a periodic re-read."""
    row, _ = jobs.create(request=JobRequest.model_validate(JOB))

    async def wait_for_end() -> list[bool]:
        async with waits.finished(str(row["id"])) as finished:
            assert await asyncio.to_thread(waits.listening.wait, 60), "the listener never LISTENed"
            assert waits.waiting() >= 1
            await asyncio.to_thread(jobs.cancel, job_id=row["id"])
            deadline = time.monotonic() + 20
            wakes = [await finished.until(deadline)]
            while not wakes[-1] and time.monotonic() < deadline:  # timeouts of RECHECK_S each, until woken
                wakes.append(await finished.until(deadline))
            return wakes

    try:
        wakes = asyncio.run(wait_for_end())
    finally:
        waits.stop()
    assert wakes[-1] is True
    assert waits.waiting() == 0  # the registration is gone with the request
    assert not waits.listening.is_set()  # stopped: its connection closed with it


def test_a_waiting_get_answers_with_the_end(api_only: Stack) -> None:
    """A GET held with ?wait answers with the canceled job once another request cancels it."""
    job_id = http.post(f"{api_only.url}/v1/jobs", json=JOB).json()["id"]
    answers: list[httpx.Response] = []
    waiting = threading.Thread(
        target=lambda: answers.append(http.get(f"{api_only.url}/v1/jobs/{job_id}", params={"wait": 30}, timeout=60))
    )
    waiting.start()
    assert http.post(f"{api_only.url}/v1/jobs/{job_id}/cancel").status_code == 200
    waiting.join(90)
    assert answers and answers[0].status_code == 200
    assert answers[0].json()["status"] == "canceled" and "retry-after" not in answers[0].headers


def test_a_wait_that_runs_out_answers_the_open_job(api_only: Stack) -> None:
    """Past its wait an unfinished job is answered as it is, with Retry-After; a wait over the bound is a 422."""
    job_id = http.post(f"{api_only.url}/v1/jobs", json=JOB).json()["id"]
    held = http.get(f"{api_only.url}/v1/jobs/{job_id}", params={"wait": 0.5})
    assert held.status_code == 200 and held.json()["status"] == "queued" and held.headers["retry-after"] == "2"
    too_long = http.get(f"{api_only.url}/v1/jobs/{job_id}", params={"wait": waits.MAX_WAIT_S + 1})
    assert too_long.status_code == 422 and too_long.headers["content-type"] == "application/problem+json"
    assert "wait" in too_long.text

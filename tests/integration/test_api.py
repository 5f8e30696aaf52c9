"""The HTTP contract: problem+json for bad input (with nothing changed), jobs, idempotency, paging."""

from typing import Any

import pytest

from shared.core.db import one, transaction
from tests.support.stack import Stack, broker, http

GOOD: dict[str, Any] = {"cnns": ["resnet18"], "machines": ["local"], "batch_sizes": [8, 16], "image_size": 64}


def job_count() -> int:
    """Rows in the jobs table."""
    with transaction() as cur:
        cur.execute("SELECT count(*) AS n FROM jobs")
        return int(one(cur)["n"])


BAD_BODIES = [
    ({**GOOD, "cnns": ["resnet18", "not_a_cnn"]}, "not_a_cnn"),
    ({**GOOD, "machines": ["p9.mega"]}, "p9.mega"),
    ({**GOOD, "batch_sizes": [0, 8]}, "between 1 and 4096"),
    ({**GOOD, "batch_sizes": [8, 5000]}, "between 1 and 4096"),
    ({**GOOD, "batch_sizes": {"min": 1, "max": 2000, "step": 1}}, "at most 1000"),
    ({**GOOD, "batch_sizes": {"min": 0, "max": 10}}, "batch_sizes"),
    ({**GOOD, "batch_sizes": {"min": 20, "max": 10}}, "below min"),
    ({**GOOD, "batch_sizes": []}, "empty"),
    ({**GOOD, "epochs": 0}, "epochs"),
    ({**GOOD, "dataset_size": 0}, "dataset_size"),
    ({**GOOD, "optimizer": "lion"}, "optimizer"),
    ({**GOOD, "cnns": ["inception_v3"], "image_size": 64}, "cannot run on 64x64"),
    ({**GOOD, "surprise": 1}, "surprise"),
    ({"machines": ["local"], "batch_sizes": [8]}, "cnns"),
]


@pytest.mark.parametrize(("body", "words"), BAD_BODIES)
def test_bad_job_is_a_problem_and_changes_nothing(api_only: Stack, body: dict[str, Any], words: str) -> None:
    """Each bad request gets a 4xx problem+json naming what is wrong; no job, no message."""
    before, queued = job_count(), broker().llen("jobs")
    r = http.post(f"{api_only.url}/v1/jobs", json=body)
    assert 400 <= r.status_code < 500, r.text
    assert r.headers["content-type"] == "application/problem+json"
    problem = r.json()
    assert problem["status"] == r.status_code and problem["title"]
    assert words in problem["detail"]
    assert job_count() == before and broker().llen("jobs") == queued


def test_malformed_json(api_only: Stack) -> None:
    """Broken JSON is a 422 problem saying so."""
    r = http.post(f"{api_only.url}/v1/jobs", content=b'{"cnns": [', headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json"
    assert "malformed JSON" in r.json()["detail"]


def test_unknown_and_invalid_job_ids(api_only: Stack) -> None:
    """A missing job is 404, a non-UUID id is 422, both problem+json."""
    missing = http.get(f"{api_only.url}/v1/jobs/00000000-0000-0000-0000-000000000000")
    assert missing.status_code == 404 and missing.headers["content-type"] == "application/problem+json"
    bad = http.get(f"{api_only.url}/v1/jobs/nope")
    assert bad.status_code == 422 and bad.headers["content-type"] == "application/problem+json"
    route = http.get(f"{api_only.url}/v1/nothing-here")
    assert route.status_code == 404 and route.headers["content-type"] == "application/problem+json"


def test_submit_poll_cancel(api_only: Stack, clean_db: None) -> None:
    """A job is accepted with Location, polled with Retry-After, cancelled once, then 409."""
    r = http.post(f"{api_only.url}/v1/jobs", json=GOOD)
    assert r.status_code == 202
    job = r.json()
    assert r.headers["location"] == f"/v1/jobs/{job['id']}" and job["status"] == "queued"
    assert "worker.plan_job" in broker().lrange("jobs", 0, -1)[-1].decode()  # type: ignore[union-attr]  # bytes: no decode_responses
    polled = http.get(f"{api_only.url}{r.headers['location']}")
    assert polled.status_code == 200 and polled.headers["retry-after"] == "2"
    assert polled.json()["request"]["batch_sizes"] == [8, 16]
    cancelled = http.post(f"{api_only.url}/v1/jobs/{job['id']}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "canceled"
    again = http.post(f"{api_only.url}/v1/jobs/{job['id']}/cancel")
    assert again.status_code == 409 and "canceled" in again.json()["detail"]
    assert "retry-after" not in http.get(f"{api_only.url}/v1/jobs/{job['id']}").headers


def test_idempotency_key(api_only: Stack) -> None:
    """The same key and body return the same job; the same key with another body is a 409."""
    headers = {"Idempotency-Key": "test-key-1"}
    first = http.post(f"{api_only.url}/v1/jobs", json=GOOD, headers=headers)
    count = job_count()
    second = http.post(f"{api_only.url}/v1/jobs", json=GOOD, headers=headers)
    assert first.status_code == second.status_code == 202
    assert first.json()["id"] == second.json()["id"] and job_count() == count
    other = http.post(f"{api_only.url}/v1/jobs", json={**GOOD, "epochs": 3}, headers=headers)
    assert other.status_code == 409 and other.headers["content-type"] == "application/problem+json"
    assert job_count() == count


def test_list_jobs_pages(api_only: Stack) -> None:
    """Pages are newest first, do not overlap, and end with a null cursor."""
    for epochs in (1, 2, 3):
        http.post(f"{api_only.url}/v1/jobs", json={**GOOD, "epochs": epochs})
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": 2} | ({"cursor": cursor} if cursor else {})
        page = http.get(f"{api_only.url}/v1/jobs", params=params).json()
        seen += [j["id"] for j in page["jobs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) == job_count()


def test_catalogs_and_health(api_only: Stack) -> None:
    """CNNs with parameter counts, machines with prices, health and readiness."""
    cnns = {c["name"]: c for c in http.get(f"{api_only.url}/v1/cnns").json()["cnns"]}
    assert {"resnet18", "vgg16", "mobilenet_v2", "densenet121"} <= set(cnns)
    assert cnns["resnet18"]["parameters"] == 11_689_512  # torchvision's documented count
    machine_types = {m["name"]: m for m in http.get(f"{api_only.url}/v1/machines").json()["machines"]}
    assert machine_types["local"]["price_usd_per_hour"] == 0
    assert machine_types["g5.xlarge"]["gpu"] == "A10G" and machine_types["g5.xlarge"]["price_usd_per_hour"] > 0
    assert http.get(f"{api_only.url}/healthz").json() == {"status": "ok"}
    assert http.get(f"{api_only.url}/readyz").json()["checks"] == {"database": "ok", "broker": "ok"}

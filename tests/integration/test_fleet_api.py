"""GET /v1/fleet, holding and draining a machine type over HTTP, `traincast fleet`, and the agent-wait timeout."""

from datetime import UTC, datetime, timedelta

import pytest

from cli.main import main as traincast
from shared import jobs
from shared.core.db import Json, transaction
from tests.support.jobflow import submit
from tests.support.stack import Stack, http
from worker import planning, reconcile

SET_WAITING = "UPDATE jobs SET progress = %s, updated_at = now() - interval '1 hour' WHERE id = %s"


def test_fleet_status_hold_and_drain_over_http(api_only: Stack, clean_db: None) -> None:
    """Hold g5.xlarge at 1, give it back, drain it: each is in the status and its event log."""
    status = http.get(f"{api_only.url}/v1/fleet").json()
    assert status["enabled"] is False and status["types"] == [] and status["usd_per_hour"] == 0
    assert status["limits"]["max_per_type"] == 2

    held = http.put(f"{api_only.url}/v1/fleet/g5.xlarge", json={"held": 1})
    assert held.status_code == 200 and held.json()["held"] == 1 and held.json()["drain"] is False
    assert http.put(f"{api_only.url}/v1/fleet/g5.xlarge", json={"held": None}).json()["held"] is None
    drained = http.post(f"{api_only.url}/v1/fleet/g5.xlarge/drain").json()
    assert drained["held"] == 0 and drained["drain"] is True

    status = http.get(f"{api_only.url}/v1/fleet").json()
    assert [t["machine_type"] for t in status["types"]] == ["g5.xlarge"]
    assert [e["detail"] for e in status["events"]] == ["drain: terminate all, hold at 0", "automatic", "held at 1"]


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "words"),
    [
        ("PUT", "/v1/fleet/g9.nothing", {"held": 1}, 404, "unknown machine type"),
        ("PUT", "/v1/fleet/local", {"held": 1}, 422, "not an AWS machine type"),
        ("PUT", "/v1/fleet/g5.xlarge", {"held": 3}, 422, "FLEET_MAX_PER_TYPE=2"),
        ("PUT", "/v1/fleet/g5.xlarge", {"held": -1}, 422, "greater than or equal to 0"),
        ("PUT", "/v1/fleet/g5.xlarge", {}, 422, "held"),
        ("POST", "/v1/fleet/local/drain", None, 422, "not an AWS machine type"),
    ],
)
def test_bad_fleet_requests_are_problems_and_change_nothing(
    api_only: Stack, clean_db: None, method: str, path: str, body: object, status: int, words: str
) -> None:
    """Unknown or non-AWS types and counts over the limit: problem+json, no target written."""
    r = http.request(method, f"{api_only.url}{path}", json=body)
    assert r.status_code == status and r.headers["content-type"] == "application/problem+json"
    assert words in r.text
    assert http.get(f"{api_only.url}/v1/fleet").json()["types"] == []


def test_cli_fleet(api_only: Stack, clean_db: None, capsys: pytest.CaptureFixture[str]) -> None:
    """`traincast fleet scale/drain/status` over HTTP; a bad count is one line and exit 1."""
    base = ["--api-url", api_only.url, "fleet"]
    assert traincast([*base, "scale", "g6.xlarge", "2"]) == 0
    assert "g6.xlarge: held at 2" in capsys.readouterr().out
    assert traincast([*base, "drain", "g6.xlarge"]) == 0
    assert traincast([*base, "status"]) == 0
    out = capsys.readouterr().out
    assert "DISABLED" in out and "g6.xlarge  drain" in out and "no instances" in out
    assert traincast([*base, "scale", "g6.xlarge", "many"]) == 1
    assert capsys.readouterr().err.strip() == "error: count 'many': give a number of agents (0 or more) or 'auto'"
    assert traincast([*base, "scale", "local", "1"]) == 1
    assert "not an AWS machine type" in capsys.readouterr().err


def test_a_job_waiting_too_long_for_an_agent_fails_with_the_reason(clean_db: None) -> None:
    """No agent on g5.xlarge: the job waits (the clock kept across updates), then fails saying why."""
    job = submit(machines=["g5.xlarge"], wait_for_benchmarks=True)
    planning.plan_job(job["id"])
    first = jobs.get(job_id=job["id"])["progress"]
    since = first["machines"]["g5.xlarge"]["waiting_since"]
    assert not planning.finish_if_complete(job["id"])
    assert jobs.get(job_id=job["id"])["progress"]["machines"]["g5.xlarge"]["waiting_since"] == since

    with transaction() as cur:
        cur.execute(SET_WAITING, (Json(first), job["id"]))
    assert reconcile.run() == 1  # stale but within the timeout: still running, work sent again
    assert jobs.get(job_id=job["id"])["status"] == "running"

    first["machines"]["g5.xlarge"]["waiting_since"] = (datetime.now(UTC) - timedelta(seconds=1801)).isoformat()
    with transaction() as cur:
        cur.execute(SET_WAITING, (Json(first), job["id"]))
    reconcile.run()
    failed = jobs.get(job_id=job["id"])
    assert failed["status"] == "failed" and failed["error"] is not None
    assert failed["error"].startswith("no agent on g5.xlarge came up within 1800 s")

"""GET /metrics and logs that follow a job, on the real stack (API, worker, agent as processes) after a real job."""

import json
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from shared import keys
from tests.support.stack import Stack, bearer, broker, http
from tests.support.wait import job_finished

TOKEN = secrets.token_hex(16)
JOB = {"cnns": ["resnet18"], "machines": ["local"], "batch_sizes": [1, 2], "image_size": 32, "epochs": 1}
# A type no agent serves here: a message put in one of its priority lists stays there to be counted.
IDLE_TYPE = "g4dn.xlarge"
# Masked passwords are *** (ours) or ** (Celery's banner and connection lines).
CLEAR_PASSWORD = re.compile(r"://[^:/@\s]*:(?!\*+@)[^@\s/]+@")


@pytest.fixture(scope="module")
def ran(service_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, str]]:
    """The stack with JSON logs and a metrics token, and the id of a job it ran on local."""
    env = {**service_env, "LOG_FORMAT": "json", "METRICS_TOKEN": TOKEN, "METRICS_CACHE_S": "0"}
    stack = Stack(env, tmp_path_factory.mktemp("observed"))
    for name in ("api", "worker", "agent"):
        stack.start(name)
    try:
        stack.wait_ready()
        posted = http.post(f"{stack.url}/v1/jobs", json=JOB)
        assert posted.status_code == 202, posted.text
        job_id = posted.json()["id"]
        job = job_finished(lambda: http.get(f"{stack.url}/v1/jobs/{job_id}").json(), job_id, 300,
                           lambda: stack.log("worker"), interval=0.5)  # fmt: skip
        assert job["status"] == "succeeded", job
        yield stack, job_id
    finally:
        stack.stop_all()


def scrape(stack: Stack, headers: dict[str, str]) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """GET /metrics parsed by prometheus_client: sample name → {sorted labels: value}."""
    answer = httpx.get(f"{stack.url}/metrics", headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain")
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(answer.text):
        for s in family.samples:
            samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return samples


def test_metrics_after_a_job(ran: tuple[Stack, str]) -> None:
    """A scraper's token gets jobs, benchmarks, queues, live agents and HTTP requests by route template."""
    stack, _job_id = ran
    idle = (("queue", f"bench.{IDLE_TYPE}"),)
    before = scrape(stack, bearer(TOKEN))["traincast_queue_depth"].get(idle, 0)  # other tests may have left work
    broker().rpush(f"bench.{IDLE_TYPE}\x06\x163", "waiting")  # kombu's priority-3 list of that queue
    try:
        m = scrape(stack, bearer(TOKEN))
    finally:
        broker().lrem(f"bench.{IDLE_TYPE}\x06\x163", 1, "waiting")
    assert m["traincast_jobs"][(("status", "succeeded"),)] >= 1
    assert m["traincast_job_duration_seconds_count"][(("status", "succeeded"),)] >= 1
    assert m["traincast_job_duration_seconds_sum"][(("status", "succeeded"),)] > 0
    assert m["traincast_queue_depth"][idle] == before + 1
    assert {(("queue", "jobs"),), (("queue", "bench.local"),)} <= set(m["traincast_queue_depth"])
    assert m["traincast_agents_alive"][(("machine_type", "local"),)] >= 1
    assert m["traincast_layer_benchmarks_done"][(("machine_type", "local"),)] >= 1
    assert m["traincast_benchmark_seconds_total"][(("machine_type", "local"),)] > 0
    polled = (("method", "GET"), ("route", "/v1/jobs/{job_id}"), ("status", "200"))
    assert m["traincast_http_requests_total"][polled] >= 1
    # Route templates only: no label holds a job id.
    assert not [labels for labels in m["traincast_http_requests_total"] if _job_id in str(labels)]


def test_metrics_need_an_admin_key_or_the_token(ran: tuple[Stack, str]) -> None:
    """No credential or a wrong token: 401; a read key: 403; an admin key: 200."""
    stack, _job_id = ran
    _row, read_key = keys.create(name="metrics-reader", scope="read")
    url = f"{stack.url}/metrics"
    assert httpx.get(url, timeout=30).status_code == 401
    assert httpx.get(url, headers=bearer(TOKEN + "x"), timeout=30).status_code == 401
    refused = httpx.get(url, headers=bearer(read_key), timeout=30)
    assert refused.status_code == 403 and refused.headers["content-type"] == "application/problem+json"
    admin = http.get(url)  # this run's admin key
    assert admin.status_code == 200 and "traincast_jobs{" in admin.text


def json_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a log (other lines, such as Celery's banner, are skipped)."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def test_a_job_is_followed_through_every_process(ran: tuple[Stack, str]) -> None:
    """Lines with the job's id are in the API's, worker's and agent's logs; the agent's name what it measured."""
    stack, job_id = ran
    lines = {name: json_lines(stack.logs / f"{name}.log") for name in ("api", "worker", "agent")}
    mine = {name: [x for x in found if x.get("job_id") == job_id] for name, found in lines.items()}
    for name, found in mine.items():
        assert found, f"no {name} line with job_id {job_id}: {stack.log(name)[-2000:]}"
        assert {x["process"] for x in found} == {name}
        assert all({"ts", "level", "logger", "message"} <= set(x) for x in found)
    assert any(x.get("request_id") and x.get("route") == "/v1/jobs/{job_id}" for x in mine["api"])
    assert any(x["message"].startswith("job submitted") for x in mine["api"])
    assert {x.get("task") for x in mine["worker"]} >= {"worker.plan_job"}
    measuring = [x for x in mine["agent"] if x["message"].startswith("measuring signature")]
    assert measuring and all(x["machine_type"] == "local" and isinstance(x["signature"], int) for x in measuring)
    # No URL with a password in clear (tests/unit/test_logs.py shows one is redacted).
    assert not [name for name in lines if CLEAR_PASSWORD.search(stack.log(name))]

"""The jobs domain: one owner of the table's SQL, typed plan/progress/result, and GET's documented, paged answer."""

import re
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route

from api import compress
from shared import jobs
from shared.jobs import JobStatus, Plan, Progress, Result
from shared.jobs.store import JobRow
from tests.support.jobflow import calibrate_as, drain_agent_queue, submit
from tests.support.stack import Stack, http
from worker import planning

ROOT = Path(__file__).resolve().parents[2]


def test_status_literals_come_from_the_enum() -> None:
    """JobStatus names every status the table's CHECK allows, and its terminal set is the three that never change."""
    text = "\n".join(p.read_text() for p in sorted((ROOT / "migrations").glob("*.sql")))
    check = re.search(r"status\s+text[^,]*CHECK\s*\(status IN \(([^)]*)\)\)", text)
    assert check is not None, "the jobs table's status CHECK"
    assert set(re.findall(r"'(\w+)'", check.group(1))) == {s.value for s in JobStatus}
    assert {s for s in JobStatus if s.terminal} == {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELED}


def undeclared(value: Any, where: str) -> list[str]:
    """Keys of a validated document that its models do not declare, at any depth."""
    if isinstance(value, BaseModel):
        out = [f"{where}.{k}" for k in value.model_extra or {}]
        for name in type(value).model_fields:
            out += undeclared(getattr(value, name), f"{where}.{name}")
        return out
    if isinstance(value, dict):
        return [x for k, v in value.items() for x in undeclared(v, f"{where}[{k}]")]
    if isinstance(value, list | tuple):
        return [x for i, v in enumerate(value) for x in undeclared(v, f"{where}[{i}]")]
    return []


def run_job(**overrides: Any) -> JobRow:
    """A job planned, its benchmark work measured by this host standing in for the agent, and finished."""
    job = submit(**overrides)
    planning.plan_job(job["id"])
    if jobs.get(job_id=job["id"])["status"] == JobStatus.RUNNING:
        drain_agent_queue()
        assert planning.finish_if_complete(job["id"])
    done = jobs.get(job_id=job["id"])
    assert done["status"] == JobStatus.SUCCEEDED, done["error"]
    return done


def check_typed(job: JobRow) -> Result:
    """The job's stored plan, progress and result read back through their models, every key declared."""
    plan, progress = Plan.model_validate(job["plan"]), Progress.model_validate(job["progress"])
    result = Result.model_validate(job["result"])
    assert undeclared(plan, "plan") + undeclared(progress, "progress") + undeclared(result, "result") == []
    # Nothing lost or changed on the way: the model gives back the stored document.
    assert result.model_dump(mode="json", exclude_unset=True) == job["result"]
    assert progress.model_dump(mode="json", exclude_unset=True) == job["progress"]
    return result


def test_models_describe_real_results(clean_db: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Results of the three kinds a machine type is answered by (no model, reference, its own model) fit the models."""
    no_model = check_typed(run_job(batch_sizes=[1, 2]))
    assert no_model.models["local"].status == "no_model" and no_model.predictions[0].peak_memory_gib

    answered = check_typed(run_job(machines=["g5.xlarge"], batch_sizes=[2, 4]))
    assert {p.source for p in answered.predictions} == {"reference"}
    assert all(p.reference_error_pct is not None for p in answered.predictions)

    calibrate_as("local", monkeypatch)
    measured = check_typed(run_job(batch_sizes=[2]))
    assert measured.models["local"].status == "ok" and measured.predictions[0].total_seconds


def test_openapi_documents_the_job_its_progress_and_result(api_only: Stack) -> None:
    """GET /v1/jobs/{id} is documented as Job, whose result names Result's fields."""
    spec = http.get(f"{api_only.url}/openapi.json").json()
    schemas = spec["components"]["schemas"]
    ok = spec["paths"]["/v1/jobs/{job_id}"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok == {"$ref": "#/components/schemas/Job"}
    assert set(Result.model_fields) <= set(schemas["Result"]["properties"])
    assert {"predictions", "best", "models", "training"} <= set(schemas["Result"]["properties"])
    assert {"total_seconds", "cost_usd", "fits_in_memory", "source"} <= set(schemas["Prediction"]["properties"])
    assert {"layer_benchmarks", "machines"} <= set(schemas["Progress"]["properties"])
    assert set(schemas["JobStatus"]["enum"]) == {s.value for s in JobStatus}
    params = {p["name"] for p in spec["paths"]["/v1/jobs/{job_id}"]["get"]["parameters"]}
    assert {"predictions_offset", "predictions_limit"} <= params


def test_get_pages_predictions_and_compresses(api_only: Stack, clean_db: None) -> None:
    """A page of predictions is that slice of the whole result; a client that accepts gzip gets it gzipped."""
    job = run_job(machines=["g5.xlarge"], batch_sizes=[1, 2, 4, 8, 16])
    url = f"{api_only.url}/v1/jobs/{job['id']}"
    whole = http.get(url, headers={"Accept-Encoding": "identity"})
    assert whole.status_code == 200 and "content-encoding" not in whole.headers
    body = whole.json()
    assert body["status"] == "succeeded" and "predictions_page" not in body
    assert body["result"] == jobs.get(job_id=job["id"])["result"]
    points = body["result"]["predictions"]
    assert [p["batch_size"] for p in points] == [1, 2, 4, 8, 16]

    page = http.get(url, params={"predictions_offset": 1, "predictions_limit": 2}).json()
    assert page["result"]["predictions"] == points[1:3]
    assert page["predictions_page"] == {"offset": 1, "limit": 2, "total": 5}
    assert page["result"]["best"] == body["result"]["best"]
    tail = http.get(url, params={"predictions_offset": 3}).json()
    assert tail["result"]["predictions"] == points[3:] and tail["predictions_page"]["total"] == 5
    assert http.get(url, params={"predictions_offset": 9}).json()["result"]["predictions"] == []
    bad = http.get(url, params={"predictions_limit": 0})
    assert bad.status_code == 422 and bad.headers["content-type"] == "application/problem+json"

    raw = httpx.get(url, headers={**http.headers, "Accept-Encoding": "gzip"})
    assert raw.headers["content-encoding"] == "gzip"
    # Streamed, the gzipped answer goes chunked: what came over the wire is smaller than the plain answer.
    assert raw.num_bytes_downloaded < len(whole.content)
    assert raw.json() == body


def test_gzip_leaves_bodies_too_large_to_gain(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bodies between the bounds are gzipped for clients that accept it; larger and smaller ones go as they are."""
    monkeypatch.setattr(compress, "MAXIMUM_SIZE", 64 * 1024)
    sizes = {"small": 100, "mid": 32 * 1024, "large": 128 * 1024}

    def body(request: Any) -> Response:
        return Response(b"x" * sizes[request.path_params["kind"]], media_type="application/json")

    app = compress.GZip(Starlette(routes=[Route("/{kind}", body)]))

    async def get(path: str, encoding: str) -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as client:
            return await client.get(path, headers={"Accept-Encoding": encoding})

    encodings = {kind: anyio.run(get, f"/{kind}", "gzip").headers.get("content-encoding") for kind in sizes}
    assert encodings == {"small": None, "mid": "gzip", "large": None}
    mid = anyio.run(get, "/mid", "gzip")
    assert mid.content == b"x" * sizes["mid"] and int(mid.headers["content-length"]) < sizes["mid"]
    assert anyio.run(get, "/mid", "identity").headers.get("content-encoding") is None

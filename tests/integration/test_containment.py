"""Failures stay with their job: errors, cancels and outages, driven in-process through PostgreSQL and Redis."""

import base64
import json
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import psycopg2
import psycopg2.errors
import pytest
from celery.exceptions import Reject, SoftTimeLimitExceeded

from fleet import store as fleet_store
from gpu_agent import app as agent
from gpu_agent import layer_bench
from shared import jobs
from shared.core.db import Json, one, transaction
from shared.core.errors import ServiceUnavailable
from shared.core.settings import get_settings
from shared.jobs.result import ResultDict
from shared.jobs.store import JobRow
from shared.measurements import layers
from tests.support.jobflow import drain_agent_queue, submit, take_queued
from tests.support.stack import broker
from worker import assemble, coverage, planning, reconcile, withdrawal

STALE = "UPDATE jobs SET updated_at = now() - interval '1 hour' WHERE id = %s"
NEW_AGENT = """
INSERT INTO agents (id, machine_type, host, pid, device, environment_id, started_at, current_work)
SELECT gen_random_uuid(), 'local', 'test', 1, 'cpu', id, now(), %s FROM environments LIMIT 1"""
ENVIRONMENT = """INSERT INTO environments (hash, details) VALUES ('containment-test', '{"device": "test"}')
ON CONFLICT DO NOTHING"""


def queued_signatures() -> list[int]:
    """Signature ids of the layer tasks waiting in bench.local, in queue order."""
    out = []
    for raw in broker().lrange("bench.local", 0, -1):
        _args, kwargs, _embed = json.loads(base64.b64decode(json.loads(raw)["body"]))
        out += [item["signature_id"] for item in kwargs["items"]]
    return out


def status(job: JobRow) -> JobRow:
    """The job as stored now."""
    return jobs.get(job_id=job["id"])


def assembly_failing_for(monkeypatch: pytest.MonkeyPatch, epochs: int, exc: Exception) -> None:
    """Make assembly raise exc for jobs of that epoch count only."""
    real = assemble.result

    def result(**kwargs: Any) -> ResultDict:
        if kwargs["request"].epochs == epochs:
            raise exc
        return real(**kwargs)

    monkeypatch.setattr(assemble, "result", result)


def test_an_unexpected_error_fails_its_job_and_the_fan_in_goes_on(
    clean_db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An OverflowError assembling one job fails it with the reason; the job next to it still succeeds."""
    bad, good = submit(epochs=7), submit(epochs=2)
    for job in (bad, good):
        planning.plan_job(job["id"])
    drain_agent_queue()
    assembly_failing_for(monkeypatch, 7, OverflowError("int too large to convert to float"))
    planning.advance_jobs("local")
    failed = status(bad)
    assert failed["status"] == "failed" and failed["finished_at"] is not None
    # A stable message and an id to find the logged exception by, never the exception's own text.
    assert failed["error"] is not None
    assert failed["error"].startswith(planning.INTERNAL_ERROR + " (error id ")
    assert "Overflow" not in failed["error"] and "int too large" not in failed["error"]
    assert failed["progress"]["layer_benchmarks"]["needed"] > 0  # kept, not wiped
    assert status(good)["status"] == "succeeded"


def test_a_result_the_database_refuses_fails_its_job_and_the_reconciler_goes_on(
    clean_db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A result PostgreSQL's jsonb refuses (as one over its size limit would be) fails that job, not the pass."""
    bad, good = submit(epochs=7), submit(epochs=2)
    for job in (bad, good):
        planning.plan_job(job["id"])
    drain_agent_queue()
    real = assemble.result

    def result(**kwargs: Any) -> ResultDict:
        out = real(**kwargs)
        if kwargs["request"].epochs == 7:
            # A key ResultDict does not have, on purpose: a plain dict to the database.
            cast(dict[str, Any], out)["note"] = "nul \u0000 byte"  # jsonb has no NUL: the UPDATE itself fails
        return out

    monkeypatch.setattr(assemble, "result", result)
    with transaction() as cur:
        for job in (bad, good):
            cur.execute(STALE, (job["id"],))
    assert reconcile.run() == 2
    failed = status(bad)
    assert failed["status"] == "failed" and failed["error"] is not None
    assert failed["error"].startswith(planning.INTERNAL_ERROR)
    assert "UPDATE" not in failed["error"] and "Untranslatable" not in failed["error"]  # no SQL or exception text
    assert status(good)["status"] == "succeeded"


def test_a_soft_time_limit_fails_the_job_with_the_reason(clean_db: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Planning past the task's soft time limit ends the job as failed, naming the limit."""
    job = submit()

    def slow(**_: Any) -> dict[str, list[tuple[int, int]]]:
        raise SoftTimeLimitExceeded()

    monkeypatch.setattr(layers, "register_all", slow)
    planning.plan_job(job["id"])
    failed = status(job)
    assert failed["status"] == "failed" and failed["error"] is not None and "time limit" in failed["error"]


def test_transient_errors_are_not_the_jobs_fault(clean_db: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A database outage while finishing leaves the job running (the reconciler retries it), not failed."""
    job = submit()
    planning.plan_job(job["id"])
    drain_agent_queue()
    assembly_failing_for(monkeypatch, job["request"]["epochs"], ServiceUnavailable("PostgreSQL is unreachable"))
    with pytest.raises(ServiceUnavailable):
        planning.advance_jobs("local")
    assert status(job)["status"] == "running"
    monkeypatch.undo()
    planning.advance_jobs("local")
    assert status(job)["status"] == "succeeded"


def test_cancel_withdraws_queued_work_unless_another_job_needs_it(clean_db: None) -> None:
    """A canceled job's queued tasks go, except those a running job also waits for; the fleet then wants none."""
    first = submit(batch_sizes=[1])
    planning.plan_job(first["id"])
    sent = queued_signatures()
    second = submit(batch_sizes=[1], epochs=3)
    planning.plan_job(second["id"])
    assert len(queued_signatures()) == 2 * len(sent)
    jobs.cancel(job_id=first["id"])
    withdrawal.sweep()
    assert sorted(set(queued_signatures())) == sorted(sent)  # the second job still needs every signature
    jobs.cancel(job_id=second["id"])
    withdrawal.sweep()
    assert queued_signatures() == []
    assert fleet_store.queued(broker(), "local") == 0


def test_failure_withdraws_queued_work(clean_db: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job failed by an unexpected error takes its queued benchmark tasks back at once."""
    job = submit(batch_sizes=[1])
    planning.plan_job(job["id"])
    assert queued_signatures()
    monkeypatch.setattr(coverage, "missing", lambda *a, **k: (_ for _ in ()).throw(KeyError("peers")))
    planning.advance_jobs("local")
    failed = status(job)
    assert failed["status"] == "failed" and failed["error"] is not None
    assert failed["error"].startswith(planning.INTERNAL_ERROR)
    assert queued_signatures() == []


def test_a_cancel_during_planning_is_never_undone(clean_db: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Canceled while its CNNs are read, or while its work is sent: the job stays canceled and its work goes."""
    job = submit(batch_sizes=[1])
    real_register = layers.register_all

    def register_then_cancel(**kwargs: Any) -> dict[str, list[tuple[int, int]]]:
        jobs.cancel(job_id=job["id"])
        return real_register(**kwargs)

    monkeypatch.setattr(layers, "register_all", register_then_cancel)
    planning.plan_job(job["id"])
    assert status(job)["status"] == "canceled" and status(job)["plan"] is None
    assert queued_signatures() == []
    monkeypatch.undo()

    late = submit(batch_sizes=[1], epochs=4)
    real_send = coverage.send_work

    def send_then_cancel(
        gaps: coverage.Missing, precision: str, channels_last: bool = False, job_ids: list[str] | None = None
    ) -> None:
        real_send(gaps, precision, channels_last, job_ids=job_ids)
        jobs.cancel(job_id=late["id"])

    monkeypatch.setattr(coverage, "send_work", send_then_cancel)
    planning.plan_job(late["id"])
    assert status(late)["status"] == "canceled" and queued_signatures() == []


def test_the_reconciler_resends_only_lost_work(clean_db: None) -> None:
    """Queued work and work a live agent measures are not sent twice; a hung agent's work and lost work are."""
    job = submit(batch_sizes=[1])
    planning.plan_job(job["id"])
    sent = queued_signatures()
    with transaction() as cur:
        cur.execute(STALE, (job["id"],))
    reconcile.run()
    assert queued_signatures() == sent  # all still queued: nothing re-sent

    taken = broker().rpop("bench.local")  # an agent took the oldest task and is measuring it
    # rpop without a count gives one element (bytes), not the hint's list.
    sig = json.loads(base64.b64decode(json.loads(taken)["body"]))[1]["items"][0]["signature_id"]  # type: ignore[arg-type]
    work = {"task": "gpu_agent.bench_layers", "signature_id": sig, "since": datetime.now(UTC).isoformat()}
    with transaction() as cur:
        cur.execute(ENVIRONMENT)
        cur.execute(NEW_AGENT, (Json(work),))
        cur.execute(STALE, (job["id"],))
    reconcile.run()
    assert sorted(queued_signatures()) == sorted(s for s in sent if s != sig)

    hung = {
        **work,
        "since": (datetime.now(UTC) - timedelta(seconds=get_settings().bench_stuck_after_s + 60)).isoformat(),
    }
    with transaction() as cur:
        cur.execute("UPDATE agents SET current_work = %s", (Json(hung),))
        cur.execute(STALE, (job["id"],))
    reconcile.run()
    assert sorted(queued_signatures()) == sorted(sent)  # the hung agent's signature is sent again


def test_a_transient_database_error_in_the_agent_is_retried_not_counted(
    clean_db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent hands its task back on a lost database connection and records no layer failure."""
    job = submit(batch_sizes=[1])
    planning.plan_job(job["id"])
    kwargs = take_queued("gpu_agent.bench_layers")
    monkeypatch.setattr(get_settings(), "agent_db_retry_s", 0.0)

    def lost_connection(*_: Any, **__: Any) -> list[int]:
        raise psycopg2.OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(layer_bench, "measure", lost_connection)
    with pytest.raises(Reject) as rejected:
        agent.bench_layers(**kwargs)
    assert rejected.value.requeue is True
    with transaction() as cur:
        cur.execute("SELECT count(*) AS n FROM layer_failures")
        assert one(cur)["n"] == 0

    monkeypatch.setattr(layer_bench, "measure", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("bad spec")))
    with pytest.raises(RuntimeError):
        agent.bench_layers(**kwargs)
    with transaction() as cur:
        cur.execute("SELECT count(*) AS n FROM layer_failures")
        assert one(cur)["n"] == 1  # a real failure still counts


def test_a_job_whose_only_agent_is_hung_ends(clean_db: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent stuck on one measurement serves nobody: the job waits for another and fails after the wait."""
    job = submit(batch_sizes=[1])
    planning.plan_job(job["id"])
    long_ago = datetime.now(UTC) - timedelta(seconds=get_settings().bench_stuck_after_s + 60)
    work = {"task": "gpu_agent.bench_layers", "signature_id": queued_signatures()[0], "since": long_ago.isoformat()}
    with transaction() as cur:
        cur.execute(ENVIRONMENT)
        cur.execute(NEW_AGENT, (Json(work),))
    assert planning.finish_if_complete(job["id"]) is False
    waiting = status(job)["progress"]["machines"]["local"]
    assert waiting["agent_alive"] is False and waiting["waiting_for"] == "waiting for an agent on local"
    monkeypatch.setattr(get_settings(), "agent_wait_timeout_s", 0.0)
    assert planning.finish_if_complete(job["id"]) is True
    failed = status(job)
    assert failed["status"] == "failed" and failed["error"] is not None
    assert "no agent on local came up" in failed["error"]


def test_a_cancel_during_assembly_takes_effect_at_once_and_the_result_is_dropped(
    clean_db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Assembly holds no lock on the job's row: a cancel while the result is built answers at once, the job stays
    canceled, its result is never stored; and a job that does finish says when it finished, not when it began."""
    import threading
    import time

    job = submit(epochs=5)
    planning.plan_job(job["id"])
    drain_agent_queue()
    building, release = threading.Event(), threading.Event()
    real = assemble.result

    def slow(**kwargs: Any) -> ResultDict:
        building.set()
        assert release.wait(30)
        return real(**kwargs)

    monkeypatch.setattr(assemble, "result", slow)
    worker = threading.Thread(target=planning.advance_jobs, args=("local",))
    worker.start()
    assert building.wait(30)
    started = time.monotonic()
    canceled = jobs.cancel(job_id=job["id"])  # the worker is mid-assembly
    waited = time.monotonic() - started
    release.set()
    worker.join(30)
    assert canceled["status"] == "canceled" and waited < 5, waited
    assert status(job)["status"] == "canceled" and status(job)["result"] is None

    def late(**kwargs: Any) -> ResultDict:
        time.sleep(0.6)
        return real(**kwargs)

    monkeypatch.setattr(assemble, "result", late)
    done = submit(epochs=6)
    before = datetime.now(UTC)
    planning.plan_job(done["id"])  # its benchmarks are stored: it is assembled at once
    drain_agent_queue()
    planning.advance_jobs("local")
    finished = status(done)
    assert finished["status"] == "succeeded" and finished["finished_at"] is not None
    assert finished["finished_at"] - before >= timedelta(seconds=0.5), (finished["finished_at"], before)


def test_a_refused_cancel_reads_the_status_alone(clean_db: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """409 for a finished job names its status without reading its points (a large result's were loaded whole: 700 MB
    and 3.7 s for each cancel)."""
    from shared.core.errors import Conflict
    from shared.jobs import predictions

    job = submit()
    planning.plan_job(job["id"])
    drain_agent_queue()
    planning.advance_jobs("local")
    assert status(job)["status"] == "succeeded"

    def never(**_: Any) -> Any:
        raise AssertionError("a cancel read the job's points")

    monkeypatch.setattr(predictions, "points", never)
    monkeypatch.setattr(predictions, "chunks", never)
    with pytest.raises(Conflict, match="already succeeded"):
        jobs.cancel(job_id=job["id"])

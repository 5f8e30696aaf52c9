"""Planning, fan-in, reconciliation and the no-model path, driven through the database and Redis."""

import math
import os
import subprocess
import sys
from typing import Any

import psycopg2
import pytest

from shared import jobs
from shared.cnn import zoo as cnn_zoo
from shared.core.db import one, transaction
from shared.core.settings import get_settings
from shared.jobs import lifecycle
from shared.jobs.lifecycle import ASSEMBLY_LOCK_CLASS
from tests.support.jobflow import drain_agent_queue, stored_conv_ms, submit, take_queued
from tests.support.stack import broker, queued_tasks
from tests.support.wait import wait_until
from worker import planning, reconcile

# A planner that takes the claim, says so, and sleeps until killed.
HOLD_CLAIM = """
import sys, time, uuid
from shared import jobs
with jobs.planning_claim(job_id=uuid.UUID(sys.argv[1])) as mine:
    print("claimed" if mine else "taken", flush=True)
    time.sleep(600)
"""
STALE = "UPDATE jobs SET updated_at = now() - interval '1 hour' WHERE id = %s"
NEW_ENVIRONMENT = 'INSERT INTO environments (hash, details) VALUES (%s, \'{"device": "test"}\') RETURNING id'
COPY_ROW = """
INSERT INTO layer_benchmarks (signature_id, machine_type, batch_size, precision, environment_id, oom,
                              forward_ms, backward_data_ms, backward_weight_ms, stats, measured_at)
SELECT signature_id, machine_type, batch_size, precision, %s, oom, forward_ms * 2, backward_data_ms * 2,
       backward_weight_ms * 2, stats, measured_at + interval '1 hour'
FROM layer_benchmarks WHERE id = %s"""


def op_rows() -> int:
    """Op benchmark rows stored (optimizer steps included)."""
    with transaction() as cur:
        cur.execute("SELECT count(*) AS n FROM op_benchmarks")
        return int(one(cur)["n"])


def benchmark_rows() -> int:
    """Layer benchmark rows stored."""
    with transaction() as cur:
        cur.execute("SELECT count(*) AS n FROM layer_benchmarks")
        return int(one(cur)["n"])


def test_plan_measure_assemble_then_reuse(clean_db: None) -> None:
    """Missing work goes to bench.local, BENCH_TASK_SIGNATURES signatures a task; the last result finishes the job."""
    read = cnn_zoo.conv_layers("resnet18", 32)
    unique, unique_ops = len(read.signatures), len(read.ops)
    op_points = 2 * (unique_ops - 1) + 1  # every op at both batch sizes, the optimizer step once
    job = submit()
    planning.plan_job(job["id"])
    running = jobs.get(job_id=job["id"])
    assert running["status"] == "running"
    assert running["progress"]["layer_benchmarks"] == {"needed": 2 * unique, "done": 0, "pending": 2 * unique}
    assert running["progress"]["op_benchmarks"] == {"needed": op_points, "done": 0, "pending": op_points}
    per_task = get_settings().bench_task_signatures
    layer_tasks, op_tasks = math.ceil(unique / per_task), math.ceil(unique_ops / per_task)
    assert queued_tasks("bench.local").count("gpu_agent.bench_layers") == layer_tasks
    assert queued_tasks("bench.local").count("gpu_agent.bench_ops") == op_tasks
    assert drain_agent_queue() == layer_tasks + op_tasks
    assert op_rows() == op_points
    assert planning.finish_if_complete(job["id"])
    done = jobs.get(job_id=job["id"])
    assert done["status"] == "succeeded" and done["finished_at"] is not None
    result = done["result"]
    assert result is not None
    assert [p["batch_size"] for p in result["predictions"]] == [1, 2]
    assert all(p["iteration_seconds"] is None for p in result["predictions"])
    # Each conv counted once per use and all three phases: every signature's count, each phase's time.
    stored = stored_conv_ms("resnet18", 32)
    assert {bs: convs for bs, (convs, _) in stored.items()} == {1: read.total, 2: read.total}
    for p in result["predictions"]:
        assert p["conv_ms"] == pytest.approx(stored[p["batch_size"]][1], rel=1e-5)
    assert result["models"]["local"]["status"] == "no_model"
    # Memory needs no model: each point has its modelled peak, and resnet18 at 32 px fits this host's RAM.
    assert all(p["peak_memory_gib"] > 0 and p["fits_in_memory"] is True for p in result["predictions"])
    assert result["best"][0].pop("max_batch_size") >= 2
    assert result["best"][0].pop("memory_gib") > 0 and result["best"][0].pop("memory_basis") == "the machine's RAM"
    assert result["best"] == [{"cnn": "resnet18", "machine": "local", "min_time": None, "min_cost": None}]

    rows = benchmark_rows()
    again = submit(epochs=5)
    planning.plan_job(again["id"])
    assert jobs.get(job_id=again["id"])["status"] == "succeeded"
    assert broker().llen("bench.local") == 0 and benchmark_rows() == rows and op_rows() == op_points

    # Another CNN sharing most ops with resnet18 (resnet34) is sent only the op work that is missing, and
    # another optimizer only its optimizer step: the operators' rows serve every optimizer.
    r34 = cnn_zoo.conv_layers("resnet34", 32)
    new_ops = set(r34.ops) - set(read.ops)
    third = submit(cnns=["resnet34"], optimizer="adamw")
    planning.plan_job(third["id"])
    queued = queued_tasks("bench.local")
    assert queued.count("gpu_agent.bench_ops") == len(new_ops) == 1 < len(r34.ops)
    assert {op.op for op in new_ops} == {"optimizer"}  # resnet34's other ops are all resnet18's


def test_assembly_happens_once(clean_db: None) -> None:
    """A second fan-in call for a finished job changes nothing."""
    job = submit()
    planning.plan_job(job["id"])
    drain_agent_queue()
    assert planning.finish_if_complete(job["id"]) is True
    first = jobs.get(job_id=job["id"])
    assert planning.finish_if_complete(job["id"]) is False
    assert jobs.get(job_id=job["id"])["finished_at"] == first["finished_at"]


def test_lost_benchmark_messages_are_sent_again(clean_db: None) -> None:
    """A Redis restart loses queued work; the reconciler re-sends it for a job that stopped moving."""
    job = submit()
    planning.plan_job(job["id"])
    sent = broker().llen("bench.local")
    broker().delete("bench.local")  # what a Redis restart without persistence does
    assert reconcile.run() == 0  # not stale yet: nothing re-sent
    with transaction() as cur:
        cur.execute(STALE, (job["id"],))
    assert reconcile.run() == 1
    assert broker().llen("bench.local") == sent
    drain_agent_queue()
    planning.advance_jobs("local")
    assert jobs.get(job_id=job["id"])["status"] == "succeeded"


def test_a_plan_message_while_another_process_plans_the_job_does_nothing(clean_db: None) -> None:
    """The reconciler re-sends a slow first planning's message: the duplicate plans nothing while the claim is held."""
    job = submit()
    with jobs.planning_claim(job_id=job["id"]) as mine:
        assert mine
        planning.plan_job(job["id"])  # takes its own connection: another session, as another worker's would be
        assert jobs.get(job_id=job["id"])["status"] == "queued" and broker().llen("bench.local") == 0
    planning.plan_job(job["id"])
    assert jobs.get(job_id=job["id"])["status"] == "running" and broker().llen("bench.local") > 0


def test_a_planned_job_is_not_planned_again(clean_db: None) -> None:
    """A plan message arriving after the planning ended sends nothing more and keeps the plan and progress."""
    job = submit()
    planning.plan_job(job["id"])
    planned, sent = jobs.get(job_id=job["id"]), queued_tasks("bench.local")
    planning.plan_job(job["id"])
    again = jobs.get(job_id=job["id"])
    assert queued_tasks("bench.local") == sent
    assert (again["plan"], again["progress"], again["updated_at"]) == (
        planned["plan"],
        planned["progress"],
        planned["updated_at"],
    )


def test_a_planner_that_dies_leaves_the_job_to_the_next_plan_message(clean_db: None) -> None:
    """The claim lives with the planner's session: killed mid-planning, the next plan message plans the job."""
    job = submit()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_CLAIM, str(job["id"])], stdout=subprocess.PIPE, text=True, env=os.environ.copy()
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "claimed"
        with jobs.planning_claim(job_id=job["id"]) as mine:
            assert not mine
    finally:
        holder.kill()
        holder.wait()
    wait_until(lambda: _claimable(job["id"]), 10, "the killed planner's session to end")
    planning.plan_job(job["id"])
    assert jobs.get(job_id=job["id"])["status"] == "running"


def test_a_claim_whose_block_fails_is_free_at_once(clean_db: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """An assembly that raised (an outage in its own queries) leaves the claim free before the error reaches the
    caller, even while its closed session's server process is still there: the next advance takes the job up."""
    job, late = submit(), LateClose()
    monkeypatch.setattr(lifecycle, "pool", lambda: late)
    try:
        with pytest.raises(RuntimeError), jobs.assembly_claim(job_id=job["id"]) as mine:
            assert mine and _claims_held(job["id"]) == 1
            raise RuntimeError("the assembly failed")
        assert late.sessions and _claims_held(job["id"]) == 0
    finally:
        late.end()


class LateClose:
    """A pool whose connections' close() ends nothing yet: each session (and any lock it holds) lives on until end(),
    as a closed session's server process can for a moment."""

    def __init__(self) -> None:
        self.sessions: list[Any] = []

    def borrow(self) -> Any:
        conn = psycopg2.connect(get_settings().database_url)
        self.sessions.append(conn)
        return Session(conn)

    def give_back(self, _conn: Any) -> None:
        pass

    def end(self) -> None:
        for conn in self.sessions:
            conn.close()


class Session:
    """A connection whose close() is late (LateClose)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def __enter__(self) -> Any:
        return self.conn.__enter__()

    def __exit__(self, *exc: Any) -> Any:
        return self.conn.__exit__(*exc)

    def cursor(self) -> Any:
        return self.conn.cursor()

    def close(self) -> None:
        pass


# The job's assembly claim, held by any session of this database (an advisory lock on (class, hashtext(job id))).
HELD_CLAIM = """
SELECT count(*) AS n FROM pg_locks
WHERE locktype = 'advisory' AND granted AND classid = %(class)s
  AND objid::text::bigint = (hashtext(%(job)s)::bigint & 4294967295)
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"""


def _claims_held(job_id: object) -> int:
    with transaction() as cur:
        cur.execute(HELD_CLAIM, {"class": ASSEMBLY_LOCK_CLASS, "job": str(job_id)})
        return int(one(cur)["n"])


def _claimable(job_id: object) -> bool:
    with jobs.planning_claim(job_id=job_id) as mine:  # type: ignore[arg-type]
        return mine


def test_lost_plan_message_is_sent_again(clean_db: None) -> None:
    """A queued job whose plan message was lost gets it again."""
    job = submit()
    with transaction() as cur:
        cur.execute(STALE, (job["id"],))
    reconcile.run()
    assert queued_tasks("jobs") == ["worker.plan_job"]


def test_canceled_job_is_not_assembled(clean_db: None) -> None:
    """Measurements still land after a cancel, but the job stays canceled."""
    job = submit()
    planning.plan_job(job["id"])
    jobs.cancel(job_id=job["id"])
    drain_agent_queue()
    planning.advance_jobs("local")
    assert jobs.get(job_id=job["id"])["status"] == "canceled" and benchmark_rows() > 0


def test_unreadable_cnn_fails_the_job_with_the_reason(clean_db: None) -> None:
    """A job whose CNN cannot run at its image size fails with a message, not a crash."""
    job = submit(cnns=["inception_v3"], image_size=64)
    planning.plan_job(job["id"])
    failed = jobs.get(job_id=job["id"])
    assert failed["status"] == "failed" and failed["error"] is not None
    assert "inception_v3 cannot run on 64x64" in failed["error"]


def test_job_says_which_machine_has_no_agent(clean_db: None) -> None:
    """Asked to wait for benchmarks, pending work for a machine type no agent serves is named in the progress."""
    job = submit(machines=["g5.xlarge"], wait_for_benchmarks=True)
    planning.plan_job(job["id"])
    progress = jobs.get(job_id=job["id"])["progress"]["machines"]["g5.xlarge"]
    assert progress["pending"] > 0 and progress["agent_alive"] is False
    assert progress["waiting_for"] == "waiting for an agent on g5.xlarge"
    assert broker().llen("bench.g5.xlarge") > 0  # the work waits in that machine type's queue


def test_a_benchmark_that_keeps_failing_fails_the_job(clean_db: None) -> None:
    """The agent records each failure of a layer task; the third one since the job started fails the job."""

    import pytest

    from gpu_agent import app as agent

    job = submit()
    planning.plan_job(job["id"])
    kwargs = take_queued("gpu_agent.bench_layers")
    item = kwargs["items"][0]
    # A spec torch refuses (channels not divisible by the groups), under the planned signature's id.
    item["spec"] = item["spec"] | {"groups": 7}
    for attempt in (1, 2, 3):
        with pytest.raises(RuntimeError, match="divisible by 7"):
            agent.bench_layers(**kwargs)
        assert planning.finish_if_complete(job["id"]) is (attempt == 3)
    failed = jobs.get(job_id=job["id"])
    assert failed["status"] == "failed" and failed["error"] is not None
    expected = f"the layer benchmark of signature {item['signature_id']} failed 3 times on local: RuntimeError"
    assert failed["error"].startswith(expected) and "divisible by 7" in failed["error"]


def test_an_op_benchmark_that_keeps_failing_fails_the_job(clean_db: None) -> None:
    """Op work is held to the same rule: each failure is recorded, the third since the job started fails the job."""

    import pytest

    from gpu_agent import app as agent
    from shared.measurements import ops

    job = submit()
    planning.plan_job(job["id"])
    kwargs = take_queued("gpu_agent.bench_ops")
    item = kwargs["items"][0]
    planned = ops.signature(ops.specs(signature_ids=[item["signature_id"]])[item["signature_id"]]["spec"])
    # A spec torch refuses (a pooling window larger than its input), under the planned signature's id.
    args = {"kernel": [5, 5], "stride": [1, 1], "padding": [0, 0], "dilation": [1, 1], "ceil": False}
    item["spec"] = {"op": "max_pool2d", "shape": [4, 2, 2], "args": args}
    for attempt in (1, 2, 3):
        with pytest.raises(RuntimeError, match="too small"):
            agent.bench_ops(**kwargs)
        assert planning.finish_if_complete(job["id"]) is (attempt == 3)
    failed = jobs.get(job_id=job["id"])
    assert failed["status"] == "failed" and failed["error"] is not None
    expected = f"the op benchmark of signature {item['signature_id']} ({planned.op}"
    assert failed["error"].startswith(expected), failed["error"]
    assert "failed 3 times on local: RuntimeError" in failed["error"] and "too small" in failed["error"]


def test_layer_timings_come_from_one_environment_when_one_has_them_all(clean_db: None) -> None:
    """A newer environment holding one point does not mix into a CNN whose points another one holds; the
    result names the environment, and names both only where a point exists in the newer one alone."""
    job = submit(batch_sizes=[1])
    planning.plan_job(job["id"])
    drain_agent_queue()
    with transaction() as cur:
        cur.execute("SELECT * FROM layer_benchmarks ORDER BY signature_id LIMIT 1")
        first = one(cur)
        cur.execute(NEW_ENVIRONMENT, (f"test-{first['id']}",))
        newer = one(cur)["id"]
        cur.execute(COPY_ROW, (newer, first["id"]))  # the same point again, newer, another environment
    assert planning.finish_if_complete(job["id"])
    result = jobs.get(job_id=job["id"])["result"]
    assert result is not None
    [point] = result["predictions"]
    assert point["layer_environments"] == [first["environment_id"]]

    again = submit(batch_sizes=[1], epochs=2)
    with transaction() as cur:  # now a point only the newer environment has
        cur.execute("DELETE FROM layer_benchmarks WHERE id = %s", (first["id"],))
    planning.plan_job(again["id"])
    result = jobs.get(job_id=again["id"])["result"]
    assert result is not None
    [point] = result["predictions"]
    assert point["layer_environments"] == sorted([first["environment_id"], newer])

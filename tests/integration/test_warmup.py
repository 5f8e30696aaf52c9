"""A starting worker: torch imported once for its pool, and the warm-up (worker/warmup.py), whose stores are what a new
install's first job would otherwise compute."""

import json
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import partial
from typing import Any

import psutil
import pytest

from prediction import reference
from shared import agents, jobs
from shared.cnn import zoo
from shared.core import tasks
from shared.core.db import transaction
from shared.core.settings import get_settings
from shared.jobs.request import JobRequest
from tests.integration.conftest import clean
from tests.support.stack import Stack, broker
from tests.support.wait import wait_until
from tests.unit.test_reference_store import lightgbm_rows
from worker import planning, reference_store, step_cache, warmup


def warm_cnns(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    """WARM_CNNS for this process."""
    monkeypatch.setenv("WARM_CNNS", json.dumps(list(names)))
    get_settings.cache_clear()


@pytest.fixture
def empty() -> Iterator[None]:
    """Empty tables before, and this process's settings as they were after."""
    clean()
    yield
    get_settings.cache_clear()


def unwarmed() -> list[tuple[str, str]]:
    """(GPU, kernel precision) pairs some warmed conv still lacks batch sizes 1-256 on."""
    model, specs = reference.load(), warmup.warm_specs()
    left = []
    for gpu in warmup.gpus():
        for precision in warmup.KERNEL_PRECISIONS:
            names = [model.stored_name(s, gpu, precision) for s in specs]
            if not specs or reference_store.complete(names, up_to=warmup.MAX_BATCH) != set(names):
                left.append((gpu.name, precision))
    return left


def test_a_first_job_after_the_warm_up_reads_everything(empty: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """After the warm-up every GPU type has every warmed conv in both kernel precisions; a second warm-up computes
    nothing; a first job, in fp32 and in AMP, on reference GPUs reads them: no CNN read, no LightGBM run."""
    warm_cnns(monkeypatch, "squeezenet1_1", "resnet18")
    assert unwarmed()  # nothing stored yet
    assert warmup.warm() >= len(warmup.plan(warmup.names(), warmup.gpus())) > 2  # a step past STEP_S runs again
    assert unwarmed() == []

    rows = lightgbm_rows(monkeypatch)
    monkeypatch.setattr(zoo, "build", lambda *a, **k: pytest.fail("a warmed CNN was read again"))
    warmup.warm()
    assert rows == []

    for precision in ("fp32", "amp_bf16"):
        reference.load.cache_clear()  # a new worker process: nothing in memory, everything in PostgreSQL
        step_cache.clear()
        request = JobRequest.model_validate({
            "cnns": ["squeezenet1_1", "resnet18"], "machines": ["g4dn.xlarge", "p4d.24xlarge"],
            "batch_sizes": {"min": 1, "max": 256}, "precision": precision,
        })  # fmt: skip
        row, _ = jobs.create(request=request)
        planning.plan_job(row["id"])
        done = jobs.get(job_id=row["id"])
        assert done["status"] == "succeeded", done.get("error")
        assert done["result"] is not None
        points = done["result"]["predictions"]
        assert len(points) == 2 * 2 * 256 and {p["source"] for p in points} == {"reference"}
    assert rows == []


def test_a_step_resumes_where_it_stopped(empty: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A step past its time is sent again and goes on from what it stored; one another process holds is passed."""
    warm_cnns(monkeypatch, "alexnet")
    steps = warmup.plan(warmup.names(), warmup.gpus())
    assert [s.cnns for s in steps[:1]] == [("alexnet",)] and steps[1].precision == "fp32"
    assert [s.precision for s in steps[1:]] == ["fp32"] * (len(steps) // 2) + ["amp_fp16"] * (len(steps) // 2)
    assert warmup.run_step(0) == 1
    monkeypatch.setattr(warmup, "STEP_S", 0.0)  # one LightGBM call a step
    monkeypatch.setattr(warmup, "PREDICT_PER_CALL", 2)
    assert warmup.run_step(1) == 1  # alexnet's 5 convs: 2 done, 3 left
    assert warmup.run_step(1) == 1
    assert warmup.run_step(1) == 2  # the last one
    first, second = steps[1].gpu, steps[2].gpu
    assert first is not None and second is not None
    assert (first.name, "fp32") not in unwarmed()
    with transaction() as cur:  # another worker is doing step 2
        cur.execute(warmup.TRY_STEP_LOCK, (warmup.STEP_LOCK_CLASS, 2))
        assert warmup.run_step(2) == 3
    assert (second.name, "fp32") in unwarmed()
    assert warmup.run_step(len(steps)) is None


WAITING = (
    "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND classid = %s AND objid = %s"
)


@contextmanager
def held_elsewhere(index: int, until: Callable[[], bool]) -> Iterator[None]:
    """Step `index`'s lock held by another connection, as a worker doing it would, until until() says so or the
    block ends."""
    held, let_go = threading.Event(), threading.Event()

    def hold() -> None:
        with transaction() as cur:
            cur.execute(warmup.TRY_STEP_LOCK, (warmup.STEP_LOCK_CLASS, index))
            row = cur.fetchone()
            assert row is not None and row["mine"]
            held.set()
            wait_until(lambda: let_go.is_set() or until(), 60, "the moment to let the step go", 0.05)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(30)
        yield
    finally:
        let_go.set()
        holder.join(60)


def test_the_whole_warm_up_finishes_a_step_a_worker_holds(empty: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """In one process (python -m worker.warmup) a step another process holds is waited for and then done here, not
    passed over; one held past the wait is passed over."""
    warm_cnns(monkeypatch, "alexnet")
    reference.load.cache_clear()  # a new process: no conv predicted in memory by an earlier test (none is stored)
    steps = warmup.plan(warmup.names(), warmup.gpus())
    assert warmup.run_step(0) == 1
    gpu = steps[1].gpu
    assert gpu is not None and (gpu.name, "fp32") in unwarmed()

    def someone_waits() -> bool:
        with transaction() as cur:
            cur.execute(WAITING, (warmup.STEP_LOCK_CLASS, 1))
            row = cur.fetchone()
            return row is not None and row["n"] > 0

    with held_elsewhere(1, until=someone_waits):
        assert warmup.run_step(1, wait=True) == 2  # let go only once this waited for it, then done here
    assert (gpu.name, "fp32") not in unwarmed()

    monkeypatch.setattr(warmup, "LOCK_WAIT", "SET LOCAL lock_timeout = '200ms'")
    later = steps[2].gpu
    assert later is not None
    with held_elsewhere(2, until=lambda: False):
        assert warmup.run_step(2, wait=True) == 3  # held past the wait: passed over
    assert (later.name, "fp32") in unwarmed()


def test_a_starting_worker_warms_up_below_any_job(
    empty: None, service_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that becomes ready runs the warm-up to its end, each step sent at the lowest priority; a name in
    WARM_CNNS that is no built-in is said at start and passed over."""
    tasks.send("tests.never-run", queue="warm-priority", priority=warmup.PRIORITY)
    assert [broker().llen(k) for k in tasks.queue_keys("warm-priority")] == [0, 0, 0, 1]
    broker().delete(*tasks.queue_keys("warm-priority"))

    warm_cnns(monkeypatch, "mobilenet_v3_small")
    stack = Stack(service_env, tmp_path_factory.mktemp("warm"))
    stack.start("worker", WARM_ON_START="1", WARM_CNNS='["mobilenet_v3_small", "no_such_cnn"]')
    try:
        wait_until(
            lambda: warmup.warm_specs() and not unwarmed(), 240, "the warm-up to end", 1.0, lambda: stack.log("worker")
        )
        assert "not built-ins that run at 224 px: no_such_cnn" in stack.log("worker")
    finally:
        stack.stop_all()


def test_a_worker_s_children_start_with_torch_imported_once_by_their_parent(
    service_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Before any task, every process of the pool has torch mapped: imported once by the parent before it forked,
    not by each child at its first plan."""
    stack = Stack(service_env, tmp_path_factory.mktemp("preload"))
    stack.start("worker")
    try:
        log = partial(stack.log, "worker")
        wait_until(lambda: "ready." in log(), 120, "the worker to be ready", 0.2, log)
        children = psutil.Process(stack.procs["worker"].pid).children(recursive=True)
        assert len(children) >= 2  # the pool's two, and beat's
        assert all(any("libtorch_cpu" in m.path for m in c.memory_maps()) for c in children)
    finally:
        stack.stop_all()


def test_a_step_waits_while_an_agent_here_measures(empty: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """While an agent on this host measures (on its CPU or a GPU), a step does nothing and comes back later; an agent
    elsewhere, or one idle here, does not hold it."""
    from gpu_agent import environment
    from worker.app import warm

    monkeypatch.setattr(warmup, "run_step", lambda index: pytest.fail(f"step {index} ran beside the agent"))
    beat: dict[str, Any] = {"pid": 1, "started_at": datetime.now(UTC), "instance_id": None}
    beat |= {"environment_id": environment.environment_id("cpu"), "machine_type": "local"}
    cpu, elsewhere, gpu = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    agents.beat(agent_id=cpu, host=socket.gethostname(), device="cpu", **beat)
    agents.beat(agent_id=elsewhere, host="another-host", device="cpu", **beat)
    agents.beat(agent_id=gpu, host=socket.gethostname(), device="cuda:0 (NVIDIA H100)", **beat)
    try:
        agents.set_work(agent_id=elsewhere, work={"task": "timing"})
        assert not warmup.timing_here()
        for here in (cpu, gpu):
            agents.set_work(agent_id=here, work={"task": "timing"})
            assert warmup.timing_here()
            warm(7)
            [message] = [json.loads(m) for m in broker().lrange(tasks.queue_keys("jobs")[-1], 0, -1)]
            assert message["headers"]["task"] == tasks.WARM and message["headers"]["argsrepr"] == "[7]"
            assert datetime.fromisoformat(message["headers"]["eta"]) > datetime.now(UTC)
            broker().delete(tasks.queue_keys("jobs")[-1])
            agents.set_work(agent_id=here, work=None)
        assert not warmup.timing_here()
    finally:  # no live agent left for the tests after this one
        for agent in (cpu, elsewhere, gpu):
            agents.mark_stopped(agent_id=agent, reason="test over")

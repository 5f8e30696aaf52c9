"""All-reduce measured by the agent: one process per device, DDP's bucket sizes, stored with the
environment, once per environment and process count. A CPU host runs the same path with gloo (stored as gloo); the
worker reads NCCL's rows only. No multi-GPU host is reachable here: the NCCL case is untested on real GPUs."""

from typing import Any

import pytest

from gpu_agent import allreduce_bench
from gpu_agent import app as agent
from shared.core.db import transaction
from shared.measurements import allreduce

ROWS = "SELECT a.*, e.details FROM allreduce_timings a JOIN environments e ON e.id = a.environment_id ORDER BY bytes"


def rows() -> list[dict[str, Any]]:
    """Every stored all-reduce timing with its environment's details."""
    with transaction() as cur:
        cur.execute(ROWS)
        return [dict(r) for r in cur.fetchall()]


def test_the_agent_times_all_reduce_over_processes_and_stores_it_once(clean_db: None) -> None:
    """Two gloo processes on this CPU: a row per bucket size, larger buckets slower, the rounds and environment kept;
    a second task measures nothing; NCCL readers see none of it."""
    assert agent.bench_allreduce("local") == 0  # a CPU host with nothing asked of it: no DDP to measure
    assert agent.bench_allreduce("local", cpu_processes=2) == 1
    assert agent.bench_allreduce("local", cpu_processes=2) == 0
    stored = rows()
    assert [r["bytes"] for r in stored] == list(allreduce_bench.SIZES)
    assert {(r["backend"], r["gpus"], r["machine_type"]) for r in stored} == {("gloo", 2, "local")}
    assert all(r["ms"] > 0 and len(r["stats"]["rounds_ms"][str(r["bytes"])]) == allreduce_bench.ROUNDS for r in stored)
    assert stored[-1]["ms"] > stored[0]["ms"]  # 100 MiB takes longer than 1 MiB
    assert stored[0]["details"]["torch"]
    assert allreduce.largest(machine_types=["local"]) == {}
    [gloo] = allreduce.largest(machine_types=["local"], backend="gloo").values()
    assert gloo.bytes == max(allreduce_bench.SIZES) and gloo.bus_gbs > 0


def test_gpu_counts_measured() -> None:
    """2, 4, 8 … up to every GPU of the host, and the host's own count where it is not a power of two."""
    assert allreduce_bench.gpu_counts(1) == []
    assert allreduce_bench.gpu_counts(8) == [2, 4, 8]
    assert allreduce_bench.gpu_counts(6) == [2, 4, 6]


def test_a_job_over_several_gpus_asks_the_live_agent_to_time_all_reduce(clean_db: None) -> None:
    """A live agent of p5.48xlarge and a job over 8 of its GPUs: bench_allreduce is queued for it (not waited for);
    a job on one GPU asks nothing."""
    from gpu_agent import environment, lifecycle
    from shared.core import tasks
    from tests.integration.test_reference_jobs import run
    from tests.support.jobflow import take_queued
    from tests.support.stack import broker

    lifecycle.start(machine_type=P5, device="cuda:0", environment_id=environment.environment_id("cpu"), interval_s=60)
    try:
        broker().delete(tasks.bench_queue(P5))
        one = run(cnns=["resnet18"], machines=[P5], batch_sizes=[64], gpus=1)
        assert one["status"] == "succeeded" and not queued_allreduce()
        job = run(cnns=["resnet18"], machines=[P5], batch_sizes=[64], gpus=[1, 8])
        assert job["status"] == "succeeded", job["error"]
        assert take_queued(tasks.BENCH_ALLREDUCE, P5) == {"machine_type": P5}
    finally:
        lifecycle.stop()


P5 = "p5.48xlarge"


def queued_allreduce() -> bool:
    """Whether a bench_allreduce message waits in p5's queue."""
    import json

    from tests.support.stack import broker

    return any(
        json.loads(raw)["headers"]["task"] == "gpu_agent.bench_allreduce"
        for raw in broker().lrange(f"bench.{P5}", 0, -1)
    )


def test_a_measured_all_reduce_replaces_the_modelled_one_within_the_machine(clean_db: None) -> None:
    """Timings stored for p5's 8 GPUs (as its agent would store them; a slow link, 100 MiB in 50 ms): its 8-GPU
    points say measured and wait longer on the all-reduce; its 2-GPU points, not measured, stay modelled."""
    from gpu_agent import environment
    from tests.integration.test_reference_jobs import run

    job = dict(cnns=["resnet50"], machines=[P5], batch_sizes=[64], gpus=[2, 8])
    modelled = run(**job)["result"]
    assert modelled is not None
    before = {p["gpus_used"]: p for p in modelled["predictions"]}
    assert {p["allreduce_source"] for p in before.values()} == {"modelled"}
    env = environment.environment_id("cpu")
    allreduce.save(machine_type=P5, environment_id=env, backend="nccl", gpus=8,
                   timings=[(2**20, 0.5), (100 * 2**20, 50.0)], stats={"test": "stand-in timings"})  # fmt: skip
    timed = run(**job)["result"]
    assert timed is not None
    after = {p["gpus_used"]: p for p in timed["predictions"]}
    assert after[8]["allreduce_source"] == "measured" and after[2]["allreduce_source"] == "modelled"
    assert after[8]["allreduce_ms"] > before[8]["allreduce_ms"] and after[2] == before[2]
    measured = allreduce.largest(machine_types=[P5])[(P5, 8)]
    assert measured.bytes == 100 * 2**20 and measured.bus_gbs == pytest.approx(2 * 7 / 8 * 100 * 2**20 / 0.05 / 1e9)

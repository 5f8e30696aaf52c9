"""The benchmark agent measures for real on the CPU, records OOM as data, and writes idempotently."""

import os
from typing import Any

import pytest
import torch

from gpu_agent import app as agent
from gpu_agent import layer_bench
from shared.core.errors import InvalidRequest
from shared.measurements import layers
from tests.support.agentkit import rows
from tests.support.stack import queued_tasks


def small_item() -> dict[str, Any]:
    """A real ResNet-18 layer at 32 px, registered in the database."""
    sig_id = layers.register_builtin(name="resnet18", image_size=32)[1][0]
    return {"signature_id": sig_id, **layers.specs(signature_ids=[sig_id])[sig_id], "batch_sizes": [1, 2]}


def test_layer_benchmark_is_measured_and_stored_once(clean_db: None) -> None:
    """Real timings for all three phases, the environment attached; a redelivery adds nothing."""
    item = small_item()
    assert agent.bench_layers(machine_type="local", precision="fp32", items=[item]) == 2
    stored = rows("SELECT * FROM layer_benchmarks ORDER BY batch_size")
    assert [r["batch_size"] for r in stored] == [1, 2]
    for r in stored:
        assert not r["oom"] and r["forward_ms"] > 0 and r["backward_data_ms"] > 0 and r["backward_weight_ms"] > 0
        for phase in ("forward", "backward_data", "backward_weight"):
            t = r["stats"][phase]
            # The stored figure is the minimum of the quiet rounds' medians: not below the fastest run, and
            # near the median of all runs (not always under it: busy rounds and the first, shorter round
            # count in that median but not in the figure).
            assert t["value_ms"] == r[f"{phase}_ms"] and t["min_ms"] <= t["value_ms"] <= t["median_ms"] * 1.5
            assert t["rounds"] >= 3 and t["runs"] >= t["rounds"] and t["spread"] is not None
        assert r["stats"]["window"] == [1, 2] and r["stats"]["method"] == "interleaved-rounds"
    env = rows("SELECT details FROM environments WHERE id = %s", stored[0]["environment_id"])[0]["details"]
    assert env["torch"] == torch.__version__ and env["device_type"] == "cpu"
    assert env["threads"] == torch.get_num_threads() == len(os.sched_getaffinity(0))
    assert env["timing_method"] and env["agent_version"]
    assert agent.bench_layers(machine_type="local", precision="fp32", items=[item]) == 0
    assert len(rows("SELECT id FROM layer_benchmarks")) == 2
    assert "worker.advance_jobs" in queued_tasks("jobs")


def test_out_of_memory_is_recorded_and_the_agent_goes_on(clean_db: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """An allocation failure becomes an OOM row; the next measurement works again."""
    item = small_item()
    real_randn = torch.randn

    def failing_randn(*args: Any, **kwargs: Any) -> torch.Tensor:
        if args and args[0] == 2:  # only the batch-2 input "does not fit"
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 GB")
        return real_randn(*args, **kwargs)

    # No CPU here can be made to run out of memory safely, so the allocation failure is mocked.
    monkeypatch.setattr(layer_bench.torch, "randn", failing_randn)
    agent.bench_layers(machine_type="local", precision="fp32", items=[item])
    by_bs = {r["batch_size"]: r for r in rows("SELECT * FROM layer_benchmarks")}
    assert by_bs[2]["oom"] and by_bs[2]["forward_ms"] is None and "can't allocate" in by_bs[2]["stats"]["reason"]
    assert not by_bs[1]["oom"] and by_bs[1]["forward_ms"] > 0


def test_other_failures_fail_the_task(clean_db: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure that is not OOM is not hidden as data."""

    def broken(*args: Any, **kwargs: Any) -> torch.Tensor:
        raise ValueError("bad kernel")

    monkeypatch.setattr(layer_bench.torch, "randn", broken)
    with pytest.raises(ValueError, match="bad kernel"):
        agent.bench_layers(machine_type="local", precision="fp32", items=[small_item()])
    assert rows("SELECT id FROM layer_benchmarks") == []


def test_work_for_another_machine_is_refused(clean_db: None) -> None:
    """An agent never stores timings under a machine type it is not."""
    with pytest.raises(InvalidRequest, match="g5.xlarge"):
        agent.bench_layers(machine_type="g5.xlarge", precision="fp32", items=[small_item()])


def test_whole_step_is_measured_and_stored_once(clean_db: None) -> None:
    """A full training step of a real CNN is timed and stored; measuring again adds nothing."""
    layers.register_builtin(name="squeezenet1_1", image_size=32)
    kwargs = {"machine_type": "local", "cnn": "squeezenet1_1", "image_size": 32, "optimizer": "adam"}
    assert agent.measure_steps(**kwargs, precision="fp32", batch_sizes=[2]) == 1
    assert agent.measure_steps(**kwargs, precision="fp32", batch_sizes=[2]) == 0
    (step,) = rows("SELECT * FROM step_measurements")
    assert step["step_ms"] > 0 and step["stats"]["step"]["runs"] >= 3 and step["optimizer"] == "adam"

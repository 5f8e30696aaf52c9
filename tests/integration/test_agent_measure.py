"""Agent measurement paths run in-process on the CPU: memory limits, infeasible steps, stop and resume."""

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from celery.exceptions import Reject

from gpu_agent import app as agent
from gpu_agent import environment, layer_bench, lifecycle, memory, store
from shared.cnn import step_memory
from shared.cnn import zoo as cnn_zoo
from shared.cnn.signatures import ConvSignature
from shared.core.db import transaction
from shared.core.settings import get_settings
from shared.measurements import layers
from shared.training import TrainConfig
from tests.support.agentkit import rows

Setter = Callable[..., None]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def setting(clean_db: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[Setter]:
    """Change agent settings for one test; also empties the tables only the agent writes."""
    with transaction() as cur:
        cur.execute("TRUNCATE step_failures")
    lifecycle.clear_stop()

    def put(**values: Any) -> None:
        for key, value in values.items():
            monkeypatch.setenv(key.upper(), str(value))
        get_settings.cache_clear()

    # These tests are about what is stored, not about waiting for a quiet machine to time it.
    put(bench_quiet_wait="inf")
    yield put
    lifecycle.clear_stop()
    get_settings.cache_clear()


def layer_item(batch_sizes: list[int], image_size: int = 32) -> dict[str, Any]:
    """A real ResNet-18 layer, registered, with the batch sizes to measure."""
    sig_id = layers.register_builtin(name="resnet18", image_size=image_size)[1][0]
    return {"signature_id": sig_id, **layers.specs(signature_ids=[sig_id])[sig_id], "batch_sizes": batch_sizes}


def step_args(cnn: str, image_size: int = 32) -> dict[str, Any]:
    """Arguments of a whole-step task on local for a registered CNN."""
    layers.register_builtin(name=cnn, image_size=image_size)
    return {"machine_type": "local", "cnn": cnn, "image_size": image_size, "optimizer": "sgd", "precision": "fp32"}


def test_out_of_memory_next_to_others_is_measured_again_alone(setting: Setter, monkeypatch: pytest.MonkeyPatch) -> None:
    """A point that fails to allocate while sharing a window is retried alone, and only then judged."""
    real_randn = torch.randn
    failed: list[int] = []

    def randn_failing_once(*args: Any, **kwargs: Any) -> torch.Tensor:
        if args and args[0] == 2 and not failed:  # the batch-2 input does not fit next to batch 1's tensors
            failed.append(2)
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 GB")
        return real_randn(*args, **kwargs)

    # A CPU cannot be made to run out of memory safely here, so the allocation failure is mocked.
    monkeypatch.setattr(layer_bench.torch, "randn", randn_failing_once)
    assert agent.bench_layers(machine_type="local", precision="fp32", items=[layer_item([1, 2])]) == 2
    by_bs = {r["batch_size"]: r for r in rows("SELECT * FROM layer_benchmarks")}
    assert failed == [2] and not by_bs[2]["oom"] and by_bs[2]["forward_ms"] > 0
    assert by_bs[1]["stats"]["window"] == [1] and by_bs[2]["stats"]["window"] == [2]


def test_memory_guard_records_what_would_swap_as_out_of_memory(setting: Setter) -> None:
    """On a CPU, a measurement estimated over the allowed share of RAM is refused, with the reason."""
    item = layer_item([1, 4096], image_size=224)
    sig = ConvSignature.from_json(item["spec"])
    free = memory.available_bytes(torch.device("cpu"))
    # Room for batch 1 many times over, nowhere near batch 4096 (a few GB at 224 px).
    setting(agent_memory_fraction=20 * memory.layer_bytes(sig, [1], "fp32") / free)
    agent.bench_layers(machine_type="local", precision="fp32", items=[item])
    by_bs = {r["batch_size"]: r for r in rows("SELECT * FROM layer_benchmarks")}
    assert not by_bs[1]["oom"] and by_bs[1]["forward_ms"] > 0
    assert by_bs[4096]["oom"] and by_bs[4096]["stats"]["reason"].startswith("memory guard: needs about")

    setting(agent_memory_fraction=1e-6)
    assert agent.measure_steps(**step_args("squeezenet1_1"), batch_sizes=[2]) == 1
    (step,) = rows("SELECT * FROM step_measurements")
    assert step["oom"] and step["step_ms"] is None and "memory guard" in step["stats"]["reason"]


def test_a_step_the_cnn_cannot_take_is_recorded_not_lost(setting: Setter) -> None:
    """Batch norm refuses one value per channel: that step is stored as infeasible; the task goes on."""
    args = step_args("resnet18")  # at 32 px its last feature map is 1×1
    assert agent.measure_steps(**args, batch_sizes=[1, 2]) == 2
    (failure,) = rows("SELECT * FROM step_failures")
    assert failure["batch_size"] == 1 and "Expected more than 1 value per channel" in failure["reason"]
    (step,) = rows("SELECT * FROM step_measurements")
    assert step["batch_size"] == 2 and step["step_ms"] > 0 and step["stats"]["window"] == [2]
    # Delivered again, the task measures nothing: the failure counts as done.
    assert agent.measure_steps(**args, batch_sizes=[1, 2]) == 0
    assert len(rows("SELECT id FROM step_failures")) == 1 and len(rows("SELECT id FROM step_measurements")) == 1


def stop_after_first_save(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Request a stop (as SIGTERM does) right after the first row is stored."""
    real = getattr(store, name)

    def save_then_stop(**kwargs: Any) -> None:
        real(**kwargs)
        lifecycle.request_stop()

    monkeypatch.setattr(store, name, save_then_stop)


def test_a_stop_stores_the_window_and_hands_back_the_rest(setting: Setter, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stop request ends the task after the current window, requeued; run again, it resumes."""
    setting(bench_window_points=1, bench_store_every_s=0)  # each row written as it is measured
    item = layer_item([1, 2, 3])
    stop_after_first_save(monkeypatch, "save_layers")
    with pytest.raises(Reject) as rejected:
        agent.bench_layers(machine_type="local", precision="fp32", items=[item])
    assert rejected.value.requeue
    first = rows("SELECT id, batch_size, measured_at FROM layer_benchmarks")
    assert [r["batch_size"] for r in first] == [1]
    monkeypatch.undo()
    setting(bench_window_points=1, bench_quiet_wait="inf")
    lifecycle.clear_stop()
    assert agent.bench_layers(machine_type="local", precision="fp32", items=[item]) == 2
    after = rows("SELECT id, batch_size, measured_at FROM layer_benchmarks ORDER BY batch_size")
    assert [r["batch_size"] for r in after] == [1, 2, 3] and after[0] == first[0]


def test_whole_steps_of_a_task_are_interleaved_and_resumable(setting: Setter, monkeypatch: pytest.MonkeyPatch) -> None:
    """Batch sizes of one CNN are timed together; a stop between windows loses nothing."""
    setting(bench_window_points=2)
    args = step_args("squeezenet1_1")
    stop_after_first_save(monkeypatch, "save_step")
    with pytest.raises(Reject):
        agent.measure_steps(**args, batch_sizes=[2, 3, 4])
    first = rows("SELECT * FROM step_measurements ORDER BY batch_size")
    # The window of two was finished and stored as a whole before the stop took effect.
    assert [r["batch_size"] for r in first] == [2, 3] and all(r["stats"]["window"] == [2, 3] for r in first)
    assert all(r["stats"]["step"]["rounds"] >= 3 and r["step_ms"] == r["stats"]["step"]["value_ms"] for r in first)
    assert all(r["stats"]["step"]["rewarm"] == 1 for r in first)  # each block starts with an untimed step
    monkeypatch.undo()
    setting(bench_quiet_wait="inf")
    lifecycle.clear_stop()
    assert agent.measure_steps(**args, batch_sizes=[2, 3, 4]) == 1
    assert [r["batch_size"] for r in rows("SELECT batch_size FROM step_measurements ORDER BY 1")] == [2, 3, 4]


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_a_measured_step_stores_its_peak_memory_which_the_probe_and_the_model_agree_with(
    setting: Setter, optimizer: str
) -> None:
    """The agent stores each step's allocator peak: bench/memory_probe.py, measuring the same step alone in a
    fresh process, finds the same peak; the memory model is within its largest held-out error of it. The larger
    batch, timed in the same window, counts only its own tensors, not the smaller batch's held beside it."""
    cnn, size, config = "squeezenet1_1", 64, TrainConfig(optimizer=optimizer)  # type: ignore[arg-type]
    args = step_args(cnn, size) | {"config": config.model_dump()}
    assert agent.measure_steps(**args, batch_sizes=[4, 8]) == 2
    stored = {r["batch_size"]: r for r in rows("SELECT * FROM step_measurements")}
    assert stored[4]["stats"]["window"] == [4, 8] and "peak_memory_bytes" not in stored[4]["stats"]
    work = cnn_zoo.conv_layers(cnn, size).workload
    (env,) = rows("SELECT details FROM environments WHERE id = %s", stored[4]["environment_id"])
    for batch, row in stored.items():
        probe = subprocess.run(
            [sys.executable, str(ROOT / "bench" / "memory_probe.py"), cnn, str(size), str(batch), optimizer, "fp32",
             str(env["details"]["threads"])],  # kernels keep a buffer per thread: as many as the agent ran
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        probed = json.loads(probe.stdout.strip().splitlines()[-1])["peak_bytes"]
        modelled = step_memory.step_peak(
            work, batch, optimizer=optimizer, weight_decay=config.weight_decay, precision="fp32", gpu=False
        )
        assert modelled is not None
        peak = row["peak_memory_bytes"]
        # The same quantity measured two ways: apart by no more than a tensor of this step's input batch.
        assert abs(peak - probed) <= batch * 3 * size * size * 4, (batch, peak, probed)
        assert abs(modelled.total - peak) / peak <= step_memory.CPU_HELD_OUT_MAX_ERROR, (batch, peak, modelled)
    assert stored[8]["peak_memory_bytes"] > stored[4]["peak_memory_bytes"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; this machine has none")
def test_cuda_out_of_memory_is_recorded_and_the_agent_goes_on(setting: Setter) -> None:
    """With a memory cap, a big batch really runs out of GPU memory; it is recorded and the next one works."""
    setting(agent_device="cuda")
    environment.environment_id.cache_clear()
    torch.cuda.set_per_process_memory_fraction(0.02)
    try:
        agent.bench_layers(machine_type="local", precision="fp32", items=[layer_item([4096, 1], image_size=224)])
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
        environment.environment_id.cache_clear()
    by_bs = {r["batch_size"]: r for r in rows("SELECT * FROM layer_benchmarks")}
    assert by_bs[4096]["oom"] and "out of memory" in by_bs[4096]["stats"]["reason"].lower()
    assert not by_bs[1]["oom"] and by_bs[1]["stats"]["forward"]["runs"] >= 3

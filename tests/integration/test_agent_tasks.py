"""Tasks of many signatures: what is stored read once, rows written many to a transaction, stops and failures
keeping what was measured, redeliveries measuring only what is missing; and the worker sending such tasks."""

import json
import math
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from celery.exceptions import Reject

from gpu_agent import app as agent
from gpu_agent import layer_bench, lifecycle, windows
from shared.cnn.signatures import ConvSignature
from shared.core import tasks
from shared.core.settings import get_settings
from shared.measurements import layers, ops
from shared.training import TrainConfig
from tests.support.agentkit import measured, rows, until_agent
from tests.support.jobflow import message_body
from tests.support.stack import Stack, broker, queued_tasks, settled

Setter = Callable[..., None]


@pytest.fixture
def setting(clean_db: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[Setter]:
    """Change agent settings for one test, starting from empty tables and queues."""
    lifecycle.clear_stop()

    def put(**values: Any) -> None:
        for key, value in values.items():
            monkeypatch.setenv(key.upper(), str(value))
        get_settings.cache_clear()

    put(bench_quiet_wait="inf")  # about what is stored, not about waiting for a quiet machine
    yield put
    lifecycle.clear_stop()
    get_settings.cache_clear()


def conv_items(count: int, batch_sizes: list[int], image_size: int = 32) -> list[dict[str, Any]]:
    """The first `count` conv signatures of ResNet-18, registered, each with the batch sizes to measure."""
    sig_ids = [s for s, _n in layers.register_builtin(name="resnet18", image_size=image_size)][:count]
    specs = layers.specs(signature_ids=sig_ids)
    return [{"signature_id": s, **specs[s], "batch_sizes": batch_sizes} for s in sig_ids]


def advances() -> int:
    """worker.advance_jobs messages waiting in the jobs queue."""
    return queued_tasks("jobs").count(tasks.ADVANCE_JOBS)


def timed_windows(monkeypatch: pytest.MonkeyPatch, stop_after: int | None = None) -> list[int]:
    """Count the windows timed (points in each); request a stop, as SIGTERM does, after `stop_after` of them."""
    real, timed = windows._time, []

    def counting(ready: dict[int, Any], *args: Any) -> Any:
        out = real(ready, *args)
        timed.append(len(ready))
        if stop_after is not None and len(timed) == stop_after:
            lifecycle.request_stop()
        return out

    monkeypatch.setattr(windows, "_time", counting)
    return timed


def test_a_tasks_rows_go_in_one_transaction_with_one_message_out_of_memory_among_them(
    setting: Setter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three signatures at two batch sizes, one of which runs out of memory: six rows, one write, one message."""
    setting(bench_store_every_s=60)
    real_randn = torch.randn

    def randn_failing_at_2(*args: Any, **kwargs: Any) -> torch.Tensor:
        if args and args[0] == 2:  # every batch-2 input "does not fit", alone or not
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 GB")
        return real_randn(*args, **kwargs)

    # A CPU cannot be made to run out of memory safely here, so the allocation failure is mocked.
    monkeypatch.setattr(layer_bench.torch, "randn", randn_failing_at_2)
    items = conv_items(3, [1, 2])
    assert agent.bench_layers(machine_type="local", precision="fp32", items=items) == 6
    stored = rows("SELECT signature_id, batch_size, oom, forward_ms, measured_at, stats FROM layer_benchmarks")
    assert sorted((r["signature_id"], r["batch_size"]) for r in stored) == sorted(
        (i["signature_id"], b) for i in items for b in (1, 2)
    )
    assert all(r["oom"] and r["forward_ms"] is None for r in stored if r["batch_size"] == 2)
    assert all(not r["oom"] and r["forward_ms"] > 0 for r in stored if r["batch_size"] == 1)
    assert len({r["measured_at"] for r in stored}) == 1  # one transaction (now() is its start)
    assert advances() == 1
    # Delivered again: everything is stored, nothing is measured, written or sent.
    assert agent.bench_layers(machine_type="local", precision="fp32", items=items) == 0
    assert len(rows("SELECT id FROM layer_benchmarks")) == 6 and advances() == 1


def test_progress_moves_during_a_long_task(setting: Setter) -> None:
    """Written every BENCH_STORE_EVERY_S (0: each row as measured), each write telling the worker."""
    setting(bench_store_every_s=0, bench_window_points=1)
    items = conv_items(2, [1, 2])
    assert agent.bench_layers(machine_type="local", precision="fp32", items=items) == 4
    stored = rows("SELECT measured_at FROM layer_benchmarks")
    assert len({r["measured_at"] for r in stored}) == 4 and advances() == 4


def test_a_stop_stores_what_was_measured_and_a_redelivery_measures_only_the_rest(
    setting: Setter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows kept for a later write are written at a stop; the task goes back and, delivered again, resumes."""
    setting(bench_store_every_s=60, bench_window_points=2)
    items = conv_items(2, [1, 2, 3, 4])
    timed = timed_windows(monkeypatch, stop_after=1)
    with pytest.raises(Reject) as rejected:
        agent.bench_layers(machine_type="local", precision="fp32", items=items)
    assert rejected.value.requeue and timed == [2]
    first = rows("SELECT id, signature_id, batch_size, measured_at FROM layer_benchmarks ORDER BY id")
    assert [(r["signature_id"], r["batch_size"]) for r in first] == [(items[0]["signature_id"], b) for b in (1, 2)]
    assert advances() == 1

    monkeypatch.undo()
    setting(bench_store_every_s=60, bench_window_points=2, bench_quiet_wait="inf")
    lifecycle.clear_stop()
    timed = timed_windows(monkeypatch)
    assert agent.bench_layers(machine_type="local", precision="fp32", items=items) == 6
    assert timed == [2, 2, 2]  # batch sizes 3, 4 of the first signature, then the second's two windows
    after = rows("SELECT id, signature_id, batch_size, measured_at FROM layer_benchmarks ORDER BY id")
    assert after[:2] == first and len(after) == 8


def test_a_failure_keeps_what_the_task_measured_before_it(setting: Setter, monkeypatch: pytest.MonkeyPatch) -> None:
    """A signature that raises is recorded as a failure; the signatures measured before it are stored."""
    setting(bench_store_every_s=60)
    items = conv_items(2, [1, 2])
    broken = ConvSignature.from_json(items[1]["spec"])
    real_prepare = layer_bench.prepare

    def prepare(sig: ConvSignature, *args: Any, **kwargs: Any) -> Any:
        if sig == broken:
            raise ValueError("bad kernel")
        return real_prepare(sig, *args, **kwargs)

    monkeypatch.setattr(layer_bench, "prepare", prepare)
    with pytest.raises(ValueError, match="bad kernel"):
        agent.bench_layers(machine_type="local", precision="fp32", items=items)
    stored = rows("SELECT signature_id, batch_size FROM layer_benchmarks ORDER BY batch_size")
    assert stored == [{"signature_id": items[0]["signature_id"], "batch_size": b} for b in (1, 2)]
    (failure,) = rows("SELECT signature_id, batch_sizes, error FROM layer_failures")
    assert failure == {
        "signature_id": items[1]["signature_id"],
        "batch_sizes": [1, 2],
        "error": "ValueError: bad kernel",
    }


def test_an_op_task_stores_each_signature_in_its_variant(setting: Setter) -> None:
    """Ops and the optimizer step of one task: one read, one write, the step in the optimizer's variant."""
    setting(bench_store_every_s=60)
    layers.register_builtin(name="resnet18", image_size=32)
    members = ops.members(name="resnet18", image_size=32, num_classes=1000)
    chosen = [m for m in members if m[1]["op"] == "optimizer"] + [m for m in members if m[1]["op"] == "relu"][:2]
    items = [{"signature_id": s, "hash": "", "spec": spec, "batch_sizes": [1, 2]} for s, spec, _n in chosen]
    config = TrainConfig()
    items[0]["batch_sizes"] = [0]  # the optimizer step is measured once, at batch size 0
    assert agent.bench_ops(machine_type="local", config=config.model_dump(), items=items) == 5
    stored = rows("SELECT op_signature_id, batch_size, variant, measured_at FROM op_benchmarks")
    variant = {r["op_signature_id"]: r["variant"] for r in stored}
    assert variant[chosen[0][0]] == config.optimizer_variant
    assert {variant[s] for s, _spec, _n in chosen[1:]} == {config.op_variant}
    assert len({r["measured_at"] for r in stored}) == 1 and advances() == 1
    assert agent.bench_ops(machine_type="local", config=config.model_dump(), items=items) == 0


def test_work_is_sent_in_tasks_of_several_signatures(setting: Setter) -> None:
    """BENCH_TASK_SIGNATURES signatures per task, each with all its batch sizes."""
    setting(bench_task_signatures=2)
    from worker import coverage

    sig_ids = [i["signature_id"] for i in conv_items(5, [1])]
    coverage.send_work({"local": {(s, b) for s in sig_ids for b in (1, 4)}}, "fp32")
    sent = []
    for raw in broker().lrange("bench.local", 0, -1):
        _args, kwargs, _embed = json.loads(message_body(json.loads(raw)))
        sent.append([(item["signature_id"], item["batch_sizes"]) for item in kwargs["items"]])
    assert len(sent) == math.ceil(len(sig_ids) / 2) and sorted(len(t) for t in sent) == [1, 2, 2]
    assert sorted(s for task in sent for s, _sizes in task) == sorted(sig_ids)
    assert all(sizes == [1, 4] for task in sent for _s, sizes in task)


@pytest.fixture
def stack(service_env: dict[str, str], tmp_path: Path) -> Iterator[Stack]:
    """An agent process started by the test, stopped afterwards."""
    s = Stack(service_env, tmp_path)
    s.env.update(AGENT_HEARTBEAT_S="1", BENCH_QUIET_WAIT="inf", BENCH_WINDOW_POINTS="1", BENCH_STORE_EVERY_S="60")
    yield s
    for name in list(s.procs):
        s.stop(name, signal.SIGKILL)


def test_sigterm_writes_the_rows_a_real_agent_kept_and_hands_back_the_rest(stack: Stack, clean_db: None) -> None:
    """SIGTERM to an agent keeping rows for a later write: they are written, the task goes back, the next agent
    measures only what is missing."""
    items = conv_items(4, [2, 3, 4, 5], image_size=224)
    wanted = 4 * len(items)
    tasks.send(tasks.BENCH_LAYERS, queue=tasks.bench_queue("local"), machine_type="local", precision="fp32",
               items=items)  # fmt: skip
    stack.start("agent")
    until_agent(lambda: stack.log("agent").count("measuring signature") >= 2, "a second signature begun", stack)
    assert rows("SELECT id FROM layer_benchmarks") == []  # kept for the write BENCH_STORE_EVERY_S (60 s) away
    assert stack.stop("agent") == 0
    at_exit = rows("SELECT id, signature_id, batch_size, measured_at FROM layer_benchmarks ORDER BY id")
    assert 4 <= len(at_exit) < wanted, stack.log("agent")[-3000:]
    assert queued_tasks("bench.local") == [tasks.BENCH_LAYERS]

    first_log = len(stack.log("agent"))
    stack.start("agent")
    until_agent(lambda: len(rows("SELECT id FROM layer_benchmarks")) == wanted, "all rows", stack, timeout=120)
    until_agent(lambda: settled("local"), "the task acknowledged (nothing left to write)", stack)
    final = rows("SELECT id, signature_id, batch_size, measured_at FROM layer_benchmarks ORDER BY id")
    assert final[: len(at_exit)] == at_exit and len(final) == wanted
    assert measured(stack.log("agent")[first_log:]) == wanted - len(at_exit)

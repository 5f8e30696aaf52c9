"""The agent's Celery app and tasks; start it with `python -m gpu_agent`."""

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any

from celery import signals
from celery.exceptions import Reject

from gpu_agent import (
    allreduce_bench,
    environment,
    input_bench,
    instance,
    layer_bench,
    lifecycle,
    op_bench,
    runner,
    step_bench,
    store,
)
from gpu_agent.runner import SignatureWork, TaskWork
from gpu_agent.timing import Policy
from gpu_agent.windows import Outcome
from shared.cnn.op_signatures import OPTIMIZER, OpSignature
from shared.cnn.signatures import ConvSignature
from shared.core import logs, tasks
from shared.core.errors import InvalidRequest
from shared.core.settings import get_settings
from shared.core.transient import is_transient
from shared.training import LEGACY_SGD_MOMENTUM, TrainConfig

log = logging.getLogger(__name__)
# Its in-flight messages under its machine type's own keys: its Redis user needs no access to others'.
app = tasks.make_app("traincast-agent", agent_machine_type=get_settings().agent_machine_type)
# A whole step gets this many times a layer phase's time cap: it is one long operation, not three.
STEP_CAP_FACTOR = 4
# A non-conv op (mostly memory-bound, sub-millisecond) gets this share of a layer phase's cap: it settles fast.
OP_CAP_FACTOR = 0.5


def _check_machine(machine_type: str) -> None:
    mine = get_settings().agent_machine_type
    if machine_type != mine:
        # A misrouted task must not store another machine's timings under this one.
        raise InvalidRequest(f"agent for {mine!r} received work for {machine_type!r}")


def _retrying_outages(task: str, run: Callable[[], int]) -> int:
    """Run a task; on a transient database or broker error hand it back to the queue after a pause."""
    try:
        return run()
    except Exception as exc:
        if not is_transient(exc):
            raise
        # Not the work's fault, so not a layer failure: the next delivery resumes from the stored rows.
        log.warning("%s met a transient error (%s: %s); handing it back to the queue", task, type(exc).__name__, exc)
        time.sleep(get_settings().agent_db_retry_s)
        raise Reject(f"{task}: transient error {type(exc).__name__}", requeue=True) from exc


@app.task(name=tasks.BENCH_LAYERS)
def bench_layers(machine_type: str, precision: str, items: list[dict[str, Any]], channels_last: bool = False) -> int:
    """Measure conv signatures at their batch sizes (in channels_last if asked); skip what is stored."""
    _check_machine(machine_type)
    run = partial(_bench_layers, machine_type, precision, items, channels_last)
    # A scope of its own: the signature bound per item leaves with the task, however it is called.
    with logs.context(machine_type=machine_type):
        return _retrying_outages(tasks.BENCH_LAYERS, run)


def _bench_layers(machine_type: str, precision: str, items: list[dict[str, Any]], channels_last: bool) -> int:
    dev = environment.device()
    env_id = environment.environment_id(str(dev))
    key: dict[str, Any] = {"machine_type": machine_type, "precision": precision, "environment_id": env_id}
    policy, window_points = Policy.from_settings(), get_settings().bench_window_points
    stored = store.layer_batch_sizes_done_of(
        signature_ids=[i["signature_id"] for i in items], channels_last=channels_last, **key
    )

    def prepare(item: dict[str, Any]) -> SignatureWork:
        sig_id = item["signature_id"]
        measure = partial(
            layer_bench.measure, ConvSignature.from_json(item["spec"]), precision=precision, device=dev,
            policy=policy, window_points=window_points, stop=lifecycle.stop_requested, channels_last=channels_last,
        )  # fmt: skip
        return SignatureWork(
            signature_id=sig_id, tag=sig_id, what=f"signature {sig_id}", done=stored.get(sig_id, set()),
            measure=lambda todo, save: measure(todo, save=save),
            record_failure=lambda todo, error: store.save_layer_failure(
                signature_id=sig_id, batch_sizes=todo, error=error, **key
            ),
        )  # fmt: skip

    work = TaskWork(
        prepare=prepare,
        save_many=lambda measured: store.save_layers(measured=measured, channels_last=channels_last, **key),
    )
    return runner.run_items(tasks.BENCH_LAYERS, machine_type, items, work)


@app.task(name=tasks.BENCH_OPS)
def bench_ops(machine_type: str, config: dict[str, Any], items: list[dict[str, Any]]) -> int:
    """Measure non-conv op signatures (and optimizer steps) in a training configuration; skip what is stored."""
    _check_machine(machine_type)
    train = TrainConfig.model_validate(config)
    with logs.context(machine_type=machine_type):
        return _retrying_outages(tasks.BENCH_OPS, partial(_bench_ops, machine_type, train, items))


def _bench_ops(machine_type: str, config: TrainConfig, items: list[dict[str, Any]]) -> int:
    dev = environment.device()
    env_id = environment.environment_id(str(dev))
    policy, window_points = Policy.from_settings(OP_CAP_FACTOR), get_settings().bench_window_points
    key: dict[str, Any] = {"machine_type": machine_type, "environment_id": env_id}
    # An optimizer step is stored in its own variant (the optimizer's), every other op in the op variant.
    stored = store.op_batch_sizes_done_of(
        signature_ids=[i["signature_id"] for i in items],
        variants=sorted({config.op_variant, config.optimizer_variant}),
        **key,
    )
    variants: dict[int, str] = {}  # of the signatures set up so far: what their rows are stored under

    def prepare(item: dict[str, Any]) -> SignatureWork:
        sig_id, sig = item["signature_id"], OpSignature.from_json(item["spec"])
        variant = variants[sig_id] = config.optimizer_variant if sig.op == OPTIMIZER else config.op_variant
        measure = partial(
            op_bench.measure, sig, config=config, device=dev, policy=policy, window_points=window_points,
            stop=lifecycle.stop_requested,
        )  # fmt: skip
        return SignatureWork(
            signature_id=sig_id, tag=f"op:{sig_id}", what=f"{sig.op} signature {sig_id}",
            done=stored.get((sig_id, variant), set()), measure=lambda todo, save: measure(todo, save=save),
            record_failure=lambda todo, error: store.save_op_failure(
                signature_id=sig_id, variant=variant, batch_sizes=todo, error=error, **key
            ),
            work={"op": sig.op},
        )  # fmt: skip

    work = TaskWork(
        prepare=prepare, save_many=lambda measured: store.save_ops(measured=measured, variants=variants, **key)
    )
    return runner.run_items(tasks.BENCH_OPS, machine_type, items, work)


@app.task(name=tasks.BENCH_INPUT)
def bench_input(machine_type: str) -> int:
    """Measure this host's JPEG decode and augmentation rate once per environment; 1 if it was stored."""
    _check_machine(machine_type)
    return _retrying_outages(tasks.BENCH_INPUT, partial(_bench_input, machine_type))


def _bench_input(machine_type: str) -> int:
    env_id = environment.environment_id(str(environment.device()))
    if store.input_rate_stored(machine_type=machine_type, environment_id=env_id):
        return 0
    lifecycle.set_work({"task": tasks.BENCH_INPUT, "since": datetime.now(UTC).isoformat()})
    try:
        rate = input_bench.measure(machine_type=machine_type, environment_id=env_id, stop=lifecycle.stop_requested)
    finally:
        lifecycle.set_work(None)
    store.save_input_rate(rate=rate)
    return 1


@app.task(name=tasks.BENCH_ALLREDUCE)
def bench_allreduce(machine_type: str, cpu_processes: int = 0) -> int:
    """Measure all-reduce across this host's GPUs (2, 4, 8 … of them) once per environment; GPU counts stored.

    cpu_processes: on a host without two GPUs, gloo over that many CPU processes instead (stored as gloo, which the
    worker never reads); 0: nothing to measure there.
    """
    _check_machine(machine_type)
    return _retrying_outages(tasks.BENCH_ALLREDUCE, partial(_bench_allreduce, machine_type, cpu_processes))


def _bench_allreduce(machine_type: str, cpu_processes: int) -> int:
    env_id = environment.environment_id(str(environment.device()))
    gpus = allreduce_bench.local_gpus()
    backend, counts = ("nccl", allreduce_bench.gpu_counts(gpus)) if gpus >= 2 else ("gloo", [cpu_processes])
    if backend == "gloo" and cpu_processes < 2:
        return 0
    done = store.allreduce_counts_done(machine_type=machine_type, environment_id=env_id, backend=backend)
    todo = [n for n in counts if n not in done]
    for n in todo:
        if lifecycle.stop_requested():
            break
        lifecycle.set_work({"task": tasks.BENCH_ALLREDUCE, "gpus": n, "since": datetime.now(UTC).isoformat()})
        try:
            timings = allreduce_bench.measure(world=n, backend=backend)
        finally:
            lifecycle.set_work(None)
        rounds = {str(size): each for size, _, each in timings}
        store.save_allreduce(
            machine_type=machine_type, environment_id=env_id, backend=backend, gpus=n,
            timings=[(size, ms) for size, ms, _ in timings],
            stats={"rounds_ms": rounds, **allreduce_bench.environment_note()},
        )  # fmt: skip
    return len(todo)


@app.task(name=tasks.MEASURE_STEPS)
def measure_steps(
    machine_type: str,
    cnn: str,
    image_size: int,
    optimizer: str,
    precision: str,
    batch_sizes: list[int],
    config: dict[str, Any] | None = None,
) -> int:
    """Time whole training steps of a CNN at several batch sizes; skip what is stored.

    config: a shared.training.TrainConfig; without it (a sender that predates training configurations) the step is
    what was measured then: SGD(momentum=0.9) or Adam, in the precision given.
    """
    _check_machine(machine_type)
    momentum = LEGACY_SGD_MOMENTUM if optimizer == "sgd" else 0.0
    train = TrainConfig.model_validate(config or {"optimizer": optimizer, "precision": precision, "momentum": momentum})
    run = partial(_measure_steps, machine_type, cnn, image_size, train, batch_sizes)
    return _retrying_outages(tasks.MEASURE_STEPS, run)


def _measure_steps(machine_type: str, cnn: str, image_size: int, config: TrainConfig, batch_sizes: list[int]) -> int:
    dev = environment.device()
    env_id = environment.environment_id(str(dev))
    key: dict[str, Any] = {"cnn": cnn, "machine_type": machine_type, "image_size": image_size, "config": config}
    done = store.step_batch_sizes_done(**key, environment_id=env_id)
    todo = sorted(set(batch_sizes) - done)
    if not todo:
        return 0
    written: list[int] = []

    def save(bs: int, outcome: Outcome) -> None:
        store.save_step(**key, batch_size=bs, environment_id=env_id, outcome=outcome)
        written.append(bs)

    lifecycle.set_work(
        {"task": tasks.MEASURE_STEPS, "cnn": cnn, "image_size": image_size, "batch_sizes": todo}
        | {"training": config.cost_key(), "since": datetime.now(UTC).isoformat()}
    )
    try:
        left = step_bench.measure(
            cnn,
            todo,
            image_size,
            config,
            dev,
            policy=Policy.from_settings(STEP_CAP_FACTOR),
            window_points=get_settings().bench_window_points,
            save=save,
            stop=lifecycle.stop_requested,
        )
        if left:
            runner.hand_back(tasks.MEASURE_STEPS, len(written))
    finally:
        lifecycle.set_work(None)
    return len(written)


def connect_signals() -> None:
    """Register and heartbeat once the worker is ready; turn SIGTERM/SIGINT into a stop request."""
    signals.worker_ready.connect(_on_ready, weak=False)
    signals.worker_shutting_down.connect(_on_shutting_down, weak=False)
    signals.worker_shutdown.connect(_on_shutdown, weak=False)
    signals.task_failure.connect(_on_failure, weak=False)


def _on_ready(**_: Any) -> None:
    settings = get_settings()
    dev = environment.device()
    lifecycle.start(
        machine_type=settings.agent_machine_type,
        device=str(dev),
        environment_id=environment.environment_id(str(dev)),
        interval_s=settings.agent_heartbeat_s,
    )
    instance.start()


def _on_shutting_down(**_: Any) -> None:
    # Runs inside the signal handler: only set a flag; the task acts on it between windows.
    lifecycle.request_stop()


def _on_shutdown(**_: Any) -> None:
    lifecycle.stop()


def _on_failure(sender: Any = None, exception: BaseException | None = None, **_: Any) -> None:
    lifecycle.record_error(f"{getattr(sender, 'name', sender)}: {exception}")

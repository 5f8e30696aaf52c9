"""Writing measurements: an outcome turned into its owning module's row (stored idempotently)."""

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from gpu_agent.windows import Outcome
from shared.measurements import allreduce, inputs, layers, ops, steps
from shared.training import TrainConfig

METHOD = "interleaved-rounds"
Measured = tuple[int, int, Outcome]  # (signature id, batch size, what it came to)


def stats(outcome: Outcome) -> dict[str, Any]:
    """The stats column: every phase's statistics and what it was timed with, or the reason it has none."""
    if outcome.timings is None:
        return {"reason": outcome.reason}
    return {
        **{phase: t.to_json() for phase, t in outcome.timings.items()},
        "method": METHOD,
        "window": list(outcome.window),
        **outcome.info,
    }


def layer_batch_sizes_done(
    *, signature_id: int, machine_type: str, precision: str, environment_id: int, channels_last: bool = False
) -> set[int]:
    """Batch sizes already measured for a signature in this environment (resume, don't re-measure)."""
    return layers.batch_sizes_done(
        signature_id=signature_id, machine_type=machine_type, precision=precision, environment_id=environment_id,
        channels_last=channels_last,
    )  # fmt: skip


def op_batch_sizes_done(*, signature_id: int, machine_type: str, variant: str, environment_id: int) -> set[int]:
    """Batch sizes already stored for an op signature in this variant and environment."""
    return ops.batch_sizes_done(
        signature_id=signature_id, machine_type=machine_type, variant=variant, environment_id=environment_id
    )


def op_batch_sizes_done_of(
    *, signature_ids: list[int], machine_type: str, variants: list[str], environment_id: int
) -> dict[tuple[int, str], set[int]]:
    """op_batch_sizes_done() of a task's signatures in one read: (signature id, variant) → batch sizes stored."""
    return ops.batch_sizes_done_of(
        signature_ids=signature_ids, machine_type=machine_type, variants=variants, environment_id=environment_id
    )


def save_op(
    *, signature_id: int, machine_type: str, batch_size: int, variant: str, environment_id: int, outcome: Outcome
) -> None:
    """Store one op measurement (forward and backward; the optimizer's step as forward, backward 0), OOM or reason."""
    save_ops(machine_type=machine_type, environment_id=environment_id, measured=[(signature_id, batch_size, outcome)],
             variants={signature_id: variant})  # fmt: skip


def save_ops(*, machine_type: str, environment_id: int, measured: Sequence[Measured], variants: dict[int, str]) -> None:
    """Store op measurements in one transaction; variants: each signature's (an optimizer step's differs)."""
    ops.save_many(
        machine_type=machine_type, environment_id=environment_id,
        rows=[ops.OpRow(sig, bs, variants[sig], outcome.oom, _op_ms(outcome), stats(outcome))
              for sig, bs, outcome in measured],
    )  # fmt: skip


def _op_ms(outcome: Outcome) -> tuple[float | None, float | None]:
    if outcome.timings is None:
        return (None, None)
    t = outcome.timings
    return (t["step"].value_ms, 0.0) if "step" in t else (t["forward"].value_ms, t["backward"].value_ms)


def layer_batch_sizes_done_of(
    *, signature_ids: list[int], machine_type: str, precision: str, environment_id: int, channels_last: bool = False
) -> dict[int, set[int]]:
    """layer_batch_sizes_done() of a task's signatures in one read: signature id → batch sizes stored."""
    return layers.batch_sizes_done_of(
        signature_ids=signature_ids, machine_type=machine_type, precision=precision, environment_id=environment_id,
        channels_last=channels_last,
    )  # fmt: skip


def save_layer(
    *, signature_id: int, machine_type: str, batch_size: int, precision: str, environment_id: int, outcome: Outcome,
    channels_last: bool = False,
) -> None:  # fmt: skip
    """Store one layer measurement (or its out of memory)."""
    save_layers(machine_type=machine_type, precision=precision, environment_id=environment_id,
                measured=[(signature_id, batch_size, outcome)], channels_last=channels_last)  # fmt: skip


def save_layers(
    *, machine_type: str, precision: str, environment_id: int, measured: Sequence[Measured],
    channels_last: bool = False,
) -> None:  # fmt: skip
    """Store layer measurements (or their out of memory) in one transaction."""
    rows = []
    for sig, bs, outcome in measured:
        if outcome.infeasible:
            raise ValueError(f"a layer is measured or out of memory, never infeasible: {outcome.reason}")
        ms: tuple[float | None, float | None, float | None] = (None, None, None)
        if outcome.timings is not None:
            t = outcome.timings
            ms = (t["forward"].value_ms, t["backward_data"].value_ms, t["backward_weight"].value_ms)
        rows.append(layers.LayerRow(sig, bs, outcome.oom, ms, stats(outcome)))
    layers.save_many(
        machine_type=machine_type, precision=precision, channels_last=channels_last, environment_id=environment_id,
        rows=rows,
    )  # fmt: skip


def step_batch_sizes_done(
    *, cnn: str, machine_type: str, image_size: int, config: TrainConfig, environment_id: int
) -> set[int]:
    """Batch sizes whose whole step is stored in this environment and configuration, measured or infeasible."""
    return steps.batch_sizes_done(
        cnn=cnn, machine_type=machine_type, image_size=image_size, config=config, environment_id=environment_id
    )


def save_step(
    *, cnn: str, machine_type: str, batch_size: int, image_size: int, config: TrainConfig, environment_id: int,
    outcome: Outcome,
) -> None:  # fmt: skip
    """Store one whole-step measurement with its measured peak memory, its out of memory, or why the CNN cannot
    take the step."""
    if outcome.infeasible:
        steps.save_failure(
            cnn=cnn, machine_type=machine_type, batch_size=batch_size, image_size=image_size, config=config,
            environment_id=environment_id, reason=outcome.reason,
        )  # fmt: skip
        return
    info = dict(outcome.info)
    peak = info.pop("peak_memory_bytes", None) if outcome.timings else None  # its own column, not in stats
    steps.save(
        cnn=cnn, machine_type=machine_type, batch_size=batch_size, image_size=image_size, config=config,
        environment_id=environment_id, oom=outcome.oom,
        step_ms=outcome.timings["step"].value_ms if outcome.timings else None,
        stats=stats(replace(outcome, info=info)), peak_memory_bytes=peak,
    )  # fmt: skip


def save_layer_failure(
    *, signature_id: int, machine_type: str, precision: str, environment_id: int, batch_sizes: list[int], error: str
) -> None:
    """Record that measuring a signature raised, so the worker can fail the jobs waiting for it."""
    layers.save_failure(
        signature_id=signature_id, machine_type=machine_type, precision=precision, environment_id=environment_id,
        batch_sizes=batch_sizes, error=error,
    )  # fmt: skip


def save_op_failure(
    *, signature_id: int, machine_type: str, variant: str, environment_id: int, batch_sizes: list[int], error: str
) -> None:
    """Record that measuring an op signature raised, so the worker can fail the jobs waiting for it."""
    ops.save_failure(
        signature_id=signature_id, machine_type=machine_type, variant=variant, environment_id=environment_id,
        batch_sizes=batch_sizes, error=error,
    )  # fmt: skip


def input_rate_stored(*, machine_type: str, environment_id: int) -> bool:
    """Whether this environment's input-pipeline rate is stored for the machine type."""
    return inputs.stored(machine_type=machine_type, environment_id=environment_id)


def save_input_rate(*, rate: inputs.InputRate) -> None:
    """Store an input-pipeline measurement (once per machine type and environment)."""
    inputs.save(rate=rate)


def allreduce_counts_done(*, machine_type: str, environment_id: int, backend: str) -> set[int]:
    """GPU counts whose all-reduce is stored for this environment."""
    return allreduce.gpu_counts_done(machine_type=machine_type, environment_id=environment_id, backend=backend)


def save_allreduce(
    *, machine_type: str, environment_id: int, backend: str, gpus: int, timings: list[tuple[int, float]],
    stats: dict[str, Any],
) -> None:  # fmt: skip
    """Store one GPU count's all-reduce timings."""
    allreduce.save(machine_type=machine_type, environment_id=environment_id, backend=backend, gpus=gpus,
                   timings=timings, stats=stats)  # fmt: skip

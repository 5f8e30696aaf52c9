"""Warm-up: extract the built-in CNNs and predict their reference convs on every GPU type before a job asks.

On a new install the first large job otherwise does both itself (31 CNNs on 8 GPU types: ~20 s on 2 cores, against
~1 s once they are stored). It stores exactly what a job would (layers.register_all; the reference model's conv
store, one row per conv, GPU and kernel precision), so a job reads whatever is done and computes the rest, and a
warm-up stopped half-way resumes where it stopped. A worker that becomes ready sends step 0 (worker/app.py); each step
is a few seconds of work and sends the next at the lowest priority, so jobs never queue behind the warm-up; while an
agent on the same host measures (`local` calibrating), the step waits instead.
"""

import argparse
import logging
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg2.errors
import psycopg2.extras

from prediction import reference
from prediction.reference import GpuSpecs, ReferenceModel
from prediction.reference.steps import kernel_precision
from shared import agents, machine_types
from shared.cnn import builtins
from shared.cnn import registry as cnns
from shared.core.db import transaction
from shared.core.settings import get_settings
from shared.core.transient import is_transient
from shared.measurements import layers
from worker import reference_store

log = logging.getLogger(__name__)

# What a job asks unless it says otherwise (shared/jobs/request.py): 224 px, each CNN's own classes, batch 1-256
# (the page's range). Jobs at other sizes or classes are not warmed: they extract and predict on first use.
IMAGE_SIZE = 224
MAX_BATCH = 256
# Every training configuration's convs run in one of these (fp32 and tf32; AMP fp16 and bf16): default first.
KERNEL_PRECISIONS = tuple(dict.fromkeys(kernel_precision(p) for p in ("fp32", "amp_fp16")))
EXTRACT_PER_STEP = 6  # CNNs read a step (~0.3 s each on the meta device)
PREDICT_PER_CALL = 64  # convs a LightGBM call predicts at all 256 batch sizes (~60 MB of features)
STEP_S = 2.0  # a step's work: a job that finds both worker children busy waits at most about this long
PRIORITY = 9  # the lowest: a job's messages (priority 0) are all taken first
YIELD_S = 5.0  # how long a step waits for an agent on this host to finish what it measures


@dataclass(frozen=True)
class Step:
    """One step of the warm-up: read some CNNs, or predict every warmed conv on one GPU in one kernel precision."""

    cnns: tuple[str, ...] = ()
    gpu: GpuSpecs | None = None
    precision: str = ""


def names() -> list[str]:
    """The CNNs warmed: WARM_CNNS, or every built-in that runs at IMAGE_SIZE."""
    wanted = get_settings().warm_cnns or list(builtins.names())
    return [n for n in wanted if builtins.get(n) is not None and builtins.refusal(n, IMAGE_SIZE) is None]


def gpus() -> list[GpuSpecs]:
    """Each distinct GPU the reference predictor answers among the machine types (catalog and users'), in order."""
    seen: dict[GpuSpecs, None] = {}
    for info in machine_types.list_all():
        if machine_types.reference_can_answer(info):
            seen.setdefault(GpuSpecs.from_row(info).filled(), None)
    return list(seen)


def plan(cnn_names: Sequence[str], gpu_specs: Sequence[GpuSpecs]) -> list[Step]:
    """The steps in order: every CNN read first (a job needs its layers before any prediction), then each GPU in
    the default precision, then the rest."""
    reads = [Step(cnns=tuple(cnn_names[i : i + EXTRACT_PER_STEP])) for i in range(0, len(cnn_names), EXTRACT_PER_STEP)]
    return reads + [Step(gpu=g, precision=p) for p in KERNEL_PRECISIONS for g in gpu_specs]


def timing_here() -> bool:
    """Whether an agent on this host is measuring now: its timings are measurements (a busy core beside a CPU agent
    costs it its quiet blocks, and `make run` its calibration minutes; a GPU's launch-bound steps are host time), so
    the warm-up waits."""
    host = socket.gethostname()
    listed = agents.list_all(alive_after_s=get_settings().agent_alive_after_s)
    return any(a["alive"] and a["current_work"] and a["host"] == host for a in listed)


# Several workers starting at once each send step 0: a step one of them is doing, the others skip.
TRY_STEP_LOCK = "SELECT pg_try_advisory_xact_lock(%s, %s) AS mine"
# The whole warm-up in one process waits instead: a worker holds a step for one piece of work (about STEP_S) at a
# time, and the piece after it could wait minutes behind a calibration that starts once this process is done.
STEP_LOCK = "SELECT pg_advisory_xact_lock(%s, %s)"
LOCK_WAIT = "SET LOCAL lock_timeout = '60s'"
STEP_LOCK_CLASS = 16


def run_step(index: int, *, wait: bool = False) -> int | None:
    """Do step `index` of the plan as it reads now, for about STEP_S; the step to do next (this one again while it
    has work left), or None when there is no such step (the warm-up is done). wait: a step another process holds is
    waited for (up to a minute), then its rest done here, instead of passed over.

    A step that fails is logged and passed (a job does that work itself); PostgreSQL unreachable ends the warm-up.
    """
    steps = plan(names(), gpus())
    if index >= len(steps):
        return None
    try:
        with transaction() as cur:  # the lock lasts as long as the step
            if not _lock_step(cur, index, wait=wait):
                return index + 1
            try:
                return index if _do(steps[index]) else index + 1
            except Exception as exc:
                if is_transient(exc):
                    raise
                log.exception("warm-up step %d of %d failed: passed over", index, len(steps))
                return index + 1
    except psycopg2.errors.LockNotAvailable:
        log.warning("warm-up step %d of %d: held elsewhere for over a minute, passed over", index, len(steps))
        return index + 1


def _lock_step(cur: psycopg2.extras.RealDictCursor, index: int, *, wait: bool) -> bool:
    """Whether this transaction now holds step `index` (wait: after waiting for its holder; LockNotAvailable past
    LOCK_WAIT)."""
    if wait:
        cur.execute(LOCK_WAIT)
        cur.execute(STEP_LOCK, (STEP_LOCK_CLASS, index))
        return True
    cur.execute(TRY_STEP_LOCK, (STEP_LOCK_CLASS, index))
    row = cur.fetchone()
    return bool(row and row["mine"])


def _do(step: Step) -> bool:
    """One step's work for about STEP_S; whether some is left."""
    started = time.monotonic()
    if step.cnns:
        for i, name in enumerate(step.cnns):  # each read is stored: a step done again finds them in a query each
            layers.register_all(names=[name], image_size=IMAGE_SIZE)
            if time.monotonic() - started > STEP_S and i + 1 < len(step.cnns):
                return True
        return False
    assert step.gpu is not None
    done, left = predict(reference_store.attached(reference.load()), step.gpu, step.precision, seconds=STEP_S)
    if done:
        log.info("warm-up: %d reference convs predicted on %s (%s), %d left", done, step.gpu.name, step.precision, left)
    return left > 0


def warm_specs() -> list[Mapping[str, Any]]:
    """The distinct conv specs of the warmed CNNs, as stored (a CNN not read yet has none)."""
    classes = {n: cnns.variant_classes(n, None) for n in names()}
    unique: dict[int, Mapping[str, Any]] = {}
    for members, _work in layers.variants(classes=classes, image_size=IMAGE_SIZE).values():
        for member in members:
            unique.setdefault(member.signature_id, member.spec)
    return list(unique.values())


def predict(model: ReferenceModel, gpu: GpuSpecs, precision: str, *, seconds: float | None = None) -> tuple[int, int]:
    """Predict, and store, the warmed convs this GPU and precision lack at batch sizes 1-MAX_BATCH, for about
    `seconds` (None: all; at least one call): (how many were, how many are left)."""
    specs = warm_specs()
    names_of = [model.stored_name(spec, gpu, precision) for spec in specs]
    held = reference_store.complete(names_of, up_to=MAX_BATCH)
    todo = [s for s, name in zip(specs, names_of, strict=True) if name not in held]
    sizes = list(range(1, MAX_BATCH + 1))
    started, done = time.monotonic(), 0
    while done < len(todo) and (not done or seconds is None or time.monotonic() - started < seconds):
        chunk = todo[done : done + PREDICT_PER_CALL]
        model.predict_convs(specs=chunk, batch_sizes=sizes, gpu=gpu, precision=precision)
        done += len(chunk)
    return done, len(todo) - done


def warm(*, yielding: bool = False) -> int:
    """Every step in this process, each to its end when this returns (one a worker holds is waited for, then
    finished here); how many steps ran (a step past STEP_S runs again). For operators, benches and scripts/run.sh
    (`python -m worker.warmup`). yielding: before each step, wait while an agent on this host measures, as the
    worker's steps do."""
    index: int | None = 0
    ran = 0
    while index is not None:
        while yielding and timing_here():
            time.sleep(YIELD_S)
        index = run_step(index, wait=True)
        ran += 1
    return ran - 1


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m worker.warmup [--if-enabled]`: the whole warm-up here, beside the workers' own steps (a step a
    worker holds is waited for and finished here; a worker passes over one this process holds)."""
    parser = argparse.ArgumentParser(prog="python -m worker.warmup", description=main.__doc__)
    parser.add_argument("--if-enabled", action="store_true", help="nothing when WARM_ON_START is off")
    args = parser.parse_args(argv)
    if args.if_enabled and not get_settings().warm_on_start:
        print("warm-up: off (WARM_ON_START)")
        return 0
    started = time.perf_counter()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    steps = warm(yielding=True)
    print(f"warm-up: {steps} steps in {time.perf_counter() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

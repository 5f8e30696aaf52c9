"""How fast a job on GPU types nobody measured is answered by the reference predictor, in-process.

Runs the worker's own planning and assembly (the same functions the Celery task calls) on a scratch
database, warm (CNNs read and the model loaded once first), and compares each job with the baseline
every job pays before it predicts anything: reading its CNNs into conv signatures and workload.
Writes the "Reference job speed" section of docs/PERFORMANCE.md.

    .venv/bin/python bench/reference_jobs.py [--repeat 3]
"""

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CNNS = ["resnet50", "vgg16", "mobilenet_v3_large"]
# One machine type per GPU model a user compares first, across the three clouds.
TYPICAL = ["g4dn.xlarge", "g2-standard-8", "g5.xlarge", "n1-standard-8-v100x1", "Standard_NC24ads_A100_v4",
           "a3-highgpu-1g"]  # fmt: skip
TYPICAL_SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256]


def main() -> int:
    """Time the baseline and two reference jobs; print and record the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    name = f"traincast_bench_{uuid.uuid4().hex[:8]}"
    os.environ["DATABASE_URL"] = f"postgresql://postgres@127.0.0.1:5432/{name}"
    from prediction import reference
    from shared import jobs, machine_types
    from shared.core.migrate import migrate
    from shared.jobs.request import JobRequest
    from shared.measurements import layers
    from worker import planning

    migrate()
    try:
        gpu_types = [m["name"] for m in machine_types.list_all() if m["gpu"]]
        reference.load()
        layers.register(name=CNNS[0], image_size=224)  # torch and torchvision imported, as in a running worker

        def read_cnns() -> None:
            for cnn in CNNS:
                layers.register(name=cnn, image_size=224)

        def job(machine_types: list[str], sizes: list[int] | dict[str, int]) -> tuple[float, int, float]:
            request = JobRequest.model_validate({"cnns": CNNS, "machines": machine_types, "batch_sizes": sizes})
            row, _ = jobs.create(request=request)
            started = time.perf_counter()
            planning.plan_job(row["id"])
            elapsed = time.perf_counter() - started
            done = jobs.get(job_id=row["id"])
            assert done["status"] == "succeeded" and done["result"] is not None, done["error"]
            return elapsed, len(done["result"]["predictions"]), len(json.dumps(done["result"])) / 1e6

        baseline = _median(args.repeat, lambda: (_timed(read_cnns), 0, 0.0))[1:]
        typical_first, *typical = _median(args.repeat, lambda: job(TYPICAL, TYPICAL_SIZES))
        everything_first, *everything = _median(args.repeat, lambda: job(gpu_types, {"min": 1, "max": 256}))
    finally:
        _drop(name)
    rows: list[tuple[Any, ...]] = [
        ("baseline: register the 3 CNNs (every job does; stored already, as in a running service)", None, *baseline),
        (f"3 CNNs x {len(TYPICAL)} GPU types x {len(TYPICAL_SIZES)} batch sizes", typical_first, *typical),
        (f"3 CNNs x all {len(gpu_types)} GPU types x batch 1-256", everything_first, *everything),
    ]
    table = [f"| job | first run s | seconds (median of {args.repeat}) | x baseline | points | result MB |",
             "|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for label, first, seconds, points, mb in rows:
        cold = f"{first:.2f}" if first is not None else "-"
        table.append(
            f"| {label} | {cold} | {seconds:.3f} | {seconds / baseline[0]:.0f} | {points or '-'} | {mb or '-'} |"
        )
    body = "\n".join(
        [
            "Command: `.venv/bin/python bench/reference_jobs.py` (in-process planning and assembly, warm, on a "
            "scratch database; seconds from the job's planning to its stored result, no agent and no fleet).",
            "",
            *table,
            "",
            "Nothing is measured in these jobs: every point is a reference prediction. The largest job is the "
            "issue's acceptance case. Its first run predicts every conv of each GPU model with LightGBM (machine "
            "types with the same GPU share it) and stores them (`reference_conv_times`); later runs read the "
            "process's caches (conv times, and whole steps in `worker/step_cache.py`), so their time goes to "
            "building, checking and storing the tens of MB of points.",
        ]
    )
    print(body)
    from bench.perf_doc import write_section

    write_section("Reference job speed", body)
    return 0


def _timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _median(repeat: int, run: Callable[[], tuple[float, int, float]]) -> tuple[float, float, int, float]:
    """(first run's seconds, median seconds of all runs, points, result MB)."""
    results = [run() for _ in range(repeat)]
    seconds = statistics.median(r[0] for r in results)
    return results[0][0], seconds, results[-1][1], round(results[-1][2], 1)


def _drop(name: str) -> None:
    from shared.core.db import connect

    conn = connect("postgresql://postgres@127.0.0.1:5432/postgres")
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    conn.close()


if __name__ == "__main__":
    sys.exit(main())

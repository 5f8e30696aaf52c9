"""Where a large cached job's time goes, stage by stage, in one process: `python bench/assembly_stages.py`.

bench/service.py times the job end to end through the real processes; this runs the same 63,488-point job (31 CNNs
× 8 GPU types × batch 1–256, every point a reference answer) in this process on a scratch database, first to warm the
caches (the CNNs' extractions and the reference conv predictions), then RUNS times, each stage timed with
perf_counter by wrapping the function that does it. Besides the worker's part it times what follows it: reading the
stored points back as GET does (their JSON text, never parsed by the API) and parsing them as a client does (orjson,
the cyclic collector paused, as the CLI). The baseline in the same run: the small job (resnet18, one type, 3 batch
sizes) planned and assembled the same way.
"""

import argparse
import collections
import functools
import importlib
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RUNS = 5
# (module, attribute, label): the stages of worker/assemble.py's result() and the finish around it, each patched
# where its caller looks it up.
STAGES = (
    ("worker.assemble", "gather", "1 gather"),
    ("worker.estimate", "Reference.points", "2 estimate (reference points)"),
    ("prediction.layouts", "spread", "3 layouts (8-GPU DDP on p4d, p5)"),
    ("prediction.memory_model", "annotate", "3 memory"),
    ("worker.assemble", "best_of", "4 best choices"),
    ("worker.decisions", "decide", "4 decisions"),
    ("worker.planning", "check_result", "Result check (a sample)"),
    ("shared.jobs.predictions", "store", "store the points (render + COPY)"),
)


def wrap(timings: collections.defaultdict[str, float]) -> None:
    """Time each stage's function into `timings` (seconds, summed over its calls)."""
    for module, attribute, label in STAGES:
        *owners, name = attribute.split(".")
        target: Any = importlib.import_module(module)
        for owner in owners:
            target = getattr(target, owner)
        original: Callable[..., Any] = getattr(target, name)

        def timed(*args: Any, _f: Callable[..., Any] = original, _l: str = label, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return _f(*args, **kwargs)
            finally:
                timings[_l] += time.perf_counter() - started

        setattr(target, name, functools.wraps(original)(timed))


def one(body: dict[str, Any], timings: collections.defaultdict[str, float]) -> dict[str, float]:
    """Plan and assemble one job in this process; read its points back and parse them."""
    import orjson

    from shared import jobs
    from shared.core import collector
    from shared.jobs import predictions
    from shared.jobs.request import JobRequest
    from worker import planning

    timings.clear()
    job, _ = jobs.create(request=JobRequest.model_validate(body))
    job_id = uuid.UUID(str(job["id"]))
    started = time.perf_counter()
    planning.plan_job(job_id)
    planned = time.perf_counter()
    parts, total = predictions.chunks(job_id=job_id)
    read = time.perf_counter()
    with collector.paused():
        points = orjson.loads(b"".join(parts))
    parsed = time.perf_counter()
    assert len(points) == total, (len(points), total)
    return {
        **timings,
        "worker: plan_job in all": planned - started,
        "read the stored points (as GET)": read - planned,
        "client: parse": parsed - read,
        "points": float(total),
        "bytes": float(sum(map(len, parts))),
    }


def main() -> int:
    """Warm, time RUNS large jobs and the small one, print and record."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    from tests.support.services import fresh_database, server_urls

    admin_db, redis_url = server_urls()
    with fresh_database(admin_db) as db_url:
        os.environ.update(DATABASE_URL=db_url, REDIS_URL=redis_url)
        from shared.core.settings import get_settings

        get_settings.cache_clear()
        from bench.service import SMALL, setup

        _key, cnns, gpus = setup(db_url)
        large = {"cnns": cnns, "machines": gpus[:8], "batch_sizes": {"min": 1, "max": 256}}
        timings: collections.defaultdict[str, float] = collections.defaultdict(float)
        wrap(timings)
        warm_s = time.perf_counter()
        one(large, timings)
        one(SMALL, timings)
        warm_s = time.perf_counter() - warm_s
        runs = [one(large, timings) for _ in range(args.runs)]
        small = [one(SMALL, timings)["worker: plan_job in all"] for _ in range(args.runs)]
    body = report(runs, small, warm_s, args.runs)
    print(body)
    if not args.no_write:
        from bench.perf_doc import write_section

        write_section("Service speed: the large job's stages (bench/assembly_stages.py)", body)
    return 0


def report(runs: list[dict[str, float]], small: list[float], warm_s: float, n: int) -> str:
    """The section: median seconds per stage, its share of the worker's part, and the bytes per point."""
    med = {k: statistics.median(r.get(k, 0.0) for r in runs) for k in runs[0]}
    worker = med["worker: plan_job in all"]
    path = worker + med["read the stored points (as GET)"] + med["client: parse"]
    points, size = int(med["points"]), med["bytes"]
    lines = [
        f"Command: `.venv/bin/python bench/assembly_stages.py` ({n} runs after a warm-up of {warm_s:.0f} s; medians; "
        f"{os.cpu_count()} cores). One process, a scratch database: {points:,} points (31 CNNs x 8 GPU types x batch "
        f"1-256, reference answers), {size / 1e6:.1f} MB of JSON ({size / points:.0f} bytes a point). Stages are timed "
        "by wrapping the function that does each; the rest of plan_job is planning, locks and the commit.",
        "",
        "| stage | s | share of the worker's part |",
        "|---|---:|---:|",
    ]
    for _module, _name, label in STAGES:
        lines.append(f"| {label} | {med.get(label, 0.0):.3f} | {med.get(label, 0.0) / worker:.0%} |")
    lines += [
        f"| **worker: plan_job in all** | **{worker:.3f}** | 100% |",
        f"| read the stored points (as GET) | {med['read the stored points (as GET)']:.3f} | |",
        f"| client: parse (orjson) | {med['client: parse']:.3f} | |",
        "",
        f"Baseline, same run: the small job (resnet18 x g5.xlarge x 3 batch sizes) planned and assembled the same way, "
        f"median {statistics.median(small) * 1000:.1f} ms; the large job is {worker / statistics.median(small):.0f}x "
        f"that for {points // 3:,}x the points.",
        "",
        f"The worker's part, reading the points back and a client's parse come to {path:.2f} s before any HTTP, "
        f"polling or second process, {path:.2f}x the end-to-end goal of 1 s p95 (bench/service.py) on their own. Every "
        "stage after the estimate handles one Python dict per point; what scales with the bytes (store, read, parse) "
        "is about half of it.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

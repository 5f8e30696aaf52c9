"""What a new worker spends on its first jobs: `python bench/worker_start.py`.

A worker's pool children (two, as `make up` and compose start it) each read a CNN they plan with torch and torchvision.
The worker now imports both once, in the parent before it forks (worker/app.py import_the_tracer); the baseline, in
the same run, is the same worker with that import left to each child. Each run, on a scratch database and Redis db
emptied first (so every CNN is read afresh): a real API and a new worker, two jobs sent at once (two CNNs each, on a
GPU type: reference answers, no agent), both followed to their end; then the CPU seconds of the worker's processes
(parent and pool children) and their proportional memory (PSS, shared pages split between the processes
that map them). The two kinds of worker are started in turn, RUNS times each.
"""

import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RUNS = 3
JOBS = (("resnet18", "mobilenet_v2"), ("vgg11", "densenet121"))


def tree(pid: int) -> tuple[float, float]:
    """(CPU seconds, PSS MiB) of a process and its descendants, now."""
    import psutil

    root = psutil.Process(pid)
    procs = [root, *root.children(recursive=True)]
    cpu = sum(sum(p.cpu_times()[:2]) for p in procs)  # user + system
    return cpu, sum(p.memory_full_info().pss for p in procs) / 2**20


def one(command: list[str], url: str, key: str, log: Path) -> dict[str, float]:
    """A new worker, two jobs at once to their end: wall seconds from its start, its processes' CPU and PSS."""
    import httpx

    from tests.integration.conftest import clean
    from tests.support.wait import job_finished

    clean()
    started = time.perf_counter()
    with log.open("wb") as out:
        proc = subprocess.Popen(command, cwd=ROOT, env=os.environ, stdout=out, stderr=out)
    http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
    try:
        body: dict[str, Any] = {"machines": ["g5.xlarge"], "batch_sizes": [8, 16], "image_size": 64}
        ids = [http.post("/v1/jobs", json=body | {"cnns": list(c)}).json()["id"] for c in JOBS]
        for job_id in ids:

            def get(j: str = job_id) -> dict[str, Any]:
                answer: dict[str, Any] = http.get(f"/v1/jobs/{j}").json()
                return answer

            job = job_finished(get, job_id, 300, log.read_text, 0.1)
            if job["status"] != "succeeded":
                raise RuntimeError(f"job {job_id}: {job['status']}; worker log: {log.read_text()[-2000:]}")
        wall = time.perf_counter() - started
        cpu, pss = tree(proc.pid)
    finally:
        http.close()
        proc.terminate()
        proc.wait(60)
    return {"wall": wall, "cpu": cpu, "pss": pss}


def main() -> int:
    from bench.perf_doc import ratio_row, write_section
    from shared import keys
    from shared.core import tasks
    from shared.core.migrate import migrate
    from shared.core.settings import get_settings
    from tests.support.services import fresh_database, fresh_redis_db, server_urls
    from tests.support.stack import Stack

    admin_db, redis_server = server_urls()
    runs: dict[str, list[dict[str, float]]] = {"parent": [], "children": []}
    with fresh_database(admin_db) as db, fresh_redis_db(redis_server) as redis, tempfile.TemporaryDirectory() as logs:
        os.environ.update({"DATABASE_URL": db, "REDIS_URL": redis, "WARM_ON_START": "0"})
        get_settings.cache_clear()
        migrate(db)
        _row, key = keys.create(name="bench", scope="admin", rate_per_s=1e6, max_unfinished_jobs=1000,
                                bench_seconds_per_day=1e9)  # fmt: skip
        os.environ["TRAINCAST_API_KEY"] = key
        api = Stack({}, Path(logs))
        api.start("api")
        api.wait_ready()
        argv = ["worker", "-Q", "jobs", *tasks.WORKER_FLAGS, "--concurrency", "2", "--loglevel", "INFO"]
        # The baseline: the same worker with the parent's import of torch and torchvision disconnected.
        each_child = (
            "import worker.app as a; from celery.signals import worker_init; "
            f"worker_init.disconnect(a.import_the_tracer); a.app.worker_main({argv!r})"
        )
        celery = str(Path(sys.executable).parent / "celery")
        commands = {"parent": [celery, "-A", "worker.app", *argv], "children": [sys.executable, "-c", each_child]}
        try:
            for i in range(2 * RUNS):
                kind = "parent" if i % 2 == 0 else "children"
                runs[kind].append(one(commands[kind], api.url, key, Path(logs) / f"worker{i}.log"))
        finally:
            api.stop_all()
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("wall", "cpu", "pss")} for k, v in runs.items()}
    p, c = med["parent"], med["children"]
    body = "\n".join([
        f"`.venv/bin/python bench/worker_start.py` on {platform.node()} ({os.cpu_count()} cores), "
        f"{time.strftime('%Y-%m-%d')}: a new worker (`--concurrency 2`) and two jobs sent at once "
        f"({' and '.join('+'.join(j) for j in JOBS)} on g5.xlarge, batch 8 and 16, 64 px: reference answers), "
        f"medians of {RUNS} runs each, on emptied tables.",
        "",
        "| what | torch imported by the parent (now) | by each child (baseline, same run) | ratio |",
        "|---|---:|---:|---:|",
        ratio_row("the worker's CPU seconds (parent and children)", p["cpu"], c["cpu"], 1),
        ratio_row("their memory, PSS MiB", p["pss"], c["pss"], 0),
        ratio_row("seconds from the worker's start to both jobs' end", p["wall"], c["wall"], 1),
    ])  # fmt: skip
    print(body)
    write_section("Worker start (bench/worker_start.py)", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How fast the running service answers cached jobs over HTTP, each figure beside its baseline in the same run.

Starts a real stack on a scratch database and a Redis server of its own, as `make up` runs it (uvicorn API, a Celery
worker `-Q jobs --concurrency 2`; no beat and no agent: nothing here needs measuring), plus a baseline worker
running a no-op task with a Redis result backend on the same broker. It warms the caches (the CNNs' layers
registered by a first job each), then times, with clients polling GET /v1/jobs/{id} every --poll-ms:

- a small cached job (resnet18, 3 batch sizes) sequentially: submit → succeeded → result fetched (p50/p95);
- the same job from 8 concurrent clients, jobs/s beside a no-op Celery round trip from 8 clients (sent, its
  result awaited) on the same Redis;
- a large cached job (31 built-in CNNs x 8 GPU machine types x batch sizes 1-256 = 63,488 points) end to end,
  p95 of --large-runs, with the worker processes' peak memory (PSS: the parent imports torch before its pool
  forks, so RSS counts the pages the children share with it once per process);
- how both grow: points per job 1 → 100,000 and concurrent clients 1 → 32.

The small job runs on a GPU machine type answered by the reference predictor (g5.xlarge), not on `local`:
calibrating `local` takes minutes of agent benchmarks on 2 cores, too slow for a bench. Every point of every
job here is a reference prediction; nothing is measured. Writes the "Service speed" section of
docs/PERFORMANCE.md (--label names the code measured, e.g. "before the pool and vectorised assembly").

    .venv/bin/python bench/service.py [--quick] [--wait 10] [--label TEXT] [--poll-ms 20] [--large-only] [--json F]
"""

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

NOOP_TASK = "bench.noop"
NOOP_QUEUE = "bench.noop"
SMALL: dict[str, Any] = {"cnns": ["resnet18"], "machines": ["g5.xlarge"], "batch_sizes": [16, 32, 64]}
EXTRA_CNNS = ("resnet152", "densenet161")  # with calibration/run.py's full set: 31 CNNs
GPU_TYPES = 8
TERMINAL = ("succeeded", "failed", "canceled")


def parse(content: bytes) -> dict[str, Any]:
    """An answer parsed as the CLI parses it (cli/client.py)."""
    from cli.client import parse as cli_parse

    return cli_parse(content)


def noop_app() -> Any:
    """The baseline's Celery app: our delivery settings, plus a result backend so a client can await the result."""
    from shared.core import tasks
    from shared.core.settings import get_settings

    app = tasks.make_app("bench-noop")
    app.conf.update(result_backend=get_settings().redis_url, task_ignore_result=False, task_default_queue=NOOP_QUEUE)
    app.task(name=NOOP_TASK)(noop)
    return app


def noop() -> None:
    """The baseline's task: does nothing."""


if os.environ.get("BENCH_NOOP_WORKER") == "1":  # `celery -A bench.service:app worker` in the baseline's process
    app = noop_app()


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of values, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Stack:
    """The API, the jobs worker and the no-op worker as real processes on loopback, stopped by close()."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        from tests.support.stack import free_port

        self.url = f"http://127.0.0.1:{free_port()}"
        self.env, self.logs = env, logs
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        bindir = Path(sys.executable).parent
        port = self.url.rsplit(":", 1)[1]
        celery = [str(bindir / "celery"), "-A"]
        from api import server

        self._start(
            "api",
            server.command(str(bindir / "uvicorn"), host="127.0.0.1", port=port),
        )
        from shared.core.tasks import WORKER_FLAGS

        pool = [*WORKER_FLAGS, "--concurrency", "2"]
        self.worker_command = [*celery, "worker.app", "worker", "-Q", "jobs", *pool, "-l", "INFO"]
        self._start("worker", self.worker_command)
        noop = [*celery, "bench.service:app", "worker", "-Q", NOOP_QUEUE, *pool, "-l", "WARNING"]
        self._start("noop", noop, BENCH_NOOP_WORKER="1")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            dead = [name for name, proc in self.procs.items() if proc.poll() is not None]
            if dead:
                self.close()
                raise RuntimeError(f"{', '.join(dead)} exited; see {logs}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.close()
        raise RuntimeError(f"API not ready; see {logs}/api.log")

    def _start(self, name: str, command: list[str], **extra: str) -> None:
        log = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process
        self.procs[name] = subprocess.Popen(
            command, cwd=ROOT, env={**self.env, **extra}, stdout=log, stderr=log, start_new_session=True
        )

    def new_worker(self) -> None:
        """Stop the jobs worker and start another (new processes: nothing cached in memory); back when it is ready."""
        old = self.procs["worker"]
        old.terminate()
        old.wait(60)
        log = self.logs / "worker.log"
        seen = log.read_text(errors="replace").count("ready.")
        self._start("worker", self.worker_command)
        deadline = time.monotonic() + 120
        while log.read_text(errors="replace").count("ready.") <= seen:
            if time.monotonic() > deadline or self.procs["worker"].poll() is not None:
                raise RuntimeError(f"the new worker did not become ready; see {log}")
            time.sleep(0.2)

    def close(self) -> None:
        """SIGTERM every process (a Celery worker's pool with it), then SIGKILL what is left after 30 s."""
        for proc in self.procs.values():
            proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()

    def worker_memory(self, proportional: bool = False) -> tuple[int, int]:
        """Bytes the jobs worker's processes hold together, and the largest one's: resident (RSS), or with
        proportional their PSS (pages shared between them split, not counted in each: ~4 ms a process to read)."""
        import psutil

        try:
            main = psutil.Process(self.procs["worker"].pid)
            procs = (main, *main.children(recursive=True))
            sizes = [p.memory_full_info().pss if proportional else p.memory_info().rss for p in procs]
        except psutil.Error:
            return 0, 0
        return sum(sizes), max(sizes)


class PeakMemory:
    """Samples the worker's RSS every 50 ms in a thread while in use, and its PSS every PSS_EVERY samples (reading
    PSS walks every mapping: at 50 ms it would take a quarter of a core from what is timed)."""

    PSS_EVERY = 10

    def __init__(self, stack: Stack) -> None:
        self.stack, self.total, self.largest, self.pss = stack, 0, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        sample = 0
        while not self._stop.wait(0.05):
            total, largest = self.stack.worker_memory()
            self.total, self.largest = max(self.total, total), max(self.largest, largest)
            sample += 1
            if sample % self.PSS_EVERY == 0:
                self.pss = max(self.pss, self.stack.worker_memory(proportional=True)[0])

    def __enter__(self) -> "PeakMemory":
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.pss = max(self.pss, self.stack.worker_memory(proportional=True)[0])


LAST = {"job": ""}  # the newest job run_job saw succeed
WAIT = {"s": 0.0}  # --wait: seconds each GET asks the API to hold its answer until the job ends (0: plain polls)


def run_job(client: httpx.Client, body: dict[str, Any], poll_s: float, timeout: float = 600) -> tuple[float, int]:
    """Submit a job, poll it until it ends; seconds from submission to the result read, and its points."""
    started = time.perf_counter()
    answer = client.post("/v1/jobs", json=body)
    assert answer.status_code == 202, answer.text
    job_id = answer.json()["id"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = client.get(f"/v1/jobs/{job_id}", params={"wait": WAIT["s"]} if WAIT["s"] else None)
        job = parse(got.content)  # as the CLI parses an answer
        if job["status"] in TERMINAL:
            elapsed = time.perf_counter() - started
            assert job["status"] == "succeeded", job.get("error")
            LAST["job"] = job_id
            return elapsed, len(job["result"]["predictions"])
        time.sleep(poll_s)
    raise AssertionError(f"job {job_id} did not finish in {timeout} s")


def in_parallel(clients: int, each: int, one: Callable[[int], float]) -> tuple[float, list[float]]:
    """`one(client)` `each` times in each of `clients` threads released together: wall seconds and every latency."""
    start, latencies, errors = threading.Barrier(clients + 1), [], []  # type: ignore[var-annotated]

    def loop(i: int) -> None:
        start.wait()
        try:
            for _ in range(each):
                latencies.append(one(i))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    start.wait()
    began = time.perf_counter()
    for t in threads:
        t.join(900)
    if errors:
        raise errors[0]
    return time.perf_counter() - began, latencies


def noop_round_trips(clients: int, each: int) -> float:
    """No-op tasks per second, sent and their result awaited, from `clients` threads (a Celery app each)."""
    apps = [noop_app() for _ in range(clients)]
    for a in apps:
        a.send_task(NOOP_TASK, queue=NOOP_QUEUE).get(timeout=60)  # connections opened before the clock starts

    def one(i: int) -> float:
        began = time.perf_counter()
        apps[i].send_task(NOOP_TASK, queue=NOOP_QUEUE).get(timeout=60)
        return time.perf_counter() - began

    wall, _ = in_parallel(clients, each, one)
    for a in apps:
        a.close()
    return clients * each / wall


def jobs_per_s(http: list[httpx.Client], clients: int, each: int, poll_s: float) -> tuple[float, list[float]]:
    """Small jobs per second from `clients` concurrent clients, and their latencies."""
    wall, latencies = in_parallel(clients, each, lambda i: run_job(http[i], SMALL, poll_s)[0])
    return clients * each / wall, latencies


def ladder(cnns: list[str], gpus: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """Jobs of 1 to ~100,000 points: (label, request)."""
    return [
        ("1", {"cnns": cnns[:1], "machines": gpus[:1], "batch_sizes": [32]}),
        ("100", {"cnns": cnns[:1], "machines": gpus[:4], "batch_sizes": {"min": 1, "max": 25}}),
        ("1k", {"cnns": cnns[:4], "machines": gpus[:8], "batch_sizes": {"min": 1, "max": 31}}),
        ("10k", {"cnns": cnns, "machines": gpus[:8], "batch_sizes": {"min": 1, "max": 40}}),
        ("63k", {"cnns": cnns, "machines": gpus[:8], "batch_sizes": {"min": 1, "max": 256}}),
        # Under the API's default 100,000 points a job.
        ("95k", {"cnns": cnns, "machines": gpus[:12], "batch_sizes": {"min": 1, "max": 256}}),
    ]


@contextmanager
def private_redis(logs: Path) -> Iterator[str]:
    """A Redis server of this run's own on loopback: no other stack's worker can take (or send) its messages."""
    from tests.support.stack import free_port

    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=open(logs / "redis.log", "ab"), stderr=subprocess.STDOUT,  # noqa: SIM115 - closed with the process
    )  # fmt: skip
    url = f"redis://127.0.0.1:{port}/0"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                redis.Redis.from_url(url).ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.1)
        yield url
    finally:
        server.terminate()
        server.wait(30)


def setup(db_url: str) -> tuple[str, list[str], list[str]]:
    """Migrate the scratch database; a bench key with no practical rate or job limit, the CNNs and GPU types."""
    from calibration.run import FULL_CNNS
    from shared import keys, machine_types
    from shared.core.migrate import migrate

    migrate(db_url)
    _row, key = keys.create(name="bench", scope="submit", rate_per_s=1e6, max_unfinished_jobs=10_000)
    seen: dict[str, str] = {}
    for m in machine_types.list_all():  # one machine type per GPU model, cheapest first within a provider
        if m["gpu"] and m["gpu"] not in seen.values():
            seen[m["name"]] = m["gpu"]
    gpus = list(seen)
    return key, [*FULL_CNNS, *EXTRA_CNNS], [SMALL["machines"][0], *[g for g in gpus if g != SMALL["machines"][0]]]


def main() -> int:
    """Start the stack, warm it, time everything, print and record."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs, no 100k-point job, clients up to 8")
    parser.add_argument("--label", default="", help="what code was measured, shown in the section")
    parser.add_argument("--poll-ms", type=float, default=20.0)
    parser.add_argument("--wait", type=float, default=0.0, help="long polls: GET /v1/jobs/{id}?wait=S (0: none)")
    parser.add_argument(
        "--large-only",
        action="store_true",
        help="the large job (as many runs as a full run) and its result's fetch, printed",
    )
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--json", type=Path, help="also save the raw figures here")
    args = parser.parse_args()
    # A SIGTERM (timeout, Ctrl-C's cousin) unwinds like an exception, so the stack and scratch database go too.
    signal.signal(signal.SIGTERM, lambda *_a: sys.exit(143))
    poll_s, WAIT["s"] = args.poll_ms / 1000, args.wait
    from tests.support.services import fresh_database, server_urls

    admin_db, _redis = server_urls()
    logs = Path(os.environ.get("TMPDIR", "/tmp")) / f"traincast-bench-service-{os.getpid()}"
    logs.mkdir(parents=True, exist_ok=True)
    with fresh_database(admin_db) as db_url, private_redis(logs) as redis_url:
        os.environ.update(DATABASE_URL=db_url, REDIS_URL=redis_url)
        from shared.core.settings import get_settings

        get_settings.cache_clear()
        key, cnns, gpus = setup(db_url)
        # No warm-up chain beside the timed jobs: the bench warms the stack itself, job by job (measure()).
        env = {**os.environ, "LOG_FORMAT": "json", "PYTHONPATH": str(ROOT), "WARM_ON_START": "0"}
        stack = Stack(env, logs)
        try:
            out = measure(stack, key, cnns, gpus, args)
        finally:
            stack.close()
    if args.json:
        args.json.write_text(json.dumps(out))
    if args.large_only:
        large = out["points"][0]
        print(f"{large[1]} points: p95 {percentile(large[2], 0.95):.2f} s of "
              + ", ".join(f"{t:.2f}" for t in large[2]) + " s; the stored result fetched alone (3 GETs): "
              + ", ".join(f"{t:.2f} s" for t in out["fetch"]))  # fmt: skip
        return 0
    body = report(out, args, poll_s)
    print(body)
    if not args.no_write:
        from bench.perf_doc import write_section

        write_section("Service speed (bench/service.py)" + (f", {args.label}" if args.label else ""), body)
    return 0


def measure(stack: Stack, key: str, cnns: list[str], gpus: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """Every figure of the run."""
    poll_s = args.poll_ms / 1000
    # Jobs per concurrency step in all (split between its clients), so 32 clients take no longer than 1.
    seq_n, per_step, noop_each, large_runs = (20, 16, 50, 2) if args.quick else (40, 32, 200, 5)
    client_steps: tuple[int, ...] = (1, 4, 8) if args.quick else (1, 2, 4, 8, 16, 32)
    headers = {"Authorization": f"Bearer {key}"}
    http = [httpx.Client(base_url=stack.url, headers=headers, timeout=120) for _ in range(max(client_steps))]
    out: dict[str, Any] = {"cnns": len(cnns), "gpus": gpus[:GPU_TYPES]}
    steps = ladder(cnns, gpus) if not args.quick else ladder(cnns, gpus)[:5]
    if args.large_only:
        steps = [s for s in steps if s[0] == "63k"]
    warm = time.perf_counter()
    # Every CNN registered and every GPU type's model loaded, in each of the worker's two children (whichever is
    # free takes a task, so the two jobs of a pair run at once).
    # A cached job is one whose layers are registered and whose reference conv predictions exist: the widest job's
    # batch sizes (1-256 on every GPU type) computes them all once.
    everything = {"cnns": cnns, "machines": gpus[:12], "batch_sizes": {"min": 1, "max": 256}}
    for body in (SMALL, everything):
        in_parallel(2, 1, lambda _i, body=body: run_job(http[_i], body, 0.2)[0])  # type: ignore[misc]
    out["warm_s"] = time.perf_counter() - warm
    print(f"warmed in {out['warm_s']:.0f} s", flush=True)
    if args.large_only:
        client_steps, seq_n = (), 1  # the large job as many times as in a full run
    for _ in range(5):
        run_job(http[0], SMALL, poll_s)
    noop_round_trips(1, 20)
    out["small_seq"] = [run_job(http[0], SMALL, poll_s)[0] for _ in range(seq_n)]
    out["noop_seq"] = noop_round_trips(1, noop_each)
    out["clients"] = {}
    for clients in client_steps:
        noop = noop_round_trips(clients, noop_each)
        rate, lat = jobs_per_s(http, clients, max(1, per_step // clients), poll_s)
        out["clients"][clients] = (rate, noop, lat)
        print(f"{clients} clients: {rate:.1f} jobs/s, no-op {noop:.0f}/s, p95 {percentile(lat, 0.95) * 1000:.0f} ms",
              flush=True)  # fmt: skip
    if not args.large_only:
        # Where 8 clients' jobs spend the machine: CPU per process kind and PostgreSQL's transactions, per job.
        from bench.cpu_split import CpuSplit

        each = 10 if args.quick else 30
        with CpuSplit(os.environ["DATABASE_URL"]) as split:
            jobs_per_s(http, 8, each, poll_s)
        out["split"] = split.per_job(8 * each)
    large_body = dict(steps).get("63k")
    if large_body:
        # A worker process that has never answered it: the reference conv predictions come from PostgreSQL
        # (stored by the warm-up's processes), the rest is computed as in any new process.
        stack.new_worker()
        out["new_process_large"] = run_job(http[0], large_body, poll_s)[0]
        print(f"63,488 points in a new worker process: {out['new_process_large']:.2f} s", flush=True)
    out["points"] = []
    for label, body in steps:
        runs = large_runs if label == "63k" else (1 if args.quick else 3)
        with PeakMemory(stack) as peak:
            times = [run_job(http[0], body, poll_s) for _ in range(runs)]
        seconds = [t for t, _n in times]
        out["points"].append((label, times[0][1], seconds, peak.total, peak.largest, peak.pss))
        if label == "63k":  # reading a stored large result alone: the API's share of the end-to-end time
            url = f"/v1/jobs/{LAST['job']}"
            out["fetch"] = [_timed(lambda url=url: http[0].get(url).raise_for_status()) for _ in range(3)]  # type: ignore[misc]
        print(f"{times[0][1]} points: p95 {percentile(seconds, 0.95):.2f} s,"
              f" worker peak PSS {peak.pss / 2**20:.0f} MiB", flush=True)  # fmt: skip
    for c in http:
        c.close()
    return out


def _timed(fn: Callable[[], object]) -> float:
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def report(out: dict[str, Any], args: argparse.Namespace, poll_s: float) -> str:
    """The section's Markdown."""
    ms = [s * 1000 for s in out["small_seq"]]
    rate8, noop8, lat8 = out["clients"].get(8, (0.0, 0.0, [0.0]))
    rows = [
        "| what | figure | baseline (same run) | ratio | goal |",
        "|---|---:|---:|---:|---|",
        f"| small job, sequential: p50 / p95 submit→result | {percentile(ms, 0.5):.0f} / {percentile(ms, 0.95):.0f} ms"
        f" | no-op round trip {1000 / out['noop_seq']:.1f} ms | {percentile(ms, 0.5) * out['noop_seq'] / 1000:.0f}×"
        " | p95 ≤ 150 ms |",
        f"| small job, 8 clients | {rate8:.1f} jobs/s (p95 {percentile(lat8, 0.95) * 1000:.0f} ms) |"
        f" no-op {noop8:.0f}/s | {rate8 / noop8:.3f}× | ≥ 0.25× |",
    ]
    large = next(p for p in out["points"] if p[0] == "63k")
    rows.append(
        f"| large job ({large[1]:,} points), {len(large[2])} runs: p95 | {percentile(large[2], 0.95):.2f} s"
        f" (worker peak PSS {large[5] / 2**20:.0f} MiB; RSS {large[3] / 2**20:.0f} MiB summed over its processes,"
        f" the largest {large[4] / 2**20:.0f} MiB) |"
        f" small job p50 {percentile(ms, 0.5):.0f} ms | {percentile(large[2], 0.95) * 1000 / percentile(ms, 0.5):.0f}×"
        " | p95 ≤ 1 s |"
    )
    if "new_process_large" in out:
        rows.append(
            f"| the large job, first in a new worker process (reference conv predictions read from PostgreSQL) |"
            f" {out['new_process_large']:.2f} s | in a warm process, p50 {percentile(large[2], 0.5):.2f} s |"
            f" {out['new_process_large'] / percentile(large[2], 0.5):.2f}× | |"
        )
    if "fetch" in out:
        fetch = sorted(out["fetch"])
        rows.append(
            f"| its stored result fetched alone (GET of the finished job, median of {len(fetch)}) |"
            f" {fetch[len(fetch) // 2]:.2f} s | the whole job p50 {percentile(large[2], 0.5):.2f} s |"
            f" {fetch[len(fetch) // 2] / percentile(large[2], 0.5):.2f}× | |"
        )
    growth = [
        "| points | runs | p50 s | p95 s | s per 1k points | worker peak PSS MiB |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for _label, n, seconds, _rss, _largest, pss in out["points"]:
        growth.append(f"| {n:,} | {len(seconds)} | {percentile(seconds, 0.5):.2f} | {percentile(seconds, 0.95):.2f} |"
                      f" {percentile(seconds, 0.5) / n * 1000:.3f} | {pss / 2**20:.0f} |")  # fmt: skip
    conc = ["| clients | jobs/s | no-op/s | ratio | job p50 ms | job p95 ms |", "|---:|---:|---:|---:|---:|---:|"]
    for clients, (rate, noop, lat) in out["clients"].items():
        conc.append(f"| {clients} | {rate:.1f} | {noop:.0f} | {rate / noop:.3f} | {percentile(lat, 0.5) * 1000:.0f} |"
                    f" {percentile(lat, 0.95) * 1000:.0f} |")  # fmt: skip
    split = []
    if "split" in out:
        stats, cores = out["split"]["stats"], out["split"]["cores"]
        split = [
            "", "Where 8 clients' small jobs spend the machine (CPU ms per job by process kind, and how many cores it"
            f" kept busy; PostgreSQL per job: {stats['transactions']:.1f} transactions, {stats['rows_written']:.1f}"
            f" rows written, {stats['tup_fetched']:.0f} rows fetched):", "",
            "| process | CPU ms per job | cores busy |", "|---|---:|---:|",
            *(f"| {kind} | {ms:.2f} | {cores[kind]:.2f} |" for kind, ms in out["split"]["cpu_ms"].items()),
        ]  # fmt: skip
    flags = (" --quick" if args.quick else "") + (f" --wait {args.wait:g}" if args.wait else "")
    command = f"`.venv/bin/python bench/service.py{flags}`"
    return "\n".join([
        f"Command: {command}" + (f" — {args.label}" if args.label else "") + f" ({platform.node()}, "
        f"{os.cpu_count()} cores; clients poll every {poll_s * 1000:.0f} ms"
        + (f", each GET held by the API up to {args.wait:g} s until the job ends" if args.wait else "") + "). "
        "A real stack on a scratch database: "
        "uvicorn API and a Celery worker `--concurrency 2` as `make up` runs them, and a no-op Celery worker "
        "(`--concurrency 2`, result in Redis) on the same Redis as the baseline. The small job is resnet18 × "
        f"g5.xlarge × 3 batch sizes; the large one {out['cnns']} CNNs × {len(out['gpus'])} GPU types "
        f"({', '.join(out['gpus'])}) × batch 1–256. Every point is a reference prediction (no agent; calibrating "
        "`local` takes too long for a bench). Caches warm: the small job and one of every CNN × GPU type ran in "
        f"both worker children first ({out['warm_s']:.0f} s).",
        "", *rows, "", "How a job grows with its points (one client):", "", *growth, "",
        "How the small job grows with concurrent clients (each client submits, then polls):", "", *conc, *split,
    ])  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())

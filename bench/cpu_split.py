"""Where a stretch of load spends the machine's CPU, per process kind, and PostgreSQL's transactions meanwhile.

Used by bench/service.py around its 8-client run: the CPU seconds each kind of process used (the API, the jobs
worker and its children, the no-op worker, PostgreSQL's backends, Redis, the kernel's writeback threads) per job,
and the transactions and rows PostgreSQL counted for the scratch database per job.
"""

import time
from types import TracebackType
from typing import Any

import psutil
import psycopg2

STATS = """
SELECT xact_commit + xact_rollback AS transactions, tup_inserted + tup_updated AS rows_written, tup_fetched
FROM pg_stat_database WHERE datname = current_database()"""
KINDS = (
    ("API (uvicorn)", "uvicorn"),
    ("jobs worker (Celery)", "worker.app"),
    ("no-op worker", "bench.service:app"),
    ("PostgreSQL", "postgres"),
    ("Redis", "redis-server"),
    ("kernel writeback", "writeback"),
    ("clients (this bench)", "bench/service.py"),
)


def _kind(proc: psutil.Process) -> str:
    line = " ".join(proc.info["cmdline"] or []) or proc.info["name"] or ""
    return next((label for label, marker in KINDS if marker in line), "other")


def _cpu() -> dict[tuple[int, str], float]:
    out = {}
    for proc in psutil.process_iter(["name", "cmdline"]):
        try:
            times = proc.cpu_times()
            out[(proc.pid, _kind(proc))] = times.user + times.system
        except psutil.Error:
            continue
    return out


def _stats(db_url: str) -> dict[str, int]:
    conn = psycopg2.connect(db_url)
    try:
        with conn.cursor() as cur:
            cur.execute(STATS)
            row = cur.fetchone()
            assert row is not None
            return dict(zip(("transactions", "rows_written", "tup_fetched"), map(int, row), strict=True))
    finally:
        conn.close()


class CpuSplit:
    """`with CpuSplit(db_url) as split: ...` then `split.per_job(n)`: CPU ms by kind and PostgreSQL counts per job."""

    def __init__(self, db_url: str) -> None:
        self.db_url = db_url
        self.cpu: dict[str, float] = {}
        self.stats: dict[str, int] = {}
        self.wall = 0.0

    def __enter__(self) -> "CpuSplit":
        self._cpu0, self._stats0, self._t0 = _cpu(), _stats(self.db_url), time.perf_counter()
        return self

    def __exit__(self, *_exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.wall = time.perf_counter() - self._t0
        time.sleep(0.6)  # PostgreSQL's statistics reach pg_stat_database within 500 ms
        after, stats = _cpu(), _stats(self.db_url)
        for key, seconds in after.items():
            self.cpu[key[1]] = self.cpu.get(key[1], 0.0) + seconds - self._cpu0.get(key, 0.0)
        self.stats = {k: v - self._stats0[k] for k, v in stats.items()}

    def per_job(self, jobs: int) -> dict[str, Any]:
        """CPU ms per job by kind (with its share of the wall time's cores), and counts per job."""
        return {
            "cpu_ms": {k: v / jobs * 1000 for k, v in sorted(self.cpu.items(), key=lambda kv: -kv[1]) if v > 0},
            "cores": {k: v / self.wall for k, v in self.cpu.items()},
            "stats": {k: v / jobs for k, v in self.stats.items()},
        }

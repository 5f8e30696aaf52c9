"""What GET /metrics reports, in Prometheus's text format.

Figures of the whole service (jobs, layer benchmarks, queues, agents, the fleet) are read from PostgreSQL and
Redis at scrape time, so they are right whichever API replica is scraped and wherever workers and agents run;
every replica reports the same values (aggregate them with max, not sum). One snapshot serves the scrapes of
METRICS_CACHE_S. The HTTP request figures (api/observe.py) are this process's own counters: sum them over
replicas.
"""

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg2
import redis
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from fleet import service as fleet
from shared import agents, jobs, machine_types
from shared.core import db, tasks
from shared.core.errors import ServiceUnavailable
from shared.core.settings import get_settings
from shared.measurements import layers

log = logging.getLogger(__name__)
REGISTRY = CollectorRegistry(auto_describe=True)
STATUSES = tuple(jobs.JobStatus)


@dataclass
class Snapshot:
    """The service's figures at one moment."""

    statuses: dict[str, dict[str, Any]]
    pending: dict[str, int]
    layer_totals: list[dict[str, Any]]
    queues: dict[str, int]
    alive: dict[str, int]
    instances: list[dict[str, Any]]
    taken_at: float = field(default_factory=time.monotonic)


class Reader:
    """One PostgreSQL connection and one Redis client kept for scrapes (a new connection costs more than the reads)."""

    def __init__(self) -> None:
        self._conn: Any = None
        self._redis: redis.Redis | None = None

    @contextmanager
    def cursor(self) -> Iterator[db.Cursor]:
        """A cursor in a transaction ended after the reads, so the next scrape sees new rows; reconnects when broken."""
        if self._conn is None or self._conn.closed:
            self._conn = db.connect()
        try:
            with self._conn.cursor(cursor_factory=db.Cursor) as cur:
                yield cur
            self._conn.rollback()
        except psycopg2.Error as exc:
            self._conn.close()
            if isinstance(exc, psycopg2.OperationalError):
                raise ServiceUnavailable(f"PostgreSQL went away during a scrape: {str(exc).strip()[:200]}") from exc
            raise

    def snapshot(self) -> Snapshot:
        """Read every figure: PostgreSQL in one transaction, then Redis in one round trip."""
        settings = get_settings()
        with self.cursor() as cur:
            statuses, pending = jobs.status_durations(cur), jobs.pending_benchmarks(cur)
            totals, alive = (
                layers.benchmark_totals(cur),
                agents.alive_counts(cur, alive_after_s=settings.agent_alive_after_s),
            )
            instances, names = fleet.running_instances(cur), machine_types.names(cur)
        if self._redis is None:
            self._redis = tasks.redis_client(socket_connect_timeout=2, socket_timeout=2)
        try:
            queues = tasks.queue_depths([settings.jobs_queue] + [tasks.bench_queue(n) for n in names], self._redis)
        except redis.RedisError as exc:
            raise ServiceUnavailable(f"Redis unreachable: {str(exc)[:200]}") from exc
        return Snapshot(statuses, pending, totals, queues, alive, instances)


class ServiceCollector(Collector):
    """Yields the service's metrics from a snapshot a background thread renews every METRICS_CACHE_S.

    The thread starts at the first scrape (an API nobody scrapes reads nothing), which reads at once; a
    scrape then only formats the snapshot. A snapshot older than STALE_AFTER refreshes is read again by the
    scrape itself, so a database that stays down answers 503 rather than old figures. METRICS_CACHE_S=0:
    every scrape reads.
    """

    STALE_AFTER = 5

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._reader = Reader()
        self._refresher: threading.Thread | None = None
        self.read_seconds = 0.0

    def _read(self) -> Snapshot:
        started = time.monotonic()
        with self._lock:  # one reader at a time: the Reader's connection is not shared
            self._snapshot = self._reader.snapshot()
        self.read_seconds = time.monotonic() - started
        return self._snapshot

    def _refresh(self, every_s: float) -> None:
        while True:
            time.sleep(every_s)
            try:
                self._read()
            except Exception:  # PostgreSQL or Redis away: the next scrape reads itself and answers 503
                log.warning("could not refresh the metrics snapshot", exc_info=True)

    def snapshot(self) -> Snapshot:
        """The current snapshot; read now when there is none, it is stale, or caching is off."""
        every_s = get_settings().metrics_cache_s
        snap = self._snapshot
        if snap is None or every_s <= 0 or time.monotonic() - snap.taken_at > every_s * self.STALE_AFTER:
            snap = self._read()
        if every_s > 0 and self._refresher is None:
            self._refresher = threading.Thread(target=self._refresh, args=(every_s,), name="metrics", daemon=True)
            self._refresher.start()
        return snap

    def describe(self) -> list[Metric]:
        """Nothing up front: the registry must not read the database when it is made."""
        return []

    def collect(self) -> Iterator[Metric]:
        """Every metric of the service."""
        snap = self.snapshot()
        yield from _jobs(snap)
        yield from _benchmarks(snap)
        queued = GaugeMetricFamily("traincast_queue_depth", "Messages waiting in a Celery queue", labels=["queue"])
        for queue, depth in sorted(snap.queues.items()):
            queued.add_metric([queue], depth)
        yield queued
        alive = GaugeMetricFamily(
            "traincast_agents_alive", "Benchmark agents alive (recent heartbeat, not stopped)", labels=["machine_type"]
        )
        for machine_type, n in sorted(snap.alive.items()):
            alive.add_metric([machine_type], n)
        yield alive
        yield from _fleet(snap)
        age = GaugeMetricFamily(
            "traincast_metrics_snapshot_age_seconds", "Age of the figures above (read from PostgreSQL and Redis)"
        )
        age.add_metric([], time.monotonic() - snap.taken_at)
        yield age
        took = GaugeMetricFamily("traincast_metrics_snapshot_read_seconds", "Time the last read of those figures took")
        took.add_metric([], self.read_seconds)
        yield took


def _jobs(snap: Snapshot) -> Iterator[Metric]:
    by_status = GaugeMetricFamily("traincast_jobs", "Jobs stored, by status", labels=["status"])
    rows = snap.statuses
    for status in STATUSES:
        by_status.add_metric([status], int(rows[status]["n"]) if status in rows else 0)
    yield by_status
    durations = HistogramMetricFamily(
        "traincast_job_duration_seconds",
        "Finished jobs' time from submission to their end, by how they ended (every job stored)",
        labels=["status"],
    )
    for status in (s for s in STATUSES if s.terminal):
        row = rows.get(status, {"finished": 0, "seconds": 0, "buckets": [0] * len(jobs.DURATION_BUCKETS_S)})
        buckets = [(str(float(b)), int(n)) for b, n in zip(jobs.DURATION_BUCKETS_S, row["buckets"], strict=True)]
        durations.add_metric([status], [*buckets, ("+Inf", int(row["finished"]))], float(row["seconds"]))
    yield durations


def _benchmarks(snap: Snapshot) -> Iterator[Metric]:
    done = GaugeMetricFamily(
        "traincast_layer_benchmarks_done", "Layer benchmark rows stored, per machine type", labels=["machine_type"]
    )
    seconds = CounterMetricFamily(
        "traincast_benchmark_seconds",
        "Seconds agents spent in the timed runs of the stored layer benchmarks, per machine type",
        labels=["machine_type"],
    )
    for row in sorted(snap.layer_totals, key=lambda r: r["machine_type"]):
        done.add_metric([row["machine_type"]], int(row["n"]))
        seconds.add_metric([row["machine_type"]], float(row["seconds"]))
    yield done
    yield seconds
    pending = GaugeMetricFamily(
        "traincast_layer_benchmarks_pending",
        "Layer benchmarks running jobs wait for, per machine type (summed over jobs)",
        labels=["machine_type"],
    )
    for machine_type, n in sorted(snap.pending.items()):
        pending.add_metric([machine_type], n)
    yield pending


def _fleet(snap: Snapshot) -> Iterator[Metric]:
    count = GaugeMetricFamily("traincast_fleet_instances", "Running fleet instances", labels=["machine_type", "market"])
    cost = GaugeMetricFamily(
        "traincast_fleet_usd_per_hour", "What the running fleet instances cost per hour", labels=["machine_type"]
    )
    per_type: dict[tuple[str, str], int] = {}
    usd: dict[str, float] = {}
    for i in snap.instances:
        key = (i["machine_type"], i["market"] or "unknown")
        per_type[key] = per_type.get(key, 0) + 1
        usd[i["machine_type"]] = usd.get(i["machine_type"], 0.0) + float(i["price_usd_per_hour"] or 0)
    for (machine_type, market), n in sorted(per_type.items()):
        count.add_metric([machine_type, market], n)
    for machine_type, price in sorted(usd.items()):
        cost.add_metric([machine_type], price)
    yield count
    yield cost


COLLECTOR = ServiceCollector()
REGISTRY.register(COLLECTOR)

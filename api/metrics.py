"""What GET /metrics reports, in Prometheus's text format.

Figures of the whole service (jobs, layer benchmarks, queues, agents, the fleet) are read from PostgreSQL and
Redis at scrape time, so they are right whichever API replica is scraped and wherever workers and agents run;
every replica reports the same values (aggregate them with max, not sum). One snapshot serves the scrapes of
METRICS_CACHE_S. The HTTP request figures (api/observe.py) are this process's own counters: sum them over
replicas.
"""

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from shared import agents, fleet, jobs, layers, machines, tasks
from shared.settings import get_settings

REGISTRY = CollectorRegistry(auto_describe=True)
STATUSES = ("queued", "running", "succeeded", "failed", "canceled")


@dataclass
class Snapshot:
    """The service's figures at one moment."""

    statuses: list[dict[str, Any]]
    pending: dict[str, int]
    layer_totals: list[dict[str, Any]]
    queues: dict[str, int]
    alive: dict[str, int]
    instances: list[dict[str, Any]]
    taken_at: float = field(default_factory=time.monotonic)


def read_snapshot() -> Snapshot:
    """Read every figure from PostgreSQL and Redis."""
    settings = get_settings()
    queues = [settings.jobs_queue] + [tasks.bench_queue(m["name"]) for m in machines.list_all()]
    return Snapshot(
        statuses=jobs.status_durations(),
        pending=jobs.pending_benchmarks(),
        layer_totals=layers.benchmark_totals(),
        queues=tasks.queue_depths(queues),
        alive=agents.alive_counts(alive_after_s=settings.agent_alive_after_s),
        instances=fleet.running_instances(),
    )


class ServiceCollector(Collector):
    """Yields the service's metrics from a snapshot no older than METRICS_CACHE_S."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None

    def snapshot(self) -> Snapshot:
        """The cached snapshot, or a new one when it is older than METRICS_CACHE_S (one reader at a time)."""
        with self._lock:
            fresh = self._snapshot and time.monotonic() - self._snapshot.taken_at < get_settings().metrics_cache_s
            if not fresh:
                self._snapshot = read_snapshot()
            assert self._snapshot is not None
            return self._snapshot

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
        for machine, n in sorted(snap.alive.items()):
            alive.add_metric([machine], n)
        yield alive
        yield from _fleet(snap)


def _jobs(snap: Snapshot) -> Iterator[Metric]:
    by_status = GaugeMetricFamily("traincast_jobs", "Jobs stored, by status", labels=["status"])
    rows = {r["status"]: r for r in snap.statuses}
    for status in STATUSES:
        by_status.add_metric([status], int(rows[status]["n"]) if status in rows else 0)
    yield by_status
    durations = HistogramMetricFamily(
        "traincast_job_duration_seconds",
        "Finished jobs' time from submission to their end, by how they ended (every job stored)",
        labels=["status"],
    )
    for status in STATUSES[2:]:
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
    for machine, n in sorted(snap.pending.items()):
        pending.add_metric([machine], n)
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
    for (machine, market), n in sorted(per_type.items()):
        count.add_metric([machine, market], n)
    for machine, price in sorted(usd.items()):
        cost.add_metric([machine], price)
    yield count
    yield cost


COLLECTOR = ServiceCollector()
REGISTRY.register(COLLECTOR)

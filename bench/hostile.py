"""Hostile input against a running API, with /healthz timed throughout: server errors and the probe's latency.

Starts the API (uvicorn with api/server.py's protocol, as `make up` does) and a worker on a scratch database and
Redis db, and a prober that GETs /healthz every --probe-ms on a connection of its own. Then, one phase
after another:

- idle: nothing else (the baseline);
  (the prober is a process of its own, so the bench's own work cannot delay its requests);
- schemathesis: every operation of the OpenAPI document, JSON and multipart bodies, query and path parameters
  (as tests/integration/test_fuzz.py runs it, --examples per operation);
- hostile bodies (839 KB of strings in `batch_sizes`, 50,000 unknown fields, a 5,000-digit number, an
  ONNX input of rank 20 with 2^62 dimensions, offsets past int4), --rounds times;
- generated ONNX: --graphs uploads from tests/unit/test_onnx_fuzz.py's generator, within and past the bounds;
- slow clients: --slow connections at once that send half a request head and wait;
- round three: a 96,000-point job answered by the reference, then 40 cancels and 4 unpaged GETs of it at
  once with 200,000-item layout lists, near-zero bandwidths and impostor machine names; then a cancel while the worker
  assembles the same job again. Every answer is checked for exception, SQL or source text, and the API's resident
  memory is read with every probe.

Prints and writes the "Hostile input" section of docs/PERFORMANCE.md: requests and 5xx answers per phase, and the
probe's p50 / p99 / max beside the idle phase's.

    .venv/bin/python bench/hostile.py [--examples 20] [--rounds 5] [--graphs 300] [--slow 100] [--probe-ms 50]
"""

import argparse
import json
import multiprocessing
import os
import platform
import queue
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

METRICS_TOKEN = "bench-hostile"
GOOD: dict[str, Any] = {"cnns": ["resnet18"], "machines": ["g5.xlarge"], "batch_sizes": [8, 16], "image_size": 64}


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of values, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def resident_mib(pid: int) -> float:
    """A process's resident memory (VmRSS), MiB; 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except FileNotFoundError:
        pass
    return 0.0


def _probe(url: str, period_s: float, pid: int, done: Any, out: Any) -> None:
    """GET /healthz every period until `done` is set; (monotonic start, seconds, ok, API's resident MiB) of each."""
    with httpx.Client(timeout=30) as client:
        while not done.is_set():
            began = time.monotonic()
            try:
                ok = client.get(f"{url}/healthz").status_code == 200
            except httpx.HTTPError:
                ok = False
            out.put((began, time.monotonic() - began, ok, resident_mib(pid)))
            done.wait(max(0.0, period_s - (time.monotonic() - began)))


class Prober:
    """/healthz probed from a process of its own (so this process's work, building 839 KB bodies, cannot hold the
    probe's GIL), each latency filed under the phase that was running when it began."""

    def __init__(self, url: str, period_s: float, pid: int) -> None:
        self.done = multiprocessing.Event()
        self.queue: Any = multiprocessing.Queue()  # (monotonic start, seconds, ok, resident MiB) of each probe
        self.process = multiprocessing.Process(
            target=_probe, args=(url, period_s, pid, self.done, self.queue), daemon=True
        )
        self.starts: list[tuple[float, str]] = [(0.0, "idle")]
        self.times: dict[str, list[float]] = {}
        self.failures: dict[str, int] = {}
        self.resident: dict[str, float] = {}  # the API's largest resident memory per phase, MiB

    def start(self) -> None:
        """Start probing."""
        self.process.start()

    @property
    def phase(self) -> str:
        """The phase running now."""
        return self.starts[-1][1]

    @phase.setter
    def phase(self, name: str) -> None:
        self.starts.append((time.monotonic(), name))

    def join(self) -> None:
        """Stop probing and file every sample under its phase."""
        self.done.set()
        samples = []
        while self.process.is_alive() or not self.queue.empty():
            try:
                samples.append(self.queue.get(timeout=0.5))
            except queue.Empty:
                continue
        self.process.join()
        for began, seconds, ok, mib in samples:
            phase = next(name for start, name in reversed(self.starts) if start <= began)
            self.times.setdefault(phase, []).append(seconds)
            self.resident[phase] = max(self.resident.get(phase, 0.0), mib)
            if not ok:
                self.failures[phase] = self.failures.get(phase, 0) + 1


def hostile_requests(url: str, key: str, rounds: int) -> Iterator[Callable[[httpx.Client], httpx.Response]]:
    """The hostile bodies and queries, `rounds` times."""
    from tests.unit.test_onnx_bounds import huge_input

    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    strings = json.dumps(GOOD | {"batch_sizes": ["x"] * 209_695}).encode()
    fields = json.dumps(GOOD | {f"field{i}": i for i in range(50_000)}).encode()
    digits = json.dumps(GOOD).replace("[8, 16]", "[" + "9" * 5000 + "]").encode()
    onnx = huge_input(20, 2**62)()
    for _ in range(rounds):
        yield lambda c: c.post(f"{url}/v1/jobs", content=strings, headers=headers)
        yield lambda c: c.post(f"{url}/v1/jobs", content=fields, headers=headers)
        yield lambda c: c.post(f"{url}/v1/jobs", content=digits, headers=headers)
        yield lambda c: c.post(f"{url}/v1/cnns", files={"file": ("x.onnx", onnx)}, data={"name": "huge"},
                               headers={"Authorization": f"Bearer {key}"})  # fmt: skip
        yield lambda c: c.get(f"{url}/v1/jobs/00000000-0000-0000-0000-000000000000",
                              params={"predictions_offset": 2**31 - 1, "predictions_limit": 10_000},
                              headers={"Authorization": f"Bearer {key}"})  # fmt: skip


# A result as large as a job may be (12 CNNs x batch 1-1000 x 8 GPU and node counts: 96,000 points, ~95 MB).
BIG: dict[str, Any] = {
    "cnns": ["resnet18", "resnet50", "vgg16", "alexnet", "densenet121", "mobilenet_v2", "googlenet", "squeezenet1_1",
             "vgg11", "resnet34", "resnet101", "efficientnet_b0"],
    "machines": ["p4d.24xlarge"], "batch_sizes": {"min": 1, "max": 1000}, "gpus": [1, 2, 4, 8], "nodes": [1, 2],
}  # fmt: skip
# What no answer may carry: exception names, tracebacks, SQL, our code's paths.
LEAKS = ("Traceback", "Error:", "Exception", "psycopg", "SELECT ", "UPDATE ", "INSERT ", "DELETE FROM", ".py\"",
         "ZeroDivision", "Overflow", "Infinity")  # fmt: skip


def leaks(text: str) -> bool:
    """Whether an answer carries exception, SQL or source text."""
    return any(word in text for word in LEAKS)


def big_job(url: str, key: str, timeout_s: float = 900) -> tuple[str, float]:
    """Submit BIG and wait for it to succeed; (job id, seconds it took)."""
    auth = {"Authorization": f"Bearer {key}"}
    began = time.monotonic()
    job = httpx.post(f"{url}/v1/jobs", json=BIG, headers=auth, timeout=60).raise_for_status().json()["id"]
    while time.monotonic() - began < timeout_s:
        status = httpx.get(f"{url}/v1/jobs", params={"limit": 5}, headers=auth, timeout=60).json()
        mine = next(j for j in status["jobs"] if j["id"] == job)
        if mine["status"] in ("succeeded", "failed", "canceled"):
            assert mine["status"] == "succeeded", mine
            return job, time.monotonic() - began
        time.sleep(2)
    raise TimeoutError(f"job {job} did not finish within {timeout_s:g} s")


def concurrently(
    sends: Sequence[Callable[[httpx.Client], httpx.Response]], clients: Sequence[httpx.Client]
) -> tuple[int, int, int]:
    """Send all at once, each on a client of its own (made before, so the burst is requests, not this process
    building TLS contexts on the API's cores); (requests, 5xx answers, answers leaking exception or SQL text).
    A streamed answer is read and dropped as it comes."""
    from concurrent.futures import ThreadPoolExecutor

    def one(pair: tuple[Callable[[httpx.Client], httpx.Response], httpx.Client]) -> tuple[bool, bool]:
        send, client = pair
        r = send(client)
        head = r.content[:65536].decode(errors="replace")
        return r.status_code >= 500, leaks(head)

    with ThreadPoolExecutor(len(sends)) as pool:
        results = list(pool.map(one, zip(sends, clients, strict=True)))
    return len(results), sum(e for e, _ in results), sum(leak for _, leak in results)


def round_three(url: str, key: str, job: str) -> Iterator[Callable[[httpx.Client], httpx.Response]]:
    """Round three's requests: 40 cancels of a finished large job and 4 unpaged GETs of it, at once; 200,000-item
    layout lists; bandwidths near zero; machine type names that differ only in letter case."""
    auth = {"Authorization": f"Bearer {key}"}

    def post(path: str, **kwargs: Any) -> Callable[[httpx.Client], httpx.Response]:
        return lambda c: c.post(f"{url}{path}", **kwargs)

    for _ in range(40):
        yield lambda c: c.post(f"{url}/v1/jobs/{job}/cancel", headers=auth)
    for _ in range(4):
        yield lambda c: c.get(f"{url}/v1/jobs/{job}", headers=auth)
    for field in ("gpus", "nodes"):
        body = json.dumps(GOOD | {field: ["x"] * 200_000}).encode()
        typed = auth | {"Content-Type": "application/json"}
        yield post("/v1/jobs", content=body, headers=typed)
    for value in (5e-324, 1e-300, 1e-12):
        yield post("/v1/jobs", json=GOOD | {"internode_gbps": value, "nodes": 2}, headers=auth)
        network = {"source": "network_jpeg", "network_gbps": value}
        yield post("/v1/jobs", json=GOOD | {"input": network}, headers=auth)
    from tests.integration.test_reference_jobs import OWN_GPU

    for name in ("P4D.24XLARGE", "Local", "G5.XLARGE"):
        yield post("/v1/machines", json=OWN_GPU | {"name": name}, headers=auth)


def cancel_during_assembly(url: str, key: str) -> dict[str, Any]:
    """Submit BIG again (its benchmarks are the reference's: it goes straight to assembly), cancel it while the worker
    assembles it; how long the cancel took, what it said and what GET says after."""
    auth = {"Authorization": f"Bearer {key}"}
    job = httpx.post(f"{url}/v1/jobs", json=BIG, headers=auth, timeout=60).raise_for_status().json()["id"]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # running: planned, so assembling (nothing is waited for)
        if (
            httpx.get(f"{url}/v1/jobs", params={"limit": 5}, headers=auth, timeout=60).json()["jobs"][0]["status"]
            == "running"
        ):
            break
        time.sleep(0.02)
    began = time.monotonic()
    r = httpx.post(f"{url}/v1/jobs/{job}/cancel", headers=auth, timeout=120)
    took = time.monotonic() - began
    time.sleep(1)
    after = httpx.get(f"{url}/v1/jobs", params={"limit": 5}, headers=auth, timeout=60).json()["jobs"][0]
    return {"status": r.status_code, "seconds": took, "after": after["status"], "leaks": leaks(r.text)}


def generated_graphs(count: int) -> list[bytes]:
    """`count` graphs of the ONNX fuzz's generator, the same every run."""
    from hypothesis import HealthCheck, given, settings

    from tests.unit.test_onnx_fuzz import graphs

    made: list[bytes] = []

    @settings(max_examples=count, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
    @given(graphs())
    def collect(data: bytes) -> None:
        made.append(data)

    collect()
    return made[:count]


def upload(client: httpx.Client, *, url: str, key: str, name: str, graph: bytes) -> httpx.Response:
    """POST /v1/cnns with a graph."""
    auth = {"Authorization": f"Bearer {key}"}
    return client.post(f"{url}/v1/cnns", files={"file": ("g.onnx", graph)}, data={"name": name}, headers=auth)


def run_requests(url: str, requests: Sequence[Callable[[httpx.Client], httpx.Response]]) -> tuple[int, int]:
    """Send each request; (requests, answers of 500 or more)."""
    errors = 0
    with httpx.Client(timeout=120) as client:
        for send in requests:
            errors += send(client).status_code >= 500
    return len(requests), errors


def slow_clients(port: int, count: int, hold_s: float) -> tuple[int, int]:
    """`count` connections that each send half a head and wait; (connections, those the server left open)."""
    socks = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=hold_s)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        socks.append(sock)
    still_open = 0
    for sock in socks:
        try:
            while sock.recv(65536):
                pass
        except TimeoutError:
            still_open += 1
        sock.close()
    return count, still_open


def answered(url: str) -> tuple[int, int]:
    """Requests the API answered other than the probe's and the scrape's, and those of 500 or more (its counter)."""
    text = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=30).text
    total = errors = 0
    for line in text.splitlines():
        if line.startswith("traincast_http_requests_total{") and 'route="/healthz"' not in line:
            if 'route="/metrics"' in line:
                continue
            count = int(float(line.rsplit(" ", 1)[1]))
            total += count
            errors += count if 'status="5' in line else 0
    return total, errors


def schemathesis(url: str, key: str, examples: int) -> tuple[int, int]:
    """Run schemathesis over the document; (operations run, failing ones: server errors)."""
    from xml.etree import ElementTree

    with tempfile.TemporaryDirectory() as tmp:
        cmd = [str(Path(sys.executable).parent / "schemathesis"), "run", f"{url}/openapi.json", "--checks",
               "not_a_server_error", "--header", f"Authorization: Bearer {key}", "--max-examples", str(examples),
               "--seed", "13", "--phases", "examples,coverage,fuzzing", "--workers", "1", "--request-timeout", "60",
               "--report", "junit", "--report-dir", tmp]  # fmt: skip
        subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env={**os.environ, "NO_COLOR": "1"})
        [report] = Path(tmp).glob("junit-*.xml")
        suite = ElementTree.parse(report).getroot()
        for case in suite.iter("testcase"):
            for bad in [*case.iter("failure"), *case.iter("error")]:
                print(f"schemathesis: {case.get('name')}: {(bad.get('message') or bad.text or '')[:300]}", flush=True)
        return int(suite.get("tests", 0)), int(suite.get("failures", 0)) + int(suite.get("errors", 0))


def main() -> int:
    """Start the API, run the phases with the prober going, print and record."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--graphs", type=int, default=300)
    parser.add_argument("--slow", type=int, default=100)
    parser.add_argument("--probe-ms", type=float, default=50)
    parser.add_argument("--idle-s", type=float, default=10)
    args = parser.parse_args()
    from shared.core.migrate import migrate
    from tests.support.services import fresh_database, fresh_redis_db, server_urls
    from tests.support.stack import Stack

    admin_db, redis_server = server_urls()
    with (
        fresh_database(admin_db) as db_url,
        fresh_redis_db(redis_server) as redis_url,
        tempfile.TemporaryDirectory() as logs,
    ):
        migrate(db_url)
        env = {**os.environ, "DATABASE_URL": db_url, "REDIS_URL": redis_url}
        made = subprocess.run([str(Path(sys.executable).parent / "traincast"), "keys", "create", "--name", "hostile",
                               "--scope", "admin", "--rate", "100000"], env=env, capture_output=True, text=True,
                              check=True)  # fmt: skip
        key = made.stdout.strip().splitlines()[-1]
        stack = Stack(
            {
                "DATABASE_URL": db_url,
                "REDIS_URL": redis_url,
                "API_AUTH_FAILURES_PER_MIN": "1e6",
                "METRICS_TOKEN": METRICS_TOKEN,
            },
            Path(logs),
        )
        stack.start("api")
        stack.start("worker")
        try:
            stack.wait_ready()
            prober = Prober(stack.url, args.probe_ms / 1000, stack.procs["api"].pid)
            prober.start()
            counted: dict[str, tuple[int, int]] = {}
            time.sleep(args.idle_s)
            prober.phase = "schemathesis"
            before = answered(stack.url)
            operations, failing = schemathesis(stack.url, key, args.examples)
            after = answered(stack.url)
            counted["schemathesis"] = (after[0] - before[0], after[1] - before[1])
            fuzz_note = f"schemathesis: {operations} operations, {failing} failing; requests counted by the API"
            bodies = list(hostile_requests(stack.url, key, args.rounds))  # built before the phase starts
            prober.phase = "hostile bodies"
            counted["hostile bodies"] = run_requests(stack.url, bodies)
            graphs = generated_graphs(args.graphs)
            prober.phase = "generated ONNX"
            uploads = [partial(upload, url=stack.url, key=key, name=f"fuzz{i}", graph=g) for i, g in enumerate(graphs)]
            counted["generated ONNX"] = run_requests(stack.url, uploads)
            prober.phase = "slow clients"
            counted["slow clients"] = slow_clients(stack.port, args.slow, hold_s=30)
            prober.phase = "a 96,000-point job assembled"
            job, assembled_s = big_job(stack.url, key)
            sends = list(round_three(stack.url, key, job))
            clients = [httpx.Client(timeout=300) for _ in sends]  # new connections all the same: none is opened yet
            prober.phase = "round three"
            three, errors, leaking = concurrently(sends, clients)
            for client in clients:
                client.close()
            counted["round three"] = (three, errors)
            prober.phase = "cancel during assembly"
            cancel = cancel_during_assembly(stack.url, key)
            prober.phase = "after"
            time.sleep(2)
            prober.join()
        finally:
            stack.stop("worker")
            stack.stop("api")
    idle = [t * 1000 for t in prober.times["idle"]]
    lines = [
        f"`python bench/hostile.py --examples {args.examples} --rounds {args.rounds} --graphs {args.graphs} "
        f"--slow {args.slow} --probe-ms {args.probe_ms:g}` on {platform.node()} ({os.cpu_count()} cores), "
        f"{time.strftime('%Y-%m-%d')}: one API process (uvicorn, api/server.py's protocol) and one worker (for round "
        f"three's job); /healthz "
        f"probed every {args.probe_ms:g} ms on its own connection through every phase. For slow clients the last "
        f"column counts connections the server had not closed after 30 s; {fuzz_note}.",
        "",
        "| phase | requests | 5xx (slow clients: left open) | /healthz p50 ms | p99 ms | max ms | "
        "p99 / idle p99 | probe failures | API resident MiB (max) |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| idle (baseline) | – | – | {percentile(idle, 0.5):.1f} | {percentile(idle, 0.99):.1f} | "
        f"{max(idle):.1f} | 1.00 | {prober.failures.get('idle', 0)} | {prober.resident.get('idle', 0):.0f} |",
    ]
    for phase in [p for _, p in prober.starts[1:]]:
        sent, bad = counted.get(phase, ("–", "–"))  # type: ignore[assignment]
        ms = [t * 1000 for t in prober.times.get(phase, [0.0])]
        lines.append(
            f"| {phase} | {sent} | {bad} | {percentile(ms, 0.5):.1f} | {percentile(ms, 0.99):.1f} | {max(ms):.1f} | "
            f"{percentile(ms, 0.99) / percentile(idle, 0.99):.2f} | {prober.failures.get(phase, 0)} | "
            f"{prober.resident.get(phase, 0):.0f} |"
        )
    worst = max(prober.resident.values())
    lines += [
        "",
        f"Round three: the 96,000-point job took {assembled_s:.0f} s to plan and assemble (reference "
        f"answers; ~95 MB of result); then 40 cancels of it and 4 unpaged GETs of it at once, 200,000-item gpus and "
        f"nodes lists, bandwidths of 5e-324, 1e-300 and 1e-12 Gbit/s, and machine types named like the catalog's in "
        f"another case, all at once: {leaking} of {three} answers carried exception, SQL or source text. A cancel of "
        f"the same job while the worker assembled it answered {cancel['status']} in {cancel['seconds'] * 1000:.0f} ms "
        f"(leaking text: {cancel['leaks']}); GET then said {cancel['after']}. The API's resident memory peaked at "
        f"{worst:.0f} MiB (ceiling: 1 GiB).",
    ]
    body = "\n".join(lines)
    print(body)
    from bench.perf_doc import write_section

    write_section("Hostile input: server errors and /healthz latency", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The benchmark agent's measurements per second, this tree against a baseline commit, through a real agent process.

For each run: a database and Redis database of its own (created and dropped here), migrated by the tree's own code;
a real agent process (`python -m gpu_agent`'s main, with timers wrapped around the agent's functions) of that tree;
the convs and ops of a few CNNs registered and sent to it by the tree's own grouping code (worker/coverage.py, as
`traincast calibrate` sends them); the run is timed from the first message sent to the last row stored. Runs of the
baseline and of this tree alternate, so a busy stretch of a shared machine hits both; the medians are compared.
The baseline tree is a `git worktree` of BASELINE (the commit before the agent was made faster), removed afterwards.

    .venv/bin/python bench/agent_throughput.py                  # CPU, 3 runs each (~4 minutes)
    .venv/bin/python bench/agent_throughput.py --quick          # 1 run each, a smaller workload (~1 minute)
    .venv/bin/python bench/agent_throughput.py --device cuda    # on a GPU host: the same workload on the GPU
    .venv/bin/python bench/agent_throughput.py --baseline REF   # against another commit
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import wraps
from pathlib import Path
from typing import Any

from shared.measurements.members import Member  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# HEAD before the agent's throughput work: per-signature tasks, a transaction per row.
BASELINE = "648d0c0"
# Op kinds both trees measure (later trees read more kinds from a CNN): the same work for both.
OP_KINDS = ["add", "batch_norm", "cat", "cross_entropy", "hardtanh", "linear", "max_pool2d", "mean", "mul",
            "optimizer", "relu"]  # fmt: skip
WORKLOADS = {
    "full": {"cnns": ["resnet18", "mobilenet_v2", "squeezenet1_1"], "image_size": 32, "batch_sizes": [1, 2, 4, 8]},
    "quick": {"cnns": ["resnet18", "squeezenet1_1"], "image_size": 32, "batch_sizes": [1, 4]},
}
# An earlier H100 run with the baseline agent: 1,350 of the default GPU calibration's 2,234 measurements in 420 s.
H100_SEEN, H100_SEEN_S, GPU_DEFAULT_MEASUREMENTS = 1350, 420.0, 2234
# Where the agent's time goes: functions wrapped by name (those a tree lacks are skipped), outermost call counted.
PHASES: tuple[tuple[str, Callable[[str], bool], str], ...] = (
    ("gpu_agent.windows", lambda n: n == "_prepare", "setup and warm-up"),
    ("gpu_agent.windows", lambda n: n == "_time", "timing"),
    ("gpu_agent.windows", lambda n: n == "free", "freeing memory"),
    ("gpu_agent.store", lambda n: n.startswith("save"), "storing"),
    ("gpu_agent.store", lambda n: n.endswith(("_done", "_done_of")), "resume reads"),
    ("gpu_agent.lifecycle", lambda n: n == "set_work", "status writes"),
    ("shared.core.tasks", lambda n: n == "send", "messaging"),
)
COUNTS = """
SELECT (SELECT count(*) FROM layer_benchmarks) AS layers, (SELECT count(*) FROM op_benchmarks) AS ops,
       (SELECT count(*) FROM layer_failures) + (SELECT count(*) FROM op_failures) AS failures,
       extract(epoch FROM greatest((SELECT max(measured_at) FROM layer_benchmarks),
                                   (SELECT max(measured_at) FROM op_benchmarks))) AS last_row"""
# Each timed phase's statistics (gpu_agent/timing.py Timing): how long the policy ran and whether it settled.
PHASE_STATS = """
SELECT p.value->>'rounds' AS rounds, p.value->>'runs' AS runs, p.value->>'stable' AS stable,
       (p.value->>'agreement')::float AS agreement
FROM (SELECT stats FROM layer_benchmarks UNION ALL SELECT stats FROM op_benchmarks) r, jsonb_each(r.stats) p
WHERE jsonb_typeof(p.value) = 'object' AND p.value ? 'rounds'"""
ALL_STATS = """
SELECT 'layer' AS kind, signature_id, batch_size, measured_at, stats FROM layer_benchmarks
UNION ALL SELECT 'op', op_signature_id, batch_size, measured_at, stats FROM op_benchmarks ORDER BY measured_at"""
# Every stored figure by what it measures (spec, batch size, phase), to compare runs of a tree with each other.
VALUES = """
SELECT s.spec::text AS spec, b.batch_size, b.stats
FROM layer_benchmarks b JOIN conv_signatures s ON s.id = b.signature_id
UNION ALL
SELECT s.spec::text, b.batch_size, b.stats FROM op_benchmarks b JOIN op_signatures s ON s.id = b.op_signature_id"""
ENVIRONMENT = "SELECT details FROM environments ORDER BY id DESC LIMIT 1"
AGENT_UP = "SELECT count(*) AS n FROM agents WHERE stopped_at IS NULL"


# --- in the agent process (a tree's code on sys.path) ---------------------------------------------------------------


def serve(tree: str, out: str) -> None:
    """Run a real agent of `tree`, its functions timed by phase; write the totals to `out` when it shuts down."""
    sys.path.insert(0, tree)
    import importlib

    totals: dict[str, list[float]] = {}
    tasks_run: list[float] = []
    inside = threading.local()

    def timed(fn: Callable[..., Any], phase: str) -> Callable[..., Any]:
        @wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            if getattr(inside, "phase", None) is not None:
                return fn(*args, **kwargs)  # counted by the outer phase
            inside.phase, started = phase, time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                inside.phase = None
                entry = totals.setdefault(phase, [0.0, 0])
                entry[0] += time.perf_counter() - started
                entry[1] += 1

        return run

    for module_name, matches, phase in PHASES:
        module = importlib.import_module(module_name)
        for name in [n for n in vars(module) if matches(n) and callable(getattr(module, n))]:
            setattr(module, name, timed(getattr(module, name), phase))

    from celery import signals

    began: list[float] = []

    def prerun(**_: Any) -> None:
        began.append(time.perf_counter())

    def postrun(**_: Any) -> None:
        tasks_run.append(time.perf_counter() - began.pop())

    def dump(**_: Any) -> None:
        Path(out).write_text(json.dumps({"phases": totals, "tasks": len(tasks_run), "in_tasks_s": sum(tasks_run)}))

    signals.task_prerun.connect(prerun, weak=False)
    signals.task_postrun.connect(postrun, weak=False)
    signals.worker_shutdown.connect(dump, weak=False)
    from gpu_agent.__main__ import main

    sys.argv = ["gpu_agent"]
    main()


def send(tree: str, workload: str) -> None:
    """Register the workload's CNNs with `tree`'s code, then send their convs and ops as calibration does."""
    sys.path.insert(0, tree)
    from calibration import run as calibration
    from shared.measurements import layers, ops
    from shared.training import TrainConfig
    from worker import coverage

    spec = json.loads(workload)
    spec_kinds = set(spec["ops"])

    def ops_of(plan: Any) -> list[Member]:
        return [m for cnn in plan.cnns for m in ops.members(name=cnn, image_size=plan.image_size, num_classes=1000)]

    plan = calibration.Plan(machine_type="local", cnns=tuple(spec["cnns"]), image_size=spec["image_size"],
                            batch_sizes=tuple(spec["batch_sizes"]), config=TrainConfig())  # fmt: skip
    sigs = {s for cnn in plan.cnns for s, _count in layers.register_builtin(name=cnn, image_size=plan.image_size)}
    conv_pairs = {(s, b) for s in sigs for b in plan.batch_sizes}
    kinds = {s: op_spec["op"] for s, op_spec, _n in ops_of(plan)}
    op_pairs = {(s, b) for s, b in calibration.op_points(plan) if kinds[s] in spec_kinds}
    started = time.time()
    coverage.send_work({"local": conv_pairs}, "fp32")
    coverage.send_op_work({"local": op_pairs}, plan.config)
    print(json.dumps({"layers": len(conv_pairs), "ops": len(op_pairs), "sent_at": started, "signatures": len(sigs),
                      "op_signatures": len({s for s, _b in op_pairs})}))  # fmt: skip


# --- in the parent ---------------------------------------------------------------------------------------------------


@contextmanager
def baseline_tree(ref: str) -> Iterator[str]:
    """A detached worktree of `ref`, removed afterwards (the working tree and its index are not touched)."""
    path = tempfile.mkdtemp(prefix="agent-base-")
    os.rmdir(path)
    subprocess.run(["git", "worktree", "add", "--detach", path, ref], cwd=ROOT, check=True, capture_output=True)
    try:
        yield path
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", path], cwd=ROOT, check=False, capture_output=True)


def one_run(tree: str, workload: str, device: str, timeout_s: float, dump: str | None = None) -> dict[str, Any]:
    """One agent of `tree` measuring the workload from empty tables: counts, seconds, phases, figures."""
    from tests.support.services import fresh_database, fresh_redis_db, server_urls

    admin_db, redis_server = server_urls()
    with fresh_database(admin_db) as db_url, fresh_redis_db(redis_server) as redis_url:
        env = {**os.environ, "DATABASE_URL": db_url, "REDIS_URL": redis_url, "AGENT_MACHINE_TYPE": "local",
               "AGENT_DEVICE": device, "PYTHONPATH": tree}  # fmt: skip
        python, me = sys.executable, str(Path(__file__).resolve())
        subprocess.run([python, "-m", "shared.core.migrate"], env=env, cwd=tree, check=True, capture_output=True)
        phases_file = Path(tempfile.mkdtemp(prefix="agent-phases-")) / "phases.json"
        log_path = phases_file.with_name("agent.log")
        with open(log_path, "w") as log:
            agent = subprocess.Popen([python, me, "--serve", tree, str(phases_file)], env=env, cwd=tree, stdout=log,
                                     stderr=log)  # fmt: skip
            try:
                _wait(db_url, lambda: _one(db_url, AGENT_UP)["n"] or agent.poll() is not None, 120, log_path)
                if agent.poll() is not None:
                    raise RuntimeError(f"the agent exited; see {log_path}")
                sent = subprocess.run([python, me, "--send", tree, workload], env=env, cwd=tree, check=True,
                                      capture_output=True, text=True)  # fmt: skip
                work = json.loads(sent.stdout.strip().splitlines()[-1])
                wanted = work["layers"] + work["ops"]
                _wait(db_url, lambda: (c := _one(db_url, COUNTS))["layers"] + c["ops"] >= wanted or c["failures"],
                      timeout_s, log_path)  # fmt: skip
                result = _read_out(db_url, dump)
            finally:
                agent.send_signal(signal.SIGTERM)
                agent.wait(120)
        if result["counts"]["failures"]:
            raise RuntimeError(f"the agent recorded failures; see {log_path}")
        phases = json.loads(phases_file.read_text()) if phases_file.exists() else {}
        shutil.rmtree(phases_file.parent)  # kept only when the run failed, for its agent's log
    counts = result.pop("counts")
    wall = float(counts["last_row"]) - work["sent_at"]
    rows = counts["layers"] + counts["ops"]
    return {"rows": rows, "wall_s": wall, "per_s": rows / wall, "work": work, "agent": phases, **result}


def _wait(db_url: str, done: Callable[[], Any], timeout_s: float, log_path: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError(f"not done after {timeout_s} s ({_one(db_url, COUNTS)}); see {log_path}")
        time.sleep(0.25)


def _read_out(db_url: str, dump: str | None) -> dict[str, Any]:
    """What a run stored: counts, its environment, its phases' statistics, every figure (and all, into dump)."""
    from shared.core.db import transaction

    with transaction(db_url) as cur:
        cur.execute(PHASE_STATS)
        timed = [dict(r) for r in cur.fetchall()]
        cur.execute(VALUES)
        values = {
            f"{r['spec']}|{r['batch_size']}|{phase}": t["value_ms"]
            for r in cur.fetchall()
            for phase, t in r["stats"].items()
            if isinstance(t, dict) and t.get("value_ms")
        }
        if dump:
            cur.execute(ALL_STATS)
            Path(dump).write_text(json.dumps([dict(r) for r in cur.fetchall()], default=str))
    return {
        "counts": _one(db_url, COUNTS),
        "environment": _one(db_url, ENVIRONMENT)["details"],
        "timed": _timed(timed),
        "values": values,
    }


def _timed(phases: list[dict[str, Any]]) -> dict[str, float]:
    """Median blocks and runs per timed phase, the share marked stable (baseline: its whole window agreed; now:
    the phase itself did) and the share whose two lowest quiet block medians agree within 5 % (the same test)."""
    return {
        "rounds": statistics.median(int(p["rounds"]) for p in phases),
        "runs": statistics.median(int(p["runs"]) for p in phases),
        "stable": sum(p["stable"] == "true" for p in phases) / len(phases),
        "agreed": sum(p["agreement"] is not None and p["agreement"] <= 0.05 for p in phases) / len(phases),
    }


def _one(db_url: str, sql: str) -> dict[str, Any]:
    from shared.core.db import one, transaction

    with transaction(db_url) as cur:
        cur.execute(sql)
        return one(cur)


def repeatability(tree_runs: list[dict[str, Any]]) -> str:
    """Median difference |a - b| / mean(a, b) of the same figures in two runs of a tree, after taking out the
    median ratio between the runs (a machine slower in one run as a whole): median over pairs of runs."""
    pairs = []
    for i, a in enumerate(tree_runs):
        for b in tree_runs[i + 1 :]:
            keys = sorted(set(a["values"]) & set(b["values"]))
            shift = statistics.median(b["values"][k] / a["values"][k] for k in keys)
            diffs = [abs(a["values"][k] * shift - b["values"][k]) / ((a["values"][k] * shift + b["values"][k]) / 2)
                     for k in keys]  # fmt: skip
            pairs.append(statistics.median(diffs))
    return f"{100 * statistics.median(pairs):.1f} %" if pairs else "(one run)"


def phase_table(runs: dict[str, list[dict[str, Any]]]) -> str:
    """Median seconds per phase of each tree's runs, and its share of the run's wall time."""
    names = [p for _m, _f, p in PHASES]
    lines = ["| where the agent's time went (median of runs) | baseline | this tree |", "|---|---|---|"]

    def cell(tree_runs: list[dict[str, Any]], pick: Callable[[dict[str, Any]], float]) -> str:
        values = [pick(r) for r in tree_runs]
        wall = statistics.median(r["wall_s"] for r in tree_runs)
        value = statistics.median(values)
        return f"{value:.2f} s ({100 * value / wall:.0f} %)"

    def phase(name: str) -> Callable[[dict[str, Any]], float]:
        return lambda r: float(r["agent"].get("phases", {}).get(name, [0.0])[0])

    def rest(r: dict[str, Any]) -> float:
        return r["agent"].get("in_tasks_s", 0.0) - sum(phase(n)(r) for n in names)

    def between(r: dict[str, Any]) -> float:
        return max(r["wall_s"] - r["agent"].get("in_tasks_s", 0.0), 0.0)

    for name in names:
        lines.append(f"| {name} | {cell(runs['baseline'], phase(name))} | {cell(runs['new'], phase(name))} |")
    lines.append(f"| rest of the tasks (Celery task code, loops) | {cell(runs['baseline'], rest)} | "
                 f"{cell(runs['new'], rest)} |")  # fmt: skip
    lines.append(f"| between tasks (broker, Celery) and after the last | {cell(runs['baseline'], between)} | "
                 f"{cell(runs['new'], between)} |")  # fmt: skip
    tasks_line = " | ".join(str(statistics.median(r["agent"].get("tasks", 0) for r in runs[t])) for t in runs)
    lines.append(f"| tasks | {tasks_line} |")
    return "\n".join(lines)


def estimate(ratio: float) -> str:
    """What the CPU ratio would make of the default GPU calibration: an estimate, and how it is derived."""
    per_s = H100_SEEN / H100_SEEN_S
    seen_s = GPU_DEFAULT_MEASUREMENTS / per_s
    return f"""
**Estimate for the default GPU calibration — not a measurement** (no GPU was lent to this work): an earlier run saw
the baseline agent on an H100 store {H100_SEEN:,} of the default GPU calibration's {GPU_DEFAULT_MEASUREMENTS:,}
measurements (760 layer rows, 1,439 op rows, 35 whole steps) in {H100_SEEN_S:.0f} s, {per_s:.1f} a second: about
{seen_s:.0f} s for all. The ratio above ({ratio:.2f}×) is that of what a CPU shares with a GPU at microsecond
operations: the timing policy and the per-row and per-signature bookkeeping. On CUDA this change also takes out a
synchronise per run (one per block now), two of each layer point's three profiler runs, the allocator's cache flush
after every window, and makes the wait reads about ten times cheaper (0.58 → 0.05 ms a read with 40 threads,
measured on this machine; two reads per block). If the H100's time per measurement shrank by the CPU ratio alone,
the default GPU calibration would take about {seen_s:.0f} / {ratio:.2f} ≈ **{seen_s / ratio:.0f} s**; the savings
only a GPU has would shorten that, time in cuDNN's algorithm search for each new shape (unchanged) and in the 35
whole steps would not shrink with it. `python bench/agent_throughput.py --device cuda` on a GPU host measures the
ratio there, `traincast calibrate` the calibration.
"""


def main() -> int:
    """Alternate baseline and this tree's runs, print and write the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--serve", nargs=2, metavar=("TREE", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--send", nargs=2, metavar=("TREE", "WORKLOAD"), help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="one run each of a smaller workload")
    parser.add_argument("--repeats", type=int, default=None, help="runs of each tree (default 3; 1 with --quick)")
    parser.add_argument("--device", default="cpu", help="the agent's device: cpu or cuda")
    parser.add_argument("--baseline", default=BASELINE, help=f"the git commit to compare with (default {BASELINE})")
    parser.add_argument("--no-doc", action="store_true", help="print only; leave docs/PERFORMANCE.md alone")
    parser.add_argument("--dump", metavar="DIR", help="write each run's rows (stats) as JSON into DIR")
    args = parser.parse_args()
    if args.serve:
        serve(*args.serve)
        return 0
    if args.send:
        send(*args.send)
        return 0
    sys.path.insert(0, str(ROOT))
    name = "quick" if args.quick else "full"
    workload = json.dumps({**WORKLOADS[name], "ops": OP_KINDS})
    repeats = args.repeats or (1 if args.quick else 3)
    runs: dict[str, list[dict[str, Any]]] = {"baseline": [], "new": []}
    load = [os.getloadavg()[0]]
    with baseline_tree(args.baseline) as base:
        for i in range(repeats):
            for label, tree in (("baseline", base), ("new", str(ROOT))):
                dump = f"{args.dump}/{label}-{i + 1}.json" if args.dump else None
                result = one_run(tree, workload, args.device, timeout_s=900, dump=dump)
                runs[label].append(result)
                print(f"run {i + 1} {label}: {result['rows']} rows in {result['wall_s']:.1f} s = "
                      f"{result['per_s']:.2f}/s; {result['timed']}", flush=True)  # fmt: skip
    load.append(os.getloadavg()[0])
    write(args, name, workload, runs, load)
    return 0


def write(args: argparse.Namespace, name: str, workload: str, runs: dict[str, list[dict[str, Any]]],
          load: list[float]) -> None:  # fmt: skip
    """Print the section and (unless --no-doc) write it into docs/PERFORMANCE.md."""
    from bench.perf_doc import agent_settings, write_section

    rate = {t: statistics.median(r["per_s"] for r in rs) for t, rs in runs.items()}
    each = {t: ", ".join(f"{r['per_s']:.2f}" for r in rs) for t, rs in runs.items()}
    wall = {t: statistics.median(r["wall_s"] for r in rs) for t, rs in runs.items()}
    blocks = {t: statistics.median(r["timed"]["rounds"] for r in rs) for t, rs in runs.items()}
    agree = {t: f"{100 * statistics.median(r['timed']['agreed'] for r in rs):.0f} %" for t, rs in runs.items()}
    repeat = {t: repeatability(rs) for t, rs in runs.items()}
    spec, work, env = json.loads(workload), runs["new"][0]["work"], runs["new"][0]["environment"]
    base_env, base = runs["baseline"][0]["environment"], runs["baseline"][0]["work"]
    options = " ".join(
        f"--{k.replace('_', '-')}" + ("" if v is True else f" {v}")
        for k, v in vars(args).items()
        if k in ("quick", "repeats", "device", "baseline") and v not in (None, False, "cpu", BASELINE)
    )
    command, when = f"python bench/agent_throughput.py{' ' + options if options else ''}", datetime.now(UTC)
    body = f"""`{command}` ({when:%Y-%m-%d %H:%M} UTC). One real agent process (`gpu_agent.__main__.main`,
Celery solo pool) per run on `{args.device}`, from empty tables; the convs and ops of {", ".join(spec["cnns"])} at
{spec["image_size"]} px, batch sizes {", ".join(map(str, spec["batch_sizes"]))}: {work["signatures"]} conv and
{work["op_signatures"]} op signatures (op kinds both trees measure: {", ".join(OP_KINDS)}), {work["layers"]} layer
and {work["ops"]} op rows ({base["layers"]} and {base["ops"]} in the baseline), sent by each tree's own
`worker/coverage.py` as a calibration sends them; timed from the first message sent to the last row stored.
Baseline: commit `{args.baseline}` ({base_env["timing_method"]}); this tree: {env["timing_method"]}. Runs alternate
baseline and this tree; medians of {len(runs["new"])} run(s) each. Load average (1 min) {load[0]:.1f} at the start,
{load[1]:.1f} at the end.

| | baseline | this tree |
|---|---|---|
| layer and op rows stored per second (median) | **{rate["baseline"]:.2f}** | **{rate["new"]:.2f}** |
| each run | {each["baseline"]} | {each["new"]} |
| wall time (median) | {wall["baseline"]:.1f} s | {wall["new"]:.1f} s |
| blocks per timed phase (median) | {blocks["baseline"]} | {blocks["new"]} |
| phases whose two lowest quiet block medians agree within 5 % | {agree["baseline"]} | {agree["new"]} |
| run-to-run difference of the stored figures (median, shift taken out) | {repeat["baseline"]} | {repeat["new"]} |

Ratio this tree / baseline: **{rate["new"] / rate["baseline"]:.2f}×**.

{phase_table(runs)}

Environment: {env["cpu"]}, {env["threads"]} threads, torch {env["torch"]}; {agent_settings()}.
"""
    if args.device == "cpu":
        body += estimate(rate["new"] / rate["baseline"])
    print(body)
    if not args.no_doc:
        title = f"Agent measurements per second (bench/agent_throughput.py, {args.device}{', quick' * args.quick})"
        write_section(title, body)


if __name__ == "__main__":
    sys.exit(main())

"""Wall time of `traincast calibrate --machine local` against a real agent process, from empty tables.

Runs in a database and Redis database of its own (created and dropped here, as the tests do),
so nothing is reused from an earlier calibration. The figure is compared with the 15-minute
bound a CPU calibration of the default set must meet.

    .venv/bin/python bench/calibration_time.py                 # the default set
    .venv/bin/python bench/calibration_time.py --set full      # any `traincast calibrate` options
    .venv/bin/python bench/calibration_time.py --keep-in URL   # into that empty database, kept afterwards
                                                               # (bench/accuracy.py can go on from it)
"""

import os
import signal
import subprocess
import sys
import time
from contextlib import nullcontext
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.perf_doc import agent_settings, write_section  # noqa: E402
from shared.core.db import transaction  # noqa: E402
from tests.support.services import fresh_database, fresh_redis_db, server_urls  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
BOUND_S = 15 * 60
SUMMARY = """
SELECT (SELECT count(*) FROM layer_benchmarks) AS layers, (SELECT count(*) FROM step_measurements) AS steps,
       (SELECT count(*) FROM step_failures) AS infeasible,
       (SELECT details FROM environments ORDER BY id DESC LIMIT 1) AS environment"""


def main() -> int:
    """Start an agent, time one calibration, write the figure to docs/PERFORMANCE.md."""
    options = sys.argv[1:]
    keep = options[1] if options[:1] == ["--keep-in"] else None
    options = options[2:] if keep else options
    admin_db, redis_server = server_urls()
    database = nullcontext(keep) if keep else fresh_database(admin_db)
    with database as db_url, fresh_redis_db(redis_server) as redis_url:
        env = {**os.environ, "DATABASE_URL": db_url, "REDIS_URL": redis_url}
        subprocess.run([str(BIN / "traincast"), "migrate"], env=env, check=True, cwd=ROOT, capture_output=True)
        with transaction(db_url) as cur:
            cur.execute(SUMMARY)
            if (row := cur.fetchone()) and (row["layers"] or row["steps"]):  # timed from empty tables, or not at all
                print(f"{db_url} already holds measurements: give an empty database", file=sys.stderr)
                return 2
        log_path = Path("/tmp") / f"traincast-calibration-agent-{os.getpid()}.log"
        with open(log_path, "w") as log:
            agent = subprocess.Popen([sys.executable, "-m", "gpu_agent"], env=env, cwd=ROOT, stdout=log, stderr=log)
            try:
                time.sleep(10)  # the agent imports torch and connects before it takes work
                load = [os.getloadavg()[0]]
                started = time.perf_counter()
                cal = subprocess.run(
                    [str(BIN / "traincast"), "calibrate", "--machine", "local", *options],
                    env=env,
                    cwd=ROOT,
                    capture_output=True,
                    text=True,
                )
                took = time.perf_counter() - started
                load.append(os.getloadavg()[0])
            finally:
                agent.send_signal(signal.SIGTERM)
                agent.wait(120)
        if cal.returncode != 0:
            print(cal.stderr[-3000:], file=sys.stderr)
            return 1
        with transaction(db_url) as cur:
            cur.execute(SUMMARY)
            row = cur.fetchone()
    assert row is not None
    env_details = row["environment"]
    plan_line = next((ln for ln in cal.stderr.splitlines() if ln.startswith("calibrating local:") and "CNNs" in ln), "")
    ratio, loads = f"{took / BOUND_S:.2f}", f"{load[0]:.1f} / {load[1]:.1f}"
    plan, when = plan_line.removeprefix("calibrating local: "), f"{datetime.now(UTC):%Y-%m-%d %H:%M}"
    command = " ".join(["traincast calibrate --machine local", *options])
    bench_command = " ".join(["python bench/calibration_time.py", *options])
    body = f"""`{command}` with one local agent (`python -m gpu_agent`), empty tables, timed by
`{bench_command}`.

| run (UTC) | plan | layer rows | step rows | infeasible | wall time | ÷ 15-min bound | load 1 min start/end |
|---|---|---|---|---|---|---|---|
| {when} | {plan} | {row["layers"]} | {row["steps"]} | {row["infeasible"]} | {took:.0f} s | {ratio} | {loads} |

Environment: {env_details["cpu"]}, {env_details["threads"]} threads, torch {env_details["torch"]}, agent
{env_details["agent_version"]} ({env_details["timing_method"]}); {agent_settings()}.
"""
    print(body)
    print(cal.stdout)
    write_section("Calibration time" + (f" ({' '.join(options)})" if options else ""), body)
    return 0


if __name__ == "__main__":
    sys.exit(main())

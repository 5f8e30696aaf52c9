"""How long an agent takes to start: `python bench/agent_start.py`.

Every job on a machine type without a running agent, every fleet instance and most integration tests wait for an
agent to start. Two figures, each over RUNS fresh processes: importing the agent (`gpu_agent.app`) against the
baseline in the same run, the same import with torchvision imported first (what every start did before torchvision
was left to the step and input benchmarks that need it); and a real agent's start until it has registered in
PostgreSQL (a scratch database and Redis db).
"""

import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RUNS = 3


def imported(before: str) -> float:
    """Seconds a fresh interpreter takes to import the agent, after `before`."""
    code = f"import time; {before}; t = time.perf_counter(); import gpu_agent.app; print(time.perf_counter() - t)"
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, cwd=ROOT)
    return time.perf_counter() - started


def registered(runs: int) -> list[float]:
    """Seconds from starting a real agent to its row in `agents`, `runs` times."""
    import psycopg2

    from shared.core.migrate import migrate
    from tests.support.services import fresh_database, fresh_redis_db, server_urls
    from tests.support.stack import Stack

    admin_db, redis_server = server_urls()
    out = []
    with fresh_database(admin_db) as db, fresh_redis_db(redis_server) as redis, tempfile.TemporaryDirectory() as logs:
        migrate(db)
        stack = Stack({"DATABASE_URL": db, "REDIS_URL": redis}, Path(logs))
        for _ in range(runs):
            started = time.perf_counter()
            stack.start("agent")
            while True:
                with psycopg2.connect(db) as conn, conn.cursor() as cur:
                    cur.execute("SELECT count(*) FROM agents WHERE stopped_at IS NULL")
                    up = cur.fetchone()[0]  # type: ignore[index]
                conn.close()
                if up:
                    break
                time.sleep(0.05)
            out.append(time.perf_counter() - started)
            stack.stop("agent")
    return out


def main() -> int:
    baseline = [imported("import torchvision") for _ in range(RUNS)]
    now = [imported("pass") for _ in range(RUNS)]
    up = registered(RUNS)
    b, n = statistics.median(baseline), statistics.median(now)
    body = "\n".join([
        f"`.venv/bin/python bench/agent_start.py` on {platform.node()} ({os.cpu_count()} cores), "
        f"{time.strftime('%Y-%m-%d')}: medians of {RUNS} fresh processes each (wall seconds, interpreter start "
        "included).",
        "",
        "| what | s | baseline, same run | ratio |",
        "|---|---:|---:|---:|",
        f"| an interpreter importing the agent (`gpu_agent.app`) | {n:.2f} | {b:.2f} with torchvision imported too | "
        f"{n / b:.2f}× |",
        f"| a real agent started until it registered (`local`, CPU) | {statistics.median(up):.2f} | | |",
    ])  # fmt: skip
    print(body)
    from bench.perf_doc import write_section

    write_section("Agent start (bench/agent_start.py)", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How long an agent takes to start: `python bench/agent_start.py`.

Every job on a machine type without a running agent, every fleet instance and most integration tests wait for an
agent to start. Two figures, each over RUNS fresh processes: importing the agent (`gpu_agent.app`) against the
baseline in the same run, the same import with torchvision imported first (what every start did before torchvision
was left to the step and input benchmarks that need it); and a real agent's start until it has registered in
PostgreSQL (a scratch database and Redis db; it registers once its Celery worker is ready), against the same agent
with Celery's start-up handshake (mingle and gossip, which every start waited on before the agent turned them off),
the two started in turn.
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
# The agent as `python -m gpu_agent` starts it, but with Celery's handshake: its worker arguments less WORKER_FLAGS.
WITH_HANDSHAKE = (
    "import gpu_agent.app as a, gpu_agent.__main__ as m, shared.core.tasks as t; run = a.app.worker_main; "
    "a.app.worker_main = lambda argv: run([x for x in argv if x not in t.WORKER_FLAGS]); m.main()"
)


def imported(before: str) -> float:
    """Seconds a fresh interpreter takes to import the agent, after `before`."""
    code = f"import time; {before}; t = time.perf_counter(); import gpu_agent.app; print(time.perf_counter() - t)"
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, cwd=ROOT)
    return time.perf_counter() - started


def registered(runs: int) -> tuple[list[float], list[float]]:
    """Seconds from starting a real agent to its row in `agents`, `runs` times each: (as it starts, with Celery's
    handshake)."""
    import psycopg2

    from shared.core.migrate import migrate
    from tests.support.agent_role import agent_url
    from tests.support.services import fresh_database, fresh_redis_db, server_urls

    admin_db, redis_server = server_urls()
    now: list[float] = []
    before: list[float] = []
    with fresh_database(admin_db) as db, fresh_redis_db(redis_server) as redis, tempfile.TemporaryDirectory() as logs:
        migrate(db)
        env = {**os.environ, "DATABASE_URL": agent_url(db), "REDIS_URL": redis}
        for i in range(2 * runs):
            command = [sys.executable, "-m", "gpu_agent"] if i % 2 == 0 else [sys.executable, "-c", WITH_HANDSHAKE]
            started = time.perf_counter()
            with open(Path(logs) / f"agent{i}.log", "wb") as log:
                proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log)
            while True:
                with psycopg2.connect(db) as conn, conn.cursor() as cur:
                    cur.execute("SELECT count(*) FROM agents WHERE stopped_at IS NULL")
                    up = cur.fetchone()[0]  # type: ignore[index]
                conn.close()
                if up:
                    break
                if proc.poll() is not None:
                    raise RuntimeError(f"the agent exited: {(Path(logs) / f'agent{i}.log').read_text()[-2000:]}")
                time.sleep(0.05)
            (now if i % 2 == 0 else before).append(time.perf_counter() - started)
            proc.terminate()
            proc.wait(60)
    return now, before


def main() -> int:
    from bench.perf_doc import ratio_row, write_section

    baseline = [imported("import torchvision") for _ in range(RUNS)]
    now = [imported("pass") for _ in range(RUNS)]
    up, handshake = registered(RUNS)
    u, h = statistics.median(up), statistics.median(handshake)
    b, n = statistics.median(baseline), statistics.median(now)
    body = "\n".join([
        f"`.venv/bin/python bench/agent_start.py` on {platform.node()} ({os.cpu_count()} cores), "
        f"{time.strftime('%Y-%m-%d')}: medians of {RUNS} fresh processes each (wall seconds, interpreter start "
        "included).",
        "",
        "| what | s | baseline, same run | ratio |",
        "|---|---:|---:|---:|",
        ratio_row("an interpreter importing the agent (`gpu_agent.app`)", n, b,
                  baseline_note=" with torchvision imported too"),
        ratio_row("a real agent started until it registered (`local`, CPU)", u, h,
                  baseline_note=" with Celery's start-up handshake"),
    ])  # fmt: skip
    print(body)
    write_section("Agent start (bench/agent_start.py)", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())

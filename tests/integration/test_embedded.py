"""The embedded PostgreSQL and Redis (shared/core/embedded.py): the whole stack on them, forced beside the machine's own
servers, without touching those; an answering server wins; `scripts/down.sh` leaves no server running."""

import os
import shlex
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import psycopg2
import pytest
import redis

from tests.support.stack import ROOT, bearer, free_port
from tests.support.wait import job_finished

VENV = str(Path(sys.executable).parent.parent)
TRAINCAST = str(Path(sys.executable).parent / "traincast")
# A job the local agent must measure (resnet18's layers at batch 2, 32 px) and the calibrated model then predicts.
JOB = {"cnns": ["resnet18"], "machines": ["local"], "batch_sizes": [2], "image_size": 32, "epochs": 1}
CALIBRATE = ["calibrate", "--machine", "local", "--cnns", "mobilenet_v2,squeezenet1_1", "--batch-sizes", "2,4"]


def exports(text: str) -> dict[str, str]:
    """The `export NAME=value` lines of shared.core.embedded's output."""
    pairs = (shlex.split(line)[1].split("=", 1) for line in text.splitlines() if line.startswith("export "))
    return dict(pairs)


def embedded(command: str, run: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`python -m shared.core.embedded up|down RUN`."""
    argv = [sys.executable, "-m", "shared.core.embedded", command, str(run)]
    return subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=180)


def processes_under(run: Path) -> list[str]:
    """Command lines of the processes that name the run folder (the servers name their data folders)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        line = " ".join(proc.info["cmdline"] or [])
        if str(run) in line:
            found.append(line)
    return found


def job_rows(url: str, job_id: str) -> int:
    """How many jobs rows with this id the database at url holds (0 where it has no jobs table yet)."""
    with psycopg2.connect(url, connect_timeout=5) as conn, conn.cursor() as cur:
        cur.execute("SELECT to_regclass('jobs') IS NOT NULL")
        row = cur.fetchone()
        if not row or not row[0]:
            return 0
        cur.execute("SELECT count(*) FROM jobs WHERE id = %s", (job_id,))
        counted = cur.fetchone()
    conn.close()
    return int(counted[0]) if counted else 0


@pytest.fixture
def forced(service_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """Environment of `make up` with TRAINCAST_EMBEDDED=1, a run folder and ports of this test's own."""
    env = {**os.environ, **service_env, "VENV": VENV, "TRAINCAST_RUN_DIR": str(tmp_path / "run")}
    env.pop("TRAINCAST_API_KEY")  # this run's key is in the machine's database, not in the embedded one
    env |= {"TRAINCAST_EMBEDDED": "1", "API_PORT": str(free_port())}
    env |= {"TRAINCAST_EMBEDDED_PG_PORT": str(free_port()), "TRAINCAST_EMBEDDED_REDIS_PORT": str(free_port())}
    return env


def test_forced_embedded_servers_run_the_whole_path_and_down_stops_them(
    forced: dict[str, str], service_env: dict[str, str]
) -> None:
    """up.sh with TRAINCAST_EMBEDDED=1 on a machine whose own servers answer: migrations, API, worker and agent
    run on the embedded servers; calibration and a local job succeed there, and the job is in the embedded cluster,
    not in the machine's; down.sh stops every process and server, and the data is there at the next start."""
    run, env = Path(forced["TRAINCAST_RUN_DIR"]), forced
    pg_port, redis_port = env["TRAINCAST_EMBEDDED_PG_PORT"], env["TRAINCAST_EMBEDDED_REDIS_PORT"]
    try:
        up = subprocess.run([str(ROOT / "scripts/up.sh")], env=env, capture_output=True, text=True, timeout=300)
        assert up.returncode == 0, up.stdout + up.stderr
        said = up.stdout + up.stderr
        assert f"TRAINCAST_EMBEDDED=1: started an embedded PostgreSQL at 127.0.0.1:{pg_port}, data in {run}/pg" in said
        assert f"TRAINCAST_EMBEDDED=1: started an embedded Redis at 127.0.0.1:{redis_port}, data in {run}/redis" in said
        urls = exports((run / "services.env").read_text())
        # The configured database name and Redis db number, on the embedded servers.
        database, db_number = (service_env[name].rsplit("/", 1)[1] for name in ("DATABASE_URL", "REDIS_URL"))
        assert urls == {
            "DATABASE_URL": f"postgresql://postgres@127.0.0.1:{pg_port}/{database}",
            "REDIS_URL": f"redis://127.0.0.1:{redis_port}/{db_number}",
        }
        with psycopg2.connect(urls["DATABASE_URL"]) as conn, conn.cursor() as cur:
            cur.execute("SHOW data_directory")
            assert Path(cur.fetchone()[0]).resolve() == (run / "pg").resolve()  # type: ignore[index]
        conn.close()
        assert redis.Redis.from_url(urls["REDIS_URL"]).info("server")["tcp_port"] == int(redis_port)

        key = (run / "admin.key").read_text().strip()
        api = f"http://127.0.0.1:{env['API_PORT']}"
        cli_env = {**env, **urls, "TRAINCAST_API_URL": api, "TRAINCAST_API_KEY": key}
        args = [TRAINCAST, *CALIBRATE, "--image-size", "32", "--timeout", "300"]
        cal = subprocess.run(args, env=cli_env, capture_output=True, text=True, timeout=400)
        assert cal.returncode == 0, cal.stdout + cal.stderr + (run / "agent.log").read_text()[-3000:]

        with httpx.Client(base_url=api, headers=bearer(key), timeout=30) as client:
            job_id = client.post("/v1/jobs", json=JOB).raise_for_status().json()["id"]
            job = job_finished(lambda: client.get(f"/v1/jobs/{job_id}").json(), job_id, 240,
                               lambda: (run / "worker.log").read_text())  # fmt: skip
        assert job["status"] == "succeeded", (job, (run / "worker.log").read_text()[-3000:])
        assert job["result"]["predictions"][0]["source"] == "benchmarked"
        assert job["progress"]["layer_benchmarks"]["pending"] == 0
        assert job_rows(urls["DATABASE_URL"], job_id) == 1
        assert job_rows(service_env["DATABASE_URL"], job_id) == 0
        machine_types = service_env["DATABASE_URL"].rsplit("/", 1)[0] + "/traincast"  # the machine's own stack, if any
        if _exists(machine_types):
            assert job_rows(machine_types, job_id) == 0

        down = subprocess.run([str(ROOT / "scripts/down.sh")], env=env, capture_output=True, text=True, timeout=300)
        assert down.returncode == 0, down.stdout + down.stderr
        assert f"embedded PostgreSQL at 127.0.0.1:{pg_port} stopped" in down.stdout, down.stdout
        assert f"embedded Redis at 127.0.0.1:{redis_port} stopped" in down.stdout, down.stdout
        assert processes_under(run) == []
        assert (run / "pg" / "PG_VERSION").exists() and (run / "redis" / "dump.rdb").exists()

        again = embedded("up", run, env)  # data kept between runs: the job is still there
        assert again.returncode == 0, again.stderr
        assert job_rows(exports(again.stdout)["DATABASE_URL"], job_id) == 1
    finally:
        subprocess.run([str(ROOT / "scripts/down.sh")], env=env, capture_output=True, timeout=300)
    assert processes_under(run) == []


def _exists(url: str) -> bool:
    try:
        psycopg2.connect(url, connect_timeout=5).close()
        return True
    except psycopg2.OperationalError:
        return False


def test_an_answering_server_wins_and_a_silent_one_on_loopback_gets_an_embedded_one(
    service_env: dict[str, str], tmp_path: Path
) -> None:
    """Servers answering at DATABASE_URL / REDIS_URL are used as they are (nothing started, nothing exported);
    where nothing answers on a loopback port, an embedded server starts on that port, saying so in one line;
    TRAINCAST_EMBEDDED=0 starts none. The run folder is given relative, as scripts/up.sh gives .run."""
    run = tmp_path / "run"
    rel = Path(os.path.relpath(run, ROOT))
    env = {k: v for k, v in os.environ.items() if k != "TRAINCAST_EMBEDDED"} | service_env
    external = embedded("up", rel, env)
    assert external.returncode == 0 and external.stdout == "" and external.stderr == "", external
    assert not (run / "pg").exists() and not (run / "redis").exists()

    pg_port, redis_port = free_port(), free_port()
    silent = env | {
        "DATABASE_URL": f"postgresql://postgres@127.0.0.1:{pg_port}/traincast",
        "REDIS_URL": f"redis://127.0.0.1:{redis_port}/3",
    }
    refused = embedded("up", rel, silent | {"TRAINCAST_EMBEDDED": "0"})
    assert refused.returncode == 0 and refused.stdout == "" and not (run / "pg").exists()
    try:
        started = embedded("up", rel, silent)
        assert started.returncode == 0, started.stderr
        assert started.stderr.splitlines() == [
            f"no PostgreSQL at 127.0.0.1:{pg_port}: started an embedded one at 127.0.0.1:{pg_port}, data in {rel}/pg",
            f"no Redis at 127.0.0.1:{redis_port}: started an embedded one at 127.0.0.1:{redis_port}, "
            f"data in {rel}/redis",
        ]
        assert exports(started.stdout) == {"DATABASE_URL": silent["DATABASE_URL"], "REDIS_URL": silent["REDIS_URL"]}
        assert (run / "pg" / "PG_VERSION").exists() and (run / "redis" / "valkey.pid").exists()
        with psycopg2.connect(f"postgresql://postgres@127.0.0.1:{pg_port}/postgres") as conn, conn.cursor() as cur:
            cur.execute("SHOW server_version_num")
            assert int(cur.fetchone()[0]) >= 150000  # type: ignore[index]
        conn.close()
        assert redis.Redis.from_url(silent["REDIS_URL"]).ping()
        # Started again (make up after make run): the running ones are used, none started twice.
        reused = embedded("up", rel, silent)
        assert reused.stderr.splitlines() == [
            f"embedded PostgreSQL at 127.0.0.1:{pg_port}, data in {rel}/pg",
            f"embedded Redis at 127.0.0.1:{redis_port}, data in {rel}/redis",
        ]
    finally:
        stopped = embedded("down", rel, env)
    assert len(stopped.stdout.splitlines()) == 2, stopped
    assert processes_under(run) == []

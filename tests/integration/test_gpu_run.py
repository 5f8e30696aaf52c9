"""The one-call GPU script's CPU dry run: every stage runs and writes every figure docs/GPU.md names.

It runs through scripts/gpu_run_host_python.sh, as on a GPU host without an index (this venv's Python stands for the
host's, an empty folder for the wheels it lacks), so both scripts are run."""

import json
import os
import socket
import subprocess
from pathlib import Path

from shared.measurements import transfer
from tests.support.stack import ROOT


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_dry_run_writes_the_bundle_and_every_figure(tmp_path: Path) -> None:
    """scripts/gpu_run.sh on the CPU: a private stack up and down, a calibration, a new and a held-out CNN, a bundle."""
    out, run_dir, wheels = tmp_path / "out", tmp_path / "run", tmp_path / "wheels"
    wheels.mkdir()
    env = {**os.environ, "TRAINCAST_DRY_RUN": "1", "TRAINCAST_RUN_DIR": str(run_dir), "API_PORT": str(free_port()),
           "TRAINCAST_HOST_PYTHON": str(ROOT / ".venv" / "bin" / "python"),
           "TRAINCAST_WORK_DIR": str(tmp_path / "work"),
           # ports of its own: another test's embedded servers may hold the defaults
           "TRAINCAST_EMBEDDED_PG_PORT": str(free_port()),
           "TRAINCAST_EMBEDDED_REDIS_PORT": str(free_port())}  # fmt: skip
    done = subprocess.run(["scripts/gpu_run_host_python.sh", str(wheels), str(out), "--budget-s", "600"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["dry_run"] is True and summary["budget_s"] == 600 and "errors" not in summary
    assert set(summary["stages_s"]) == {"calibrate", "new CNN", "held-out CNNs", "bundle"}
    calibration = summary["calibration"]
    assert calibration["wall_s"] > 0 and calibration["rows"] > 0 and calibration["measurements_per_s"] > 0
    one = calibration["configs"]["sgd/fp32"]
    assert one["completed"] is True and one["done"] == one["needed"] > 0 and one["rows"]["step"] > 0
    assert calibration["loco_mape"]["sgd/fp32"] >= 0 and "sgd/fp32" in calibration["interval_coverage"]
    assert summary["new_cnn"]["status"] == "succeeded" and len(summary["new_cnn"]["batch_sizes"]) == 5
    held = summary["held_out"]
    assert held["points"] and all(p["measured_ms"] > 0 and p["model_ms"] > 0 for p in held["points"])
    assert held["mean_ape_vs_steps_here"]["sgd/fp32"] >= 0
    assert json.loads((out / "setup.json").read_text())["stack_up_s"] >= 0
    # The bundle is whole and names every row the summary counted.
    with (out / "bundle.jsonl.gz").open("rb") as raw:
        bundle = transfer.read(raw)
    assert bundle.machine_types == ["local"]
    assert len(bundle.rows["step"]) == summary["bundle"]["rows"]["step"] > 0
    # The stack is down again: the supervisors' pid files are gone; its logs came back beside the figures.
    assert not list(run_dir.glob("*.pid"))
    assert (out / "agent.log").stat().st_size > 0 and (out / "run.log").read_text().startswith("host: ")


def test_a_calibration_cut_short_leaves_no_work_waiting() -> None:
    """What a timed-out calibration left queued for the agent is dropped (counted), so later stages do not wait."""
    from bench import gpu_run
    from shared.core import tasks

    client = tasks.redis_client()
    keys = tasks.queue_keys(tasks.bench_queue("local"))
    client.rpush(keys[0], "a", "b")
    client.rpush(keys[-1], "c")
    client.rpush(tasks.bench_queue("p3.2xlarge"), "kept")
    try:
        assert gpu_run.drop_waiting_work() == 3
        assert sum(int(client.llen(k)) for k in keys) == 0
        assert client.llen(tasks.bench_queue("p3.2xlarge")) == 1  # another machine type's work stays
    finally:
        client.delete(*keys, tasks.bench_queue("p3.2xlarge"))

"""The whole path with real processes: HTTP → Redis/Celery → worker → PostgreSQL → agent → predictor."""

import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from prediction import features
from shared.core.db import one, transaction
from tests.support.onnx_models import export
from tests.support.stack import Stack, http, queued_tasks
from tests.support.wait import job_finished, wait_until
from worker import predictor

JOB = {"cnns": ["resnet18"], "machines": ["local"], "batch_sizes": [1, 2], "image_size": 32, "epochs": 2}
TRAINCAST = str(Path(sys.executable).parent / "traincast")


def wait_for(stack: Stack, job_id: str, timeout: float = 240) -> dict[str, Any]:
    """Poll a job over HTTP until it finishes."""
    return job_finished(lambda: http.get(f"{stack.url}/v1/jobs/{job_id}").json(), job_id, timeout,
                        lambda: stack.log("worker"))  # fmt: skip


def measured() -> tuple[int, Any]:
    """How many layer benchmarks are stored, and when the newest was."""
    with transaction() as cur:
        cur.execute("SELECT count(*) AS n, max(measured_at) AS last FROM layer_benchmarks")
        row = one(cur)
    return int(row["n"]), row["last"]


OP_ROWS = """
SELECT s.op, b.batch_size, b.forward_ms, b.backward_ms, b.environment_id, e.details
FROM op_benchmarks b JOIN op_signatures s ON s.id = b.op_signature_id JOIN environments e ON e.id = b.environment_id
JOIN cnn_ops m ON m.op_signature_id = s.id
WHERE m.cnn_name = %s AND m.image_size = 32 AND b.machine_type = 'local'"""


def op_rows(cnn: str) -> list[dict[str, Any]]:
    """The op benchmark rows stored for a CNN's ops at 32 px on local, with their environment."""
    with transaction() as cur:
        cur.execute(OP_ROWS, (cnn,))
        return [dict(r) for r in cur.fetchall()]


def cli(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the installed traincast command against the stack."""
    env = {**stack.env, "TRAINCAST_API_URL": stack.url}
    return subprocess.run([TRAINCAST, *args], env=env, capture_output=True, text=True, timeout=600)


def test_calibrate_predict_and_reuse(full_stack: Stack, clean_db: None) -> None:
    """Calibrate local, predict over HTTP, then the same job again runs no benchmark."""
    cal = cli(
        full_stack,
        "calibrate",
        "--machine",
        "local",
        "--cnns",
        "mobilenet_v2,squeezenet1_1",
        "--batch-sizes",
        "2,4",
        "--image-size",
        "32",
        "--timeout",
        "300",
    )
    assert cal.returncode == 0, cal.stderr
    assert "leave-one-CNN-out MAPE: model" in cal.stdout and "P10-P90 holds" in cal.stdout
    assert re.search(r"^stored: \w+ \(inner folds: .*\); P10-P90 x\d+\.\d\d-x\d+\.\d\d of the answer", cal.stdout, re.M)

    r = http.post(f"{full_stack.url}/v1/jobs", json=JOB)
    assert r.status_code == 202
    job = wait_for(full_stack, r.json()["id"])
    assert job["status"] == "succeeded", job
    points = job["result"]["predictions"]
    assert [p["batch_size"] for p in points] == [1, 2] and all(p["iteration_seconds"] > 0 for p in points)
    assert job["result"]["models"]["local"]["version"] == 1
    assert job["progress"]["layer_benchmarks"]["pending"] == 0
    assert job["progress"]["op_benchmarks"]["pending"] == 0 < job["progress"]["op_benchmarks"]["needed"]
    # The agent measured resnet18's ops at both batch sizes and its SGD step (batch size 0), each with its environment.
    rows = op_rows("resnet18")
    assert {1, 2} <= {r["batch_size"] for r in rows if r["op"] != "optimizer"}  # shared ops: calibration sizes too
    assert [r["batch_size"] for r in rows if r["op"] == "optimizer"] == [0]
    assert all(r["details"].get("torch") for r in rows)
    assert any(r["forward_ms"] and r["forward_ms"] > 0 for r in rows if r["op"] == "optimizer")
    # The model's features saw the calibration CNNs' measured ops and optimizer steps.
    points = predictor.dataset("local")
    at = {n: i for i, n in enumerate(features.NAMES)}
    assert points and all(p.x[at["other_ms"]] > 0 and p.x[at["optimizer_measured"]] == 1 for p in points)

    before = measured()
    received = full_stack.log("agent").count("gpu_agent.bench_layers")
    # Counted by their "received" lines: a "succeeded" line of the first job's last task may still follow.
    received_ops = len(re.findall(r"gpu_agent\.bench_ops\[[^\]]+\] received", full_stack.log("agent")))
    again = wait_for(full_stack, http.post(f"{full_stack.url}/v1/jobs", json=JOB).json()["id"])
    assert again["status"] == "succeeded"  # from stored timings: nothing measured, nothing sent (below)
    assert measured() == before
    assert full_stack.log("agent").count("gpu_agent.bench_layers") == received
    assert len(re.findall(r"gpu_agent\.bench_ops\[[^\]]+\] received", full_stack.log("agent"))) == received_ops

    out = cli(full_stack, "predict", "resnet18", "--batch-sizes", "1,2", "--image-size", "32", "--epochs", "2")
    assert out.returncode == 0, out.stderr
    assert "fastest at batch" in out.stdout and "resnet18  local" in out.stdout
    listed = cli(full_stack, "jobs")
    assert listed.returncode == 0 and job["id"] in listed.stdout


def test_job_for_an_uploaded_onnx_cnn(full_stack: Stack) -> None:
    """An ONNX upload is used by name in a job; its layers are the built-in model's, measured once."""
    name = f"uploaded-{uuid.uuid4().hex[:8]}"
    files = {"file": ("squeezenet.onnx", export("squeezenet1_1"))}
    assert http.post(f"{full_stack.url}/v1/cnns", data={"name": name}, files=files).status_code == 201
    body = {**JOB, "cnns": [name, "squeezenet1_1"], "batch_sizes": [2]}
    job = wait_for(full_stack, http.post(f"{full_stack.url}/v1/jobs", json=body).json()["id"])
    assert job["status"] == "succeeded", job
    uploaded, builtin = job["result"]["predictions"]  # in the order the request named them
    assert uploaded["cnn"] == name and uploaded["conv_ms"] == builtin["conv_ms"] > 0


def test_work_waits_for_a_stopped_agent(full_stack: Stack) -> None:
    """With the agent stopped, a job waits (nothing lost); a restarted agent finishes it."""
    assert full_stack.stop("agent") == 0  # SIGTERM: warm shutdown
    r = http.post(f"{full_stack.url}/v1/jobs", json={**JOB, "batch_sizes": [3]})
    job_id = r.json()["id"]
    # Planned, its layer work queued for local, and nobody there to take it: it waits.
    wait_until(lambda: "gpu_agent.bench_layers" in queued_tasks("bench.local"), 60, "the job's work to be queued")
    waiting = http.get(f"{full_stack.url}/v1/jobs/{job_id}").json()
    assert waiting["status"] == "running" and waiting["progress"]["layer_benchmarks"]["pending"] > 0
    full_stack.start("agent")
    assert wait_for(full_stack, job_id)["status"] == "succeeded"

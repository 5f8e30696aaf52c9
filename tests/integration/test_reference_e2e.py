"""A fresh install with no agent and no fleet: every GPU machine type answered over HTTP, labelled, by the real
API and worker processes; the CLI shows which answer is which and registers a GPU by its specs."""

import re

from tests.integration.test_end_to_end import cli, wait_for
from tests.integration.test_reference_jobs import OWN_GPU
from tests.support.stack import Stack, http


def test_every_gpu_type_answers_three_cnns_over_256_batch_sizes(no_agent: Stack, clean_db: None) -> None:
    """resnet50, vgg16 and mobilenet_v3_large on every GPU machine type at batch sizes 1–256: the job succeeds
    without any agent, and every point is a labelled reference prediction with a time and a price."""
    listed = [m for m in http.get(f"{no_agent.url}/v1/machines").json()["machines"] if m["gpu"]]
    gpu_types = [m["name"] for m in listed]
    # A type someone registered earlier on this database may cost nothing (their own GPUs): its cost is 0, not more.
    free = {m["name"] for m in listed if not m["price_usd_per_hour"]}
    body = {
        "cnns": ["resnet50", "vgg16", "mobilenet_v3_large"],
        "machines": gpu_types,
        "batch_sizes": {"min": 1, "max": 256},
    }
    submitted = http.post(f"{no_agent.url}/v1/jobs", json=body)
    assert submitted.status_code == 202, submitted.text
    job = wait_for(no_agent, submitted.json()["id"], timeout=300)
    assert job["status"] == "succeeded", job.get("error")
    points = job["result"]["predictions"]
    assert len(points) == 3 * len(gpu_types) * 256
    assert {p["source"] for p in points} == {"reference"}
    fitting = [p for p in points if p["fits_in_memory"] is not False]
    assert len(fitting) > len(points) / 2  # a K80 or a T4 cannot take VGG-16 at batch 256; most GPUs can
    assert all(p["iteration_seconds"] > 0 and p["reference_error_pct"] > 0 for p in fitting)
    assert all(p["cost_usd"] == 0 if p["machine"] in free else p["cost_usd"] > 0 for p in fitting)
    unfit = [p for p in points if p["fits_in_memory"] is False]  # by its flag: `p not in fitting` compares 45,312²
    assert all(p["iteration_seconds"] is None and p["cost_usd"] is None for p in unfit)
    assert {b["min_cost"]["source"] for b in job["result"]["best"]} == {"reference"}


def test_cli_labels_reference_answers_and_registers_a_gpu(no_agent: Stack, clean_db: None) -> None:
    """`traincast predict` says `reference` and its P10-P90 band per row; `machines add` registers a GPU predicted at
    once."""
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in OWN_GPU.items() if k != "name"]
    added = cli(no_agent, "machines", "add", "cli-lab-box", *flags)
    assert added.returncode == 0, added.stderr
    assert "cli-lab-box: registered (2 x RTX-6000-Ada" in added.stdout
    listed = cli(no_agent, "machines", "list", "--provider", "own")
    assert listed.returncode == 0 and "cli-lab-box" in listed.stdout and "g4dn.xlarge" not in listed.stdout
    predicted = cli(no_agent, "predict", "resnet18", "--machine", "cli-lab-box,g4dn.xlarge", "--batch-sizes", "8,16")
    assert predicted.returncode == 0, predicted.stderr
    lines = predicted.stdout.splitlines()
    rows = [line for line in lines if line.startswith("resnet18 ") and " on " not in line]
    assert len(rows) == 4 and all(line.rstrip().endswith(" reference") for line in rows)
    header = next(line for line in lines if line.startswith("cnn "))
    assert "P10-P90" in header
    # The band column is the point's own P10-P90 over its answer (x<low>-x<high>, low < 1 < high).
    bands = [re.search(r"x(\d+\.\d+)-x(\d+\.\d+)", line) for line in rows]
    assert all(b and float(b[1]) < 1 < float(b[2]) for b in bands), rows
    best = [line for line in lines if line.startswith("resnet18 on ")]
    assert len(best) == 2 and all(line.endswith("[reference]") for line in best)
    assert all("largest batch that fits" in line for line in best)
    assert "training: sgd, fp32, NCHW (default), cudnn.benchmark off (default)" in lines
    assert all(" kWh" in line for line in rows)  # the energy column (an upper bound)
    amp = cli(no_agent, "predict", "resnet18", "--machine", "g4dn.xlarge", "--batch-sizes", "8",
              "--optimizer", "adamw", "--precision", "amp_fp16")  # fmt: skip
    assert amp.returncode == 0, amp.stderr
    assert "training: adamw (weight decay 0.01), amp_fp16, NCHW (default), cudnn.benchmark off (default)" in (
        amp.stdout.splitlines()
    ), amp.stdout
    bad = cli(no_agent, "machines", "add", "cli-bad", *flags[:-1], "--gpu-l2-mib=-3")
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "--gpu-l2-mib" in bad.stderr  # the flag typed

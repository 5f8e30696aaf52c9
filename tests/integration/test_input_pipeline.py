"""The input pipeline: the agent measures JPEG decode and augmentation on its host; a point's step is the
slower of that and the GPU step, flagged when the input is the bottleneck, with the data echoing factor that removes
it; a machine type its agent has not measured is answered from the others' rate, labelled reference."""

import statistics
from typing import Any

import pytest

from gpu_agent import app as agent
from gpu_agent import input_bench
from shared import machine_cpus, machine_types
from shared.core.db import transaction
from shared.jobs.store import JobRow
from shared.machine_request import MachineCreate
from shared.measurements import inputs
from tests.integration.test_end_to_end import cli, wait_for
from tests.integration.test_reference_jobs import run
from tests.support.stack import Stack, http
from tests.support.wait import wait_until

# An A100 fed by 4 vCPUs: the issue's input-bound case (the A100's figures as the catalog's p4d carries them).
A100_4VCPU: dict[str, Any] = {
    "name": "a100-4vcpu", "gpu": "A100-SXM4-40GB", "gpu_count": 1, "gpu_memory_gib": 40, "gpu_fp32_tflops": 19.5,
    "gpu_fp16_tflops": 312, "gpu_mem_bandwidth_gbs": 1555, "gpu_sm_count": 108, "gpu_l2_mib": 40,
    "gpu_tdp_watts": 400, "price_usd_per_hour": 3.0, "gpu_compute_capability": "8.0", "gpu_tf32_tflops": 156,
    "vcpus": 4,
}  # fmt: skip
P4D = "p4d.24xlarge"  # 8 x A100, 96 vCPUs
ROWS = "SELECT r.*, e.details FROM input_rates r JOIN environments e ON e.id = r.environment_id"


def stored_rates() -> list[dict[str, Any]]:
    """Every input_rates row with its environment's details."""
    with transaction() as cur:
        cur.execute(ROWS)
        return [dict(r) for r in cur.fetchall()]


def by_machine(job: JobRow) -> dict[tuple[str, int], dict[str, Any]]:
    """A succeeded job's points by (machine type, batch size)."""
    assert job["status"] == "succeeded", job["error"]
    assert job["result"] is not None
    return {(p["machine"], p["batch_size"]): p for p in job["result"]["predictions"]}


@pytest.fixture
def measured_here(clean_db: None) -> dict[str, Any]:
    """This host's rate, measured by the agent's own task under `local`, and the 4-vCPU A100 registered."""
    assert agent.bench_input("local") == 1
    assert agent.bench_input("local") == 0  # once per environment
    with transaction() as cur:
        cur.execute("DELETE FROM machine_types WHERE name = %s", (A100_4VCPU["name"],))
    machine_types.create(figures=MachineCreate(**A100_4VCPU))
    [row] = stored_rates()
    return row


def test_the_agent_measures_decode_and_augmentation_with_its_environment(measured_here: dict[str, Any]) -> None:
    """One row: per-image decode and augment in one worker, all CPUs together, the JPEGs' size, the environment."""
    row = measured_here
    assert row["machine_type"] == "local" and row["pipeline"] == inputs.PIPELINE
    assert row["decode_ms"] > 0 and row["augment_ms"] > 0 and row["host_cpus"] >= 1 and row["jpeg_kb"] > 10
    solo = 1000 / (row["decode_ms"] + row["augment_ms"])
    # Every CPU busy gives more than one worker alone, never more than each CPU at the solo rate (with slack).
    assert solo * 0.8 < row["images_per_s_all"] < solo * row["host_cpus"] * 1.5
    assert row["details"]["torch"] and row["details"]["torchvision"]
    assert len(row["stats"]["decode_ms_rounds"]) == row["stats"]["rounds"] >= 3
    # The all-CPU figure is the median of rounds the workers start together.
    rounds = row["stats"]["all_images_per_s_rounds"]
    assert len(rounds) == input_bench.ALL_ROUNDS and row["images_per_s_all"] == pytest.approx(
        statistics.median(rounds), rel=1e-3
    )


def test_four_vcpus_feeding_an_a100_is_input_bound_and_echoing_removes_it(measured_here: dict[str, Any]) -> None:
    """JPEGs on 4 vCPUs cannot keep an A100 busy with ResNet-18 at batch 256 in fp16: flagged, the step is the
    input's, the echo factor is the least that hides it; 96 vCPUs for 8 A100s are 3x the CPUs per GPU; in memory,
    no input cost."""
    job = dict(cnns=["resnet18"], machines=[A100_4VCPU["name"], P4D], batch_sizes=[64, 256], image_size=224,
               precision="amp_fp16")  # fmt: skip
    fed_job = run(**job, input={"source": "local_jpeg"})
    fed = by_machine(fed_job)
    plain = by_machine(run(**job))
    point, gpu_only = fed[(A100_4VCPU["name"], 256)], plain[(A100_4VCPU["name"], 256)]
    assert "input_ms" not in gpu_only  # images in memory: as before the input pipeline was modelled
    assert point["input_bound"] is True and point["input_bound_ratio"] > 1
    assert point["input_ms"] == pytest.approx(
        point["input_bound_ratio"] * gpu_only["iteration_seconds"] * 1000, rel=1e-3
    )
    assert point["iteration_seconds"] == pytest.approx(point["input_ms"] / 1000, rel=1e-4)
    # The least factor that hides the input: input / e within the GPU step, input / (e - 1) not.
    gpu_ms, e = gpu_only["iteration_seconds"] * 1000, point["echo_factor"]
    assert point["input_ms"] / e <= gpu_ms * 1.001 and point["input_ms"] / (e - 1) > gpu_ms * 0.999
    assert point["echo_speedup"] == pytest.approx(point["input_bound_ratio"], rel=1e-3)
    assert point["echo_total_seconds"] == pytest.approx(point["total_seconds"] / point["echo_speedup"], rel=1e-4)
    assert point["dataloader_workers"] == 4 and point["cost_usd"] > gpu_only["cost_usd"]
    # 12 vCPUs per GPU on p4d against 4: a third of the input time at the same per-vCPU rate; p4d's vCPUs are
    # hardware threads two to a core, so its rate is this host's moved to them (the own type's is not moved).
    assert fed_job["result"] is not None
    rates = {m: fed_job["result"]["inputs"][m]["images_per_s_per_cpu"] for m in (A100_4VCPU["name"], P4D)}
    assert rates[A100_4VCPU["name"]] == pytest.approx(measured_here["images_per_s_all"] / measured_here["host_cpus"],
                                                      abs=0.06)  # fmt: skip
    share = {1: 1.0, 2: machine_cpus.SMT_YIELD / 2}.get(measured_here["stats"].get("threads_per_core"))
    if share is not None:
        assert rates[P4D] == pytest.approx(rates[A100_4VCPU["name"]] * machine_cpus.SMT_YIELD / 2 / share, abs=0.1)
    moved = point["input_ms"] / 3 * rates[A100_4VCPU["name"]] / rates[P4D]
    assert fed[(P4D, 256)]["input_ms"] == pytest.approx(moved, rel=5e-3)
    for key, p in fed.items():
        # Decoded on 8 GPUs, replicas also wait for the slowest of them (none of it in memory, none on one GPU).
        waits = (p.get("ddp_losses_ms") or {}).get("stragglers", 0.0) / 1000
        assert (waits > 0) == (key[0] == P4D)
        assert p["iteration_seconds"] == pytest.approx(
            max(plain[key]["iteration_seconds"] + waits, p["input_ms"] / 1000), rel=1e-4
        )
        assert (p["echo_factor"] is None) == (not p["input_bound"])
    summary = fed_job["result"]
    assert summary["inputs"][A100_4VCPU["name"]]["source"] == "reference"
    assert "local" in summary["inputs"][P4D]["detail"] and "echo" in summary["input_note"]


def test_network_reads_and_workers(measured_here: dict[str, Any]) -> None:
    """Over a 0.25 Gbps link a p4d reads its JPEGs (images x jpeg_kb x 8 bits / bandwidth); one worker per GPU is
    slower than the default of every vCPU."""
    name = A100_4VCPU["name"]
    base = dict(cnns=["resnet18"], machines=[name], batch_sizes=[128], image_size=224)
    network = {"source": "network_jpeg", "network_gbps": 0.25, "jpeg_kb": 110}
    # ResNet-50: a GPU step longer than this host's augmentation of a GPU's batch (12 vCPUs each), whatever the model.
    net = by_machine(run(**base | {"machines": [P4D], "cnns": ["resnet50"]}, input=network))[(P4D, 128)]
    # A node reads the images of its 8 GPUs.
    assert net["input_ms"] == pytest.approx(8 * 128 * 110e3 * 8 / 0.25e9 * 1000, rel=1e-3) and net["input_bound"]
    # Reading is the bottleneck, not augmentation (12 vCPUs a GPU): echoing before augmentation removes it too, at
    # a factor no smaller than echoing after it.
    assert net["echo_factor_before_augmentation"] >= net["echo_factor"] > 1
    one = by_machine(run(**base, input={"source": "local_jpeg", "dataloader_workers": 1}))[(name, 128)]
    four = by_machine(run(**base, input={"source": "local_jpeg"}))[(name, 128)]
    assert one["dataloader_workers"] == 1 and one["input_ms"] == pytest.approx(four["input_ms"] * 4, rel=1e-3)


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ({"source": "network_jpeg"}, "needs network_gbps"),
        ({"source": "local_jpeg", "network_gbps": 10}, "only for input source network_jpeg"),
        ({"source": "memory", "dataloader_workers": 4}, "dataloader_workers needs"),
        ({"source": "nfs"}, "input.source"),
        ({"source": "local_jpeg", "dataloader_workers": 0}, "dataloader_workers"),
    ],
)
def test_bad_inputs_are_422(api_only: Stack, given: dict[str, Any], words: str) -> None:
    """Each is a problem+json 422 naming what is wrong."""
    r = http.post(f"{api_only.url}/v1/jobs", json={"cnns": ["resnet50"], "batch_sizes": [32], "input": given})
    assert r.status_code == 422, r.text
    assert words in r.text, r.text


def test_a_job_asking_for_jpegs_has_the_live_agent_measure_its_rate(full_stack: Stack, clean_db: None) -> None:
    """Real processes: the worker sends bench_input to the local agent, which stores this host's rate once."""
    body = {"cnns": ["resnet18"], "machines": ["local"], "batch_sizes": [1], "image_size": 32, "epochs": 1,
            "input": {"source": "local_jpeg"}}  # fmt: skip
    r = http.post(f"{full_stack.url}/v1/jobs", json=body)
    assert r.status_code == 202, r.text
    wait_for(full_stack, r.json()["id"])
    wait_until(stored_rates, timeout=120, what="the agent's input rate", log=lambda: full_stack.log("agent"))
    [row] = stored_rates()
    assert row["machine_type"] == "local" and row["images_per_s_all"] > 0


def test_cli_flags_an_input_bound_point_and_says_where_the_rate_came_from(no_agent: Stack, clean_db: None) -> None:
    """`traincast predict --input network_jpeg --network-gbps 0.25`: an input column with the bound and the echo
    factor, and a line saying the rate is the reference (measured on local); a bad combination: one line, exit 1."""
    assert agent.bench_input("local") == 1
    out = cli(no_agent, "predict", "resnet18", "--machine", P4D, "--batch-sizes", "128", "--input", "network_jpeg",
              "--network-gbps", "0.25")  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split()[-4:] == ["input", "P10-P90", "memory", "source"], lines[0]
    assert any("BOUND" in line and "echo" in line for line in lines), out.stdout
    assert any(line.startswith(f"input on {P4D}: not measured on {P4D} yet: reference") for line in lines)
    bad = cli(no_agent, "predict", "resnet18", "--machine", P4D, "--input", "network_jpeg")
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "needs network_gbps" in bad.stderr, bad.stderr

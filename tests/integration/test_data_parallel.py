"""Data-parallel training: every GPU of a machine type by default, GPU and node counts compared, the
all-reduce a step waits for, global batch, cost of every node; bad combinations refused at the door."""

from typing import Any

import pytest

from shared import machine_types
from shared.jobs.store import JobRow
from tests.integration.test_end_to_end import cli
from tests.integration.test_reference_jobs import run
from tests.support.stack import Stack, http

P5 = "p5.48xlarge"  # 8 x H100 SXM on NVSwitch, EFA between machines
NO_NETWORK = "Standard_NC24s_v3"  # 4 x V100 PCIe; Azure publishes no network figure for it (data/interconnect.csv)


def points_of(job: JobRow) -> list[dict[str, Any]]:
    """A succeeded job's points."""
    assert job["status"] == "succeeded", job["error"]
    assert job["result"] is not None
    return list(job["result"]["predictions"])


def test_resnet50_on_p5_uses_all_eight_gpus_and_four_nodes_cost_four_machines(clean_db: None) -> None:
    """Omitted gpus: all 8; nodes [1, 4]: the global batch, the all-reduce, a scaling efficiency at most 1, and
    four machines' price for the time, which is shorter."""
    price = machine_types.get_by_name(name=P5)["price_usd_per_hour"]
    job = run(cnns=["resnet50"], machines=[P5], batch_sizes=[32, 256], image_size=224, nodes=[1, 4])
    points = points_of(job)
    assert {(p["gpus_used"], p["nodes"], p["batch_size"]) for p in points} == {
        (8, n, b) for n in (1, 4) for b in (32, 256)
    }
    by = {(p["nodes"], p["batch_size"]): p for p in points}
    for (nodes, batch), p in by.items():
        assert p["global_batch_size"] == batch * 8 * nodes
        assert 0 < p["scaling_efficiency"] <= 1 and p["allreduce_ms"] > 0
        assert 0 <= p["exposed_allreduce_ms"] <= p["allreduce_ms"]
        losses = p["ddp_losses_ms"]  # images in memory: no replica waits for another's batch
        assert losses["bucket_copies"] > 0 and losses["contention"] >= 0 and losses["stragglers"] == 0
        extra = p["exposed_allreduce_ms"] + sum(losses.values())
        assert p["scaling_efficiency"] == pytest.approx(1 / (1 + extra / (p["iteration_seconds"] * 1000 - extra)),
                                                        abs=2e-4)  # fmt: skip
        assert p["cost_usd"] == pytest.approx(price * nodes * p["total_seconds"] / 3600, rel=1e-4)
        assert p["energy_kwh"] is not None
    for batch in (32, 256):
        one, four = by[(1, batch)], by[(4, batch)]
        assert four["iteration_seconds"] >= one["iteration_seconds"]  # more to exchange, over a slower link
        assert four["total_seconds"] < one["total_seconds"]  # but four times the images a step
        assert four["scaling_efficiency"] <= one["scaling_efficiency"]
    # A small per-GPU batch hides less of the all-reduce behind its shorter backward.
    assert by[(4, 32)]["scaling_efficiency"] < by[(4, 256)]["scaling_efficiency"]
    assert job["result"] is not None
    best = job["result"]["best"][0]
    assert (best["min_time"]["gpus"], best["min_time"]["nodes"]) == (8, 4)
    assert "data parallel" in job["result"]["parallel_note"]


def test_replicas_decoding_jpegs_wait_for_the_slowest(clean_db: None) -> None:
    """Decoded input: each multi-GPU step adds the wait for the slowest replica, more on more GPUs; in memory none."""
    ask = dict(cnns=["resnet50"], machines=[P5], batch_sizes=[128], image_size=224, gpus=[1, 2, 8])
    decoded = {p["gpus_used"]: p for p in points_of(run(**ask, input={"source": "local_jpeg"}))}
    memory = {p["gpus_used"]: p for p in points_of(run(**ask))}
    assert "ddp_losses_ms" not in decoded[1] or decoded[1]["ddp_losses_ms"] is None
    assert 0 < decoded[2]["ddp_losses_ms"]["stragglers"] < decoded[8]["ddp_losses_ms"]["stragglers"]
    assert memory[8]["ddp_losses_ms"]["stragglers"] == 0
    assert decoded[8]["scaling_efficiency"] < memory[8]["scaling_efficiency"] - 0.05


def test_gpu_counts_compared_and_one_gpu_as_before(clean_db: None) -> None:
    """gpus [1, 2, 4, 8] on one p5: each step at the same per-GPU batch takes at least as long as with fewer GPUs,
    an epoch less; one GPU of it is what a one-GPU machine with the same GPU answers, with no all-reduce."""
    job = run(cnns=["resnet18"], machines=[P5], batch_sizes=[64], image_size=224, gpus=[1, 2, 4, 8])
    points = sorted(points_of(job), key=lambda p: p["gpus_used"])
    assert [p["gpus_used"] for p in points] == [1, 2, 4, 8]
    steps = [p["iteration_seconds"] for p in points]
    epochs = [p["epoch_seconds"] for p in points]
    assert steps == sorted(steps) and epochs == sorted(epochs, reverse=True)
    assert points[0]["allreduce_ms"] == 0 and points[0]["scaling_efficiency"] == 1
    single = run(cnns=["resnet18"], machines=["a3-highgpu-1g"], batch_sizes=[64], image_size=224)
    assert points_of(single)[0]["iteration_seconds"] == pytest.approx(points[0]["iteration_seconds"], rel=1e-4)


def test_a_two_phase_schedule_is_priced_beside_the_best_constant_batch(clean_db: None) -> None:
    """Sony's shape: a few epochs at a small batch, then a large one (added to the batch sizes) on 4 nodes; each
    phase is its epochs x its point's epoch time and cost, the total their sum, and the best constant batch size
    over the same epochs is shown with the ratio."""
    schedule = [{"epochs": 5, "batch_size": 32}, {"epochs": 85, "batch_size": 1024, "nodes": 4}]
    job = run(cnns=["resnet50"], machines=[P5], batch_sizes=[32, 256], image_size=224, nodes=[1, 4],
              precision="amp_bf16", schedule=schedule, schedule_batch="per_gpu")  # fmt: skip
    points = points_of(job)
    assert sorted({p["batch_size"] for p in points}) == [32, 256, 1024]
    assert job["result"] is not None
    [priced] = job["result"]["schedules"]
    index = {(p["batch_size"], p["gpus_used"], p["nodes"]): p for p in points}
    first, second = priced["phases"]
    assert (first["gpus"], first["nodes"], second["gpus"], second["nodes"]) == (8, 4, 8, 4)  # omitted: the most
    for phase in priced["phases"]:
        point = index[(phase["batch_size"], phase["gpus"], phase["nodes"])]
        assert phase["seconds"] == pytest.approx(point["epoch_seconds"] * phase["epochs"])
        assert phase["cost_usd"] == pytest.approx(point["cost_usd"] / 90 * phase["epochs"])
    assert priced["epochs"] == 90 and priced["missing"] is None
    assert priced["total_seconds"] == pytest.approx(first["seconds"] + second["seconds"])
    usable = [p for p in points if p["fits_in_memory"] is not False]
    fastest = min(usable, key=lambda p: p["epoch_seconds"])
    assert priced["best_constant"]["total_seconds"] == pytest.approx(fastest["epoch_seconds"] * 90)
    assert priced["time_vs_best_constant"] == pytest.approx(
        priced["total_seconds"] / priced["best_constant"]["total_seconds"]
    )
    assert "accuracy" in job["result"]["schedule_note"]


def test_internode_gbps_replaces_the_catalog_network(clean_db: None) -> None:
    """5 Gbit/s between p5s (NCCL over one TCP flow on AWS) in place of EFA's 3,200: the same one-machine points,
    a slower multi-machine step that exposes more all-reduce, and each multi-machine point says the figure used."""
    common = {"cnns": ["resnet50"], "machines": [P5], "batch_sizes": [64], "image_size": 224, "nodes": [1, 2]}
    fabric = {p["nodes"]: p for p in points_of(run(**common))}
    tcp = {p["nodes"]: p for p in points_of(run(**common, internode_gbps=5.0))}
    assert fabric[2]["internode_gbps"] == 3200 and tcp[2]["internode_gbps"] == 5.0
    assert fabric[1].get("internode_gbps") is None and tcp[1].get("internode_gbps") is None
    assert tcp[1]["iteration_seconds"] == fabric[1]["iteration_seconds"]
    assert tcp[2]["exposed_allreduce_ms"] > fabric[2]["exposed_allreduce_ms"]
    assert tcp[2]["iteration_seconds"] > fabric[2]["iteration_seconds"]
    assert tcp[2]["scaling_efficiency"] < fabric[2]["scaling_efficiency"] <= 1


def test_a_type_with_no_published_network_clusters_at_the_jobs_figure(api_only: Stack, clean_db: None) -> None:
    """A machine type with no network figure (a user's own, or one its cloud does not publish) is refused for
    nodes > 1 alone, accepted with internode_gbps, and its points are modelled at that figure."""
    body = {"cnns": ["resnet18"], "machines": [NO_NETWORK], "batch_sizes": [32], "nodes": [1, 2]}
    assert http.post(f"{api_only.url}/v1/jobs", json=body).status_code == 422
    assert http.post(f"{api_only.url}/v1/jobs", json=body | {"internode_gbps": 25.0}).status_code == 202
    two = {p["nodes"]: p for p in points_of(run(**body, image_size=224, internode_gbps=25.0))}
    assert two[2]["internode_gbps"] == 25.0 and two[2]["exposed_allreduce_ms"] > two[1]["exposed_allreduce_ms"]


def test_types_of_one_and_eight_gpus_are_each_answered_for_the_counts_they_hold(clean_db: None) -> None:
    """gpus 1 and 8 over g5.xlarge (1 GPU) and p5 (8): g5.xlarge at 1 only, p5 at both; the note says so."""
    job = run(cnns=["resnet18"], machines=["g5.xlarge", P5], batch_sizes=[64], image_size=224, gpus=[1, 8])
    layouts = {(p["machine"], p["gpus_used"]) for p in points_of(job)}
    assert layouts == {("g5.xlarge", 1), (P5, 1), (P5, 8)}
    assert job["result"] is not None
    assert "g5.xlarge has 1 GPU, so it is answered for gpus 1 only" in job["result"]["parallel_note"]


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        (
            {"machines": [P5], "gpus": 16},
            "have fewer: p5.48xlarge (8) (gpus counts one machine's GPUs: for more in all, ask for several machines",
        ),
        (
            {"machines": ["g5.xlarge", P5], "gpus": [2, 8]},
            "at least 2 GPUs a machine; these machine types have fewer: g5.xlarge (1)",
        ),
        ({"machines": ["local"], "nodes": 2}, "nodes > 1 needs machine types that come as several machines"),
        ({"machines": [NO_NETWORK], "nodes": 2}, "these machine types have none: Standard_NC24s_v3: give internode"),
        ({"machines": [P5], "internode_gbps": 5}, "internode_gbps is the bandwidth between machines: it needs nodes"),
        ({"machines": [P5], "nodes": 2, "internode_gbps": 0}, "internode_gbps"),
        ({"machines": [P5], "gpus": [1, 2, 3, 4, 5], "nodes": [1, 2, 3, 4]}, "20 GPU and node count pairs"),
        ({"machines": [P5], "gpus": []}, "gpus is an empty list"),
        ({"machines": [P5], "nodes": 0}, "nodes"),
        ({"machines": [P5], "gpus": "8"}, "gpus"),
        ({"machines": [P5], "schedule": []}, "schedule"),
        ({"machines": [P5], "schedule": [{"epochs": 0, "batch_size": 32}]}, "epochs"),
        ({"machines": [P5], "schedule": [{"epochs": 5, "batch_size": 32, "gpus": 4}]}, "give the job's gpus"),
        ({"machines": [P5], "schedule": [{"epochs": 90, "batch_size": 256}]}, "needs a GPU count to split over"),
        ({"machines": [P5], "gpus": 8, "schedule": [{"epochs": 90, "batch_size": 100}]}, "does not split evenly"),
        (
            {"machines": [P5], "gpus": 8, "epochs": 90, "schedule": [{"epochs": 100, "batch_size": 256}]},
            "take 100 epochs but epochs is 90",
        ),
        (
            {
                "machines": [P5],
                "nodes": [1, 2],
                "schedule": [{"epochs": 5, "batch_size": 32, "nodes": 4}],
                "schedule_batch": "per_gpu",
            },
            "nodes 4 is not among the job's nodes",
        ),
    ],
)
def test_bad_combinations_are_422(api_only: Stack, changes: dict[str, Any], words: str) -> None:
    """Each is a problem+json 422 naming what is wrong."""
    body = {"cnns": ["resnet50"], "batch_sizes": [32], **changes}
    r = http.post(f"{api_only.url}/v1/jobs", json=body)
    assert r.status_code == 422, r.text
    assert words in r.text, r.text


def test_cli_compares_layouts_and_prices_a_schedule(no_agent: Stack, clean_db: None) -> None:
    """`traincast predict --nodes 1,4 --schedule ...`: GPU and node columns with the global batch, the best line
    naming the layout, the schedule beside the best constant batch; more GPUs than the type has, or
    --internode-gbps with one machine: one line, exit 1."""
    out = cli(no_agent, "predict", "resnet50", "--machine", P5, "--batch-sizes", "32,256", "--nodes", "1,4",
              "--gpus", "8", "--schedule", "5x1024::4,85x8192::4")  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "gpus x nodes (global batch)" in lines[0] and any("8 x 4 (1024)" in line for line in lines)
    assert any(line.startswith(f"resnet50 on {P5}: fastest at batch") and "GPUs x 4 nodes" in line for line in lines)
    assert "epochs 90" not in out.stdout  # the schedule's 90 epochs are the job's
    phases = ("schedule 5 epochs at global batch 1024 (32 per GPU on 8 GPUs x 4) then 85 epochs at global batch 8192 "
              "(256 per GPU on 8 GPUs x 4)")  # fmt: skip
    [schedule] = [line for line in lines if phases in line]
    assert "best constant batch" in schedule
    bad = cli(no_agent, "predict", "resnet50", "--machine", P5, "--batch-sizes", "32", "--gpus", "16")
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "have fewer" in bad.stderr, bad.stderr
    assert "several machines with nodes, --nodes in the CLI" in bad.stderr, bad.stderr
    typo = cli(no_agent, "predict", "resnet50", "--machine", P5, "--schedule", "5by32")
    assert typo.returncode != 0 and "EPOCHSxBATCH" in typo.stderr
    alone = cli(no_agent, "predict", "resnet50", "--machine", P5, "--batch-sizes", "32", "--internode-gbps", "5")
    assert alone.returncode == 1 and "needs nodes > 1" in alone.stderr and alone.stderr.count("\n") == 1, alone.stderr


def test_the_decision_names_one_winner_across_machines_and_layouts(no_agent: Stack, clean_db: None) -> None:
    """p4d and a T4 with 1 and 2 machines, a deadline and a budget: each question has one winner across both types
    and every layout, its layout in words, runners-up only where their bands overlap; the CLI prints the same."""
    body = {
        "cnns": ["resnet50"],
        "machines": ["p4d.24xlarge", "g4dn.xlarge"],
        "batch_sizes": [64, 256],
        "image_size": 224,
        "precision": "amp_fp16",
        "nodes": [1, 2],
        "deadline_hours": 10,
        "budget_usd": 1,
    }
    job = run(**body)
    points = [p for p in points_of(job) if p["total_seconds"] is not None]
    assert job["result"] is not None
    found = {d["question"]: d for d in job["result"]["decisions"]}
    assert set(found) == {"fastest", "cheapest", "cheapest_within_deadline", "fastest_within_budget"}
    fastest = found["fastest"]["winner"]
    assert fastest["total_seconds"] == min(p["total_seconds"] for p in points if p["machine"] == fastest["machine"])
    assert (
        fastest["total_seconds"] <= min(p["total_seconds"] for p in points) * 1.0001 or fastest["memory_headroom_pct"]
    )
    assert (
        f"{fastest['gpus']} GPUs x " in found["fastest"]["reasons"][0] and "per GPU" in found["fastest"]["reasons"][0]
    )
    within = found["cheapest_within_deadline"]["winner"]
    assert within["total_seconds"] <= 10 * 3600
    for runner in found["cheapest"]["runners_up"]:
        assert runner["cost_usd_p10"] <= found["cheapest"]["winner"]["cost_usd_p90"]
    assert found["fastest_within_budget"]["winner"] is None
    assert found["fastest_within_budget"]["reasons"][0].startswith("nothing stays within $1.00: the cheapest")
    out = cli(no_agent, "predict", "resnet50", "--machine", "p4d.24xlarge,g4dn.xlarge", "--batch-sizes", "64,256",
              "--precision", "amp_fp16", "--nodes", "1,2", "--deadline-hours", "10", "--budget-usd", "1")  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert any(line.startswith("fastest for resnet50: ") and "per GPU" in line for line in lines), out.stdout
    assert any(line.startswith("fastest within the budget for resnet50: nothing stays within $1.00") for line in lines)


def test_a_schedule_in_global_batches_as_people_state_them(clean_db: None) -> None:
    """5 epochs at 256 then 85 at 1024 on 8 GPUs: per GPU 32 and 128 (not 256 and 1,024 per GPU, which would not fit);
    the job's epochs are the schedule's; the stored request says both figures."""
    job = run(cnns=["resnet50"], machines=[P5], batch_sizes=[64], image_size=224, gpus=8, precision="amp_bf16",
              schedule=[{"epochs": 5, "batch_size": 256}, {"epochs": 85, "batch_size": 1024}])  # fmt: skip
    assert job["result"] is not None
    [priced] = job["result"]["schedules"]
    assert [(p["batch_size"], p["gpus"], p["nodes"]) for p in priced["phases"]] == [(32, 8, 1), (128, 8, 1)]
    assert priced["missing"] is None and priced["epochs"] == 90 == job["request"]["epochs"]
    stored = job["request"]["schedule"]
    assert [(p["batch_size"], p["global_batch_size"]) for p in stored] == [(32, 256), (128, 1024)]
    assert job["request"]["schedule_batch"] == "per_gpu"
    shorter = run(cnns=["resnet50"], machines=[P5], batch_sizes=[64], image_size=224, gpus=8,
                  schedule=[{"epochs": 10, "batch_size": 512}])  # fmt: skip
    assert shorter["request"]["epochs"] == 10 and shorter["result"] is not None
    assert shorter["result"]["schedules"][0]["epochs"] == 10


def test_the_all_reduce_algorithm_is_asked_and_said(clean_db: None) -> None:
    """NCCL's pick, hierarchical and a 2D torus for 8 GPUs x 2 p5s: each point says which it assumed, one GPU none,
    and the CLI says it too."""
    common = {"cnns": ["resnet50"], "machines": [P5], "batch_sizes": [64], "image_size": 224, "nodes": [1, 2]}
    found = {}
    for asked in ({}, {"allreduce": "hierarchical"}, {"allreduce": "torus_2d", "torus_x": 16}):
        points = {p["nodes"]: p for p in points_of(run(**common, **asked))}
        found[asked.get("allreduce", "nccl")] = points
    assert found["nccl"][2]["allreduce_algorithm"] in ("ring", "tree")
    assert found["hierarchical"][2]["allreduce_algorithm"] == "hierarchical"
    assert found["torus_2d"][2]["allreduce_algorithm"] == "torus_2d 16x1"
    assert found["hierarchical"][2]["allreduce_ms"] != found["nccl"][2]["allreduce_ms"]
    assert found["hierarchical"][1]["iteration_seconds"] == found["nccl"][1]["iteration_seconds"]  # one machine's
    assert all(f[1]["allreduce_algorithm"] in ("ring", "tree", "hierarchical", "torus_2d 8x1") for f in found.values())


# An ABCI-like node as its owner registers it (Mikami et al. 2018: 4 V100 SXM2 on NVLink, 2 x 100 Gbit/s InfiniBand
# EDR a node): the GPU figures of V100 SXM2 16GB, the links as given.
ABCI_LIKE: dict[str, Any] = {
    "name": "abci-like-node", "gpu": "V100-SXM2-16GB", "gpu_count": 4, "gpu_memory_gib": 16, "gpu_fp32_tflops": 15.7,
    "gpu_fp16_tflops": 125, "gpu_mem_bandwidth_gbs": 900, "gpu_sm_count": 80, "gpu_l2_mib": 6, "gpu_tdp_watts": 300,
    "price_usd_per_hour": 1.0, "gpu_compute_capability": "7.0", "gpu_link": "nvlink", "gpu_link_gbs": 40,
    "nics": 2, "nic_gbps": 100, "network_rdma": True,
}  # fmt: skip


def test_an_own_machine_type_with_its_links_answers_across_machines(no_agent: Stack, clean_db: None) -> None:
    """Registered with NVLink inside and two 100 Gbit/s NICs: 4 machines are answered at 200 Gbit/s and say what the
    network is; the same machine over TCP exchanges more slowly; without a network, several machines are refused."""
    rdma = http.post(f"{no_agent.url}/v1/machines", json=ABCI_LIKE)
    assert rdma.status_code == 201, rdma.text
    assert rdma.json()["links"]["network_gbps"] == 200 and rdma.json()["links"]["intra_link"] == "nvlink"
    tcp = cli(no_agent, "machines", "add", "abci-like-tcp", *flags(ABCI_LIKE, skip={"name", "network_rdma"}), "--tcp")
    assert tcp.returncode == 0 and "2 x 100 Gbit/s TCP" in tcp.stdout, tcp.stderr
    alone = {k: v for k, v in ABCI_LIKE.items() if k not in ("nics", "nic_gbps", "network_rdma")}
    bare = http.post(f"{no_agent.url}/v1/machines", json=alone | {"name": "lone-node"})
    assert bare.status_code == 201, bare.text
    common = {"cnns": ["resnet50"], "batch_sizes": [32], "image_size": 224, "nodes": [1, 4]}
    fast = {p["nodes"]: p for p in points_of(run(**common, machines=["abci-like-node"]))}
    slow = {p["nodes"]: p for p in points_of(run(**common, machines=["abci-like-tcp"]))}
    assert fast[4]["internode_gbps"] == slow[4]["internode_gbps"] == 200
    assert fast[4]["internode_network"] == "2 x 100 Gbit/s, RDMA" and slow[4]["internode_network"].endswith("TCP")
    assert fast[1]["iteration_seconds"] == slow[1]["iteration_seconds"]  # within one machine NVLink alike
    assert slow[4]["allreduce_ms"] > fast[4]["allreduce_ms"] and slow[4]["scaling_efficiency"] < fast[4][
        "scaling_efficiency"]  # fmt: skip
    refused = http.post(f"{no_agent.url}/v1/jobs", json=common | {"machines": ["lone-node"]})
    assert refused.status_code == 422 and "register the type with nics" in refused.json()["detail"]
    out = cli(no_agent, "predict", "resnet50", "--machine", "abci-like-tcp", "--batch-sizes", "32", "--nodes", "4")
    assert out.returncode == 0 and "between machines on abci-like-tcp: 200 Gbit/s (2 x 100 Gbit/s, TCP)" in out.stdout


def flags(figures: dict[str, Any], *, skip: set[str]) -> list[str]:
    """`traincast machines add` flags for these figures."""
    return [x for k, v in figures.items() if k not in skip for x in (f"--{k.replace('_', '-')}", str(v))]

"""Data-parallel training (issue 26): every GPU of a machine type by default, GPU and node counts compared, the
all-reduce a step waits for, global batch, cost of every node; bad combinations refused at the door."""

from typing import Any

import pytest

from shared import machine_types
from tests.integration.test_reference_jobs import run
from tests.support.stack import Stack, http

P5 = "p5.48xlarge"  # 8 x H100 SXM on NVSwitch, EFA between machines


def points_of(job: dict[str, Any]) -> list[dict[str, Any]]:
    """A succeeded job's points."""
    assert job["status"] == "succeeded", job["error"]
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
        assert p["cost_usd"] == pytest.approx(price * nodes * p["total_seconds"] / 3600, rel=1e-4)
        assert p["energy_kwh"] is not None
    for batch in (32, 256):
        one, four = by[(1, batch)], by[(4, batch)]
        assert four["iteration_seconds"] >= one["iteration_seconds"]  # more to exchange, over a slower link
        assert four["total_seconds"] < one["total_seconds"]  # but four times the images a step
        assert four["scaling_efficiency"] <= one["scaling_efficiency"]
    # A small per-GPU batch hides less of the all-reduce behind its shorter backward.
    assert by[(4, 32)]["scaling_efficiency"] < by[(4, 256)]["scaling_efficiency"]
    best = job["result"]["best"][0]
    assert (best["min_time"]["gpus"], best["min_time"]["nodes"]) == (8, 4)
    assert "data parallel" in job["result"]["parallel_note"]


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


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"machines": [P5], "gpus": 16}, "have fewer: p5.48xlarge (8)"),
        ({"machines": ["local"], "nodes": 2}, "nodes > 1 needs machine types with a known network"),
        ({"machines": [P5], "gpus": [1, 2, 3, 4, 5], "nodes": [1, 2, 3, 4]}, "20 GPU and node count pairs"),
        ({"machines": [P5], "gpus": []}, "gpus is an empty list"),
        ({"machines": [P5], "nodes": 0}, "nodes"),
        ({"machines": [P5], "gpus": "8"}, "gpus"),
    ],
)
def test_bad_combinations_are_422(api_only: Stack, changes: dict[str, Any], words: str) -> None:
    """Each is a problem+json 422 naming what is wrong."""
    body = {"cnns": ["resnet50"], "batch_sizes": [32], **changes}
    r = http.post(f"{api_only.url}/v1/jobs", json=body)
    assert r.status_code == 422, r.text
    assert words in r.text, r.text

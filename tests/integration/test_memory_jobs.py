"""A job's memory answers on a GPU nobody measured (the reference path): peak per point, fit, largest batch."""

from typing import Any

from shared import jobs
from tests.support.jobflow import submit
from worker import planning


def run(**overrides: Any) -> dict[str, Any]:
    """Submit and plan a job in-process; return its result."""
    job = submit(**overrides)
    planning.plan_job(job["id"])
    done = jobs.get(job_id=job["id"])
    assert done["status"] == "succeeded", done["error"]
    assert done["result"] is not None
    return dict(done["result"])


def test_resnet50_at_batch_512_does_not_fit_a_t4(clean_db: None) -> None:
    """A T4 has 16 GB: ResNet-50 at batch 32 in fp32 fits, at 512 it does not and is never the best choice."""
    result = run(cnns=["resnet50"], machines=["g4dn.xlarge"], batch_sizes=[32, 128, 512], image_size=224)
    points = {p["batch_size"]: p for p in result["predictions"]}
    assert all(p["source"] == "reference" and p["peak_memory_gib"] > 0 for p in points.values())
    assert points[32]["fits_in_memory"] is True and points[512]["fits_in_memory"] is False
    assert points[32]["peak_memory_gib"] < points[128]["peak_memory_gib"] < points[512]["peak_memory_gib"]
    assert points[512]["peak_memory_gib"] > 16
    # A point that cannot run has no time or cost a client could sort by; one that fits has them all.
    timed = [k for k in points[32] if k.startswith(("iteration_seconds", "total_seconds", "cost_usd", "cost_per"))]
    assert len(timed) == 10 and all(points[32][k] > 0 for k in timed)
    assert all(points[512][k] is None for k in timed)
    [best] = result["best"]
    assert 32 <= best["max_batch_size"] < 512
    # A T4 gives PyTorch 15 GiB of its 16 (ECC's check bits take 1/16 of GDDR6): points are judged against that.
    assert best["memory_gib"] == 15.0 and "ECC" in best["memory_basis"]
    assert all((p["peak_memory_gib"] <= 15.0) == p["fits_in_memory"] for p in points.values())
    assert best["min_time"]["batch_size"] != 512 and best["min_cost"]["batch_size"] != 512
    # The largest batch is the model's boundary, whatever sizes were asked: one above it does not fit.
    edge = best["max_batch_size"]
    around = run(cnns=["resnet50"], machines=["g4dn.xlarge"], batch_sizes=[edge, edge + 1], image_size=224)
    assert [p["fits_in_memory"] for p in around["predictions"]] == [True, False]
    assert around["predictions"][1]["peak_memory_gib"] > 15.0 >= around["predictions"][0]["peak_memory_gib"]
    # An A100's HBM2 keeps its check bits apart: all 40 GiB.
    a100 = run(cnns=["resnet50"], machines=["p4d.24xlarge"], batch_sizes=[32], image_size=224, gpus=1)
    assert a100["best"][0]["memory_gib"] == 40.0 and "datasheet" in a100["best"][0]["memory_basis"]

    adam = run(cnns=["resnet50"], machines=["g4dn.xlarge"], batch_sizes=[32], image_size=224, optimizer="adam")
    assert adam["predictions"][0]["peak_memory_gib"] > points[32]["peak_memory_gib"]
    assert adam["best"][0]["max_batch_size"] < edge

"""What a DDP step loses besides the exposed all-reduce: each term by hand, and the layouts adding them to a point."""

import math
from typing import cast

import numpy as np
import pytest

from prediction import ddp_losses, layouts, points
from shared.jobs.point import PointDict
from shared.jobs.request import JobRequest
from shared.machine_types import MachineTypeInfo

P4D = "p4d.24xlarge"  # 8 x A100 on NVSwitch, in data/interconnect.csv
A100 = cast(
    MachineTypeInfo,
    {"price_usd_per_hour": 32.0, "gpu_count": 8, "gpu_tdp_watts": 400, "gpu": "A100-SXM4-40GB", "vcpus": 96,
     "gpu_sm_count": 108, "gpu_mem_bandwidth_gbs": 1555.0},
)  # fmt: skip


def test_expected_maximum_of_normals_is_the_order_statistics() -> None:
    # Closed forms: E[max of 2] = 1/sqrt(pi), E[max of 3] = 3/(2 sqrt(pi)); for many, Blom's approximation.
    assert ddp_losses.expected_max(1) == 0
    assert ddp_losses.expected_max(2) == pytest.approx(1 / math.sqrt(math.pi), abs=1e-3)
    assert ddp_losses.expected_max(3) == pytest.approx(1.5 / math.sqrt(math.pi), abs=1e-3)
    rng = np.random.default_rng(0)
    assert ddp_losses.expected_max(64) == pytest.approx(rng.standard_normal((100_000, 64)).max(axis=1).mean(), 0.01)


def test_each_term_by_hand() -> None:
    # Six passes of 100 MB at 1,000 GB/s: 0.6 ms.
    assert ddp_losses.bucket_copies_ms(100e6, 1000.0) == pytest.approx(0.6)
    assert ddp_losses.bucket_copies_ms(100e6, None) == 0
    # 16 channels of 100 SMs (0.16) against 3 x 100 GB/s of 1,000 (0.3): the larger share of the overlapped 10 ms.
    got = ddp_losses.contention_ms(overlapped_ms=10, bus_gbs=100, intra_link="nvswitch", sm_count=100,
                                   mem_bandwidth_gbs=1000)  # fmt: skip
    assert got == pytest.approx(3.0)
    assert ddp_losses.contention_ms(overlapped_ms=0, bus_gbs=100, intra_link="pcie", sm_count=10,
                                    mem_bandwidth_gbs=10) == 0  # fmt: skip
    assert ddp_losses.stragglers_ms(100.0, 2, 0.1) == pytest.approx(10 / math.sqrt(math.pi), abs=0.01)


def test_one_gpu_loses_nothing_and_more_replicas_wait_longer() -> None:
    kw = dict(compute_ms=200.0, allreduce_ms=5.0, exposed_ms=1.0, gradient_bytes=1e8, bus_gbs=100.0,
              intra_link="nvswitch", sm_count=108, mem_bandwidth_gbs=1555.0, cv=0.07)  # fmt: skip
    assert ddp_losses.losses(replicas=1, **kw).total_ms == 0  # type: ignore[arg-type]
    waits = [ddp_losses.losses(replicas=n, **kw).stragglers_ms for n in (2, 4, 8, 64)]  # type: ignore[arg-type]
    assert waits == sorted(waits) and waits[0] > 0
    assert ddp_losses.losses(replicas=8, **kw | {"cv": 0.0}).stragglers_ms == 0  # type: ignore[arg-type]


def _timed(batch: int, step_s: float) -> PointDict:
    point = points.blank("resnet50", P4D, batch, A100, source="reference", fits=True, conv_ms=None)
    point["iteration_seconds"] = step_s
    point["iteration_seconds_p10"], point["iteration_seconds_p90"] = step_s * 0.9, step_s * 1.1
    return point


def _spread(request: JobRequest) -> dict[int, PointDict]:
    out = layouts.spread([_timed(128, 0.2)], machine_type=P4D, info=A100, request=request, parameters=25.6e6)
    return {p["gpus_used"]: p for p in out}


BASE = dict(cnns=["resnet50"], machines=[P4D], batch_sizes=[128], epochs=1, dataset_size=100_000, gpus=[1, 2, 8])


def test_a_layouts_step_is_compute_plus_the_tail_plus_each_loss() -> None:
    by = _spread(JobRequest(**BASE, input={"source": "local_jpeg"}))  # type: ignore[arg-type]
    assert "ddp_losses_ms" not in by[1] and by[1]["scaling_efficiency"] == 1
    for gpus in (2, 8):
        p = by[gpus]
        # DdpLossesDict's values are all floats; a TypedDict's values() is typed object.
        terms = cast(dict[str, float], p["ddp_losses_ms"])
        assert set(terms) == {"bucket_copies", "contention", "stragglers"} and min(terms.values()) > 0
        extra = cast(float, p["exposed_allreduce_ms"]) + sum(terms.values())
        assert p["iteration_seconds"] == pytest.approx(0.2 + extra / 1000, rel=1e-4)
        assert p["scaling_efficiency"] == pytest.approx(200 / (200 + extra), abs=1e-4)
    assert by[8]["ddp_losses_ms"]["stragglers"] > by[2]["ddp_losses_ms"]["stragglers"]


def test_replicas_wait_for_each_other_only_where_images_are_decoded() -> None:
    memory = _spread(JobRequest(**BASE))  # type: ignore[arg-type]
    decoded = _spread(JobRequest(**BASE, input={"source": "local_jpeg"}))  # type: ignore[arg-type]
    assert memory[8]["ddp_losses_ms"]["stragglers"] == 0 and memory[8]["ddp_losses_ms"]["bucket_copies"] > 0
    assert cast(float, decoded[8]["scaling_efficiency"]) < cast(float, memory[8]["scaling_efficiency"]) - 0.05

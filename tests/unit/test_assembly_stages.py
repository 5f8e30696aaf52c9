"""The stages of assembling a result (worker/assemble.py): which estimator answers a machine type, and the
layouts' and input pipeline's reading of a point's typed figures."""

from typing import Any, cast

from prediction import layouts, points
from shared.jobs.point import PointDict
from shared.jobs.request import JobRequest
from shared.machine_types import MachineTypeInfo
from worker import estimate
from worker.gather import Gathered, Machine

REQUEST = JobRequest(cnns=["resnet18"], machines=["g5.xlarge"], batch_sizes=[8, 16], epochs=1, dataset_size=100)
G5 = cast(MachineTypeInfo, {"price_usd_per_hour": 1.0, "gpu_count": 1, "gpu_tdp_watts": 300, "gpu": "A10G"})


def machine(*, measured: bool) -> Machine:
    return Machine(
        name="g5.xlarge", info=G5, peers=["g5.xlarge"], measured=measured, layers_measured=measured, model=None,
        fitted_on=None, other_keys=[], fed=None,
    )  # fmt: skip


def gathered(reference: Any = None) -> Gathered:
    return Gathered(
        request=REQUEST, training=REQUEST.training(), sizes=REQUEST.batch_size_list(), classes={"resnet18": 1000},
        cnns=(), machines=(), op_members={}, reference=reference,
    )  # fmt: skip


def test_a_measured_machine_type_gets_the_measured_estimator_and_says_it_has_no_model_yet() -> None:
    answer = estimate.estimator(gathered(), machine(measured=True))
    assert isinstance(answer, estimate.Measured)
    summary = answer.summary(machine(measured=True))
    assert summary["status"] == "no_model" and summary["source"] == "benchmarked"
    assert summary["detail"] is not None
    assert "calibrate" in summary["detail"]


def test_a_reference_machine_type_gets_the_reference_estimator() -> None:
    answer = estimate.estimator(gathered(reference=object()), machine(measured=False))
    assert isinstance(answer, estimate.Reference)


def test_iteration_ms_reads_a_timed_point_p10_median_p90() -> None:
    point = points.blank("resnet18", "g5.xlarge", 8, G5, source="reference", fits=None, conv_ms=1.0)
    points.fill(point, (40.0, 50.0, 70.0), G5, REQUEST)
    assert points.iteration_ms(point) == [40.0, 50.0, 70.0]


def test_each_layout_gets_its_own_lists() -> None:
    point: PointDict = points.blank("resnet18", "g5.xlarge", 8, G5, source="benchmarked", fits=True, conv_ms=None)
    point["layer_environments"], point["measured_on"] = [1], ["g5.xlarge"]
    copy = layouts._copy(point)
    copy["layer_environments"].append(2)
    copy["measured_on"].append("g5.2xlarge")
    assert point["layer_environments"] == [1] and point["measured_on"] == ["g5.xlarge"]
    assert list(copy) == list(point)  # same keys in the same order: the stored JSON keeps its shape

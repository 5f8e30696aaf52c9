"""Pure parts of assembly without tests of their own: schedules priced from points, the input pipeline's step, and
a job's wait for an agent timing out."""

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from prediction import input_pipeline
from shared.jobs.models import MachineProgress, Progress
from shared.jobs.request import JobRequest
from shared.measurements.inputs import InputRate
from worker import progress, schedules

P5 = {"name": "p5", "provider": "aws", "gpu": "H100", "gpu_count": 8, "vcpus": 192, "price_usd_per_hour": 55.0,
      "gpu_tdp_watts": 700, "memory_gib": 2048}  # fmt: skip


def point(bs: int, epoch_s: float | None, *, gpus: int = 8, nodes: int = 1, fits: bool | None = True) -> dict[str, Any]:
    """A point as schedules.priced reads it: its epoch time and cost (90 epochs, $1 a second)."""
    return {"batch_size": bs, "gpus_used": gpus, "nodes": nodes, "fits_in_memory": fits, "epoch_seconds": epoch_s,
            "cost_usd": None if epoch_s is None else epoch_s * 90}  # fmt: skip


def test_a_schedule_sums_its_phases_and_stands_beside_the_best_constant_batch() -> None:
    """5 epochs at 32 then 85 at 128 per GPU: each phase its epochs x its point's epoch time and cost."""
    request = JobRequest.model_validate({"cnns": ["resnet50"], "machines": ["p5.48xlarge"], "batch_sizes": [64],
                                         "gpus": 8, "schedule": [{"epochs": 5, "batch_size": 256},
                                                                 {"epochs": 85, "batch_size": 1024}]})  # fmt: skip
    points = [point(32, 100.0), point(64, 70.0), point(128, 60.0)]
    priced = schedules.priced("resnet50", "p5", points, request)  # type: ignore[arg-type]
    assert priced is not None
    assert [(p["batch_size"], p["seconds"]) for p in priced["phases"]] == [(32, 500.0), (128, 5100.0)]
    assert priced["total_seconds"] == 5600.0 and priced["cost_usd"] == pytest.approx(5600.0)
    assert priced["best_constant"] is not None
    assert priced["best_constant"]["batch_size"] == 128 and priced["best_constant"]["total_seconds"] == 5400.0
    assert priced["time_vs_best_constant"] == pytest.approx(5600 / 5400)
    # A phase whose point does not fit: no total, and which phase says so.
    unfit = [point(32, 100.0), point(128, None, fits=False)]
    missing = schedules.priced("resnet50", "p5", unfit, request)  # type: ignore[arg-type]
    assert missing is not None and missing["total_seconds"] is None
    assert missing["missing"] == "phase 2 (batch 128) does not fit"


def test_the_input_pipeline_sets_the_step_when_it_is_slower_and_says_what_binds() -> None:
    """JPEGs over 1 Gbit/s feed 8 GPUs too slowly: the network binds; at 400 Gbit/s the CPUs' decoding does."""
    rate = InputRate(machine_type="p5", environment_id=1, host_cpus=4, decode_ms=4.0, augment_ms=2.0,
                     images_per_s_all=400.0, jpeg_kb=115.0)  # fmt: skip
    src = input_pipeline.Sourced(rate, "measured", "measured on p5", rate.per_cpu)
    for gbps, limit in ((1.0, "network"), (400.0, "decode_cpus")):
        request = JobRequest.model_validate({"cnns": ["resnet50"], "machines": ["p5.48xlarge"], "batch_sizes": [256],
                                             "input": {"source": "network_jpeg", "network_gbps": gbps}})  # fmt: skip
        p: dict[str, Any] = {"batch_size": 256, "gpus_used": 8, "nodes": 1, "iteration_seconds": 0.01,
                             "iteration_seconds_p10": 0.009, "iteration_seconds_p90": 0.011}  # fmt: skip
        input_pipeline.apply([p], info=P5, request=request, src=src)  # type: ignore[arg-type, list-item]
        assert p["input_bound"] is True and p["input_limit"] == limit, (gbps, p)
        # The step is the input's now, and the echo factor that would hide it is named.
        assert p["iteration_seconds"] == pytest.approx(p["input_ms"] / 1000, rel=1e-5)
        assert p["echo_factor"] == int(np.ceil(p["input_ms"] / 10.0))


def test_a_job_waiting_for_an_agent_too_long_says_how_to_start_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past AGENT_WAIT_TIMEOUT_S with benchmarks pending and no agent: the reason names the type and the command."""
    monkeypatch.setenv("AGENT_WAIT_TIMEOUT_S", "60")
    from shared.core.settings import get_settings

    get_settings.cache_clear()
    try:
        old = (datetime.now(UTC) - timedelta(seconds=120)).isoformat()
        fresh = datetime.now(UTC).isoformat()
        waiting = MachineProgress(needed=10, done=2, pending=8, ops_pending=3, agent_alive=False, waiting_since=old)
        assert progress.waited_too_long(Progress(machines={"g4dn.xlarge": waiting})) == (
            "no agent on g4dn.xlarge came up within 60 s (11 benchmarks waiting for it); start one "
            "(AGENT_MACHINE_TYPE=g4dn.xlarge python -m gpu_agent) or enable the fleet, then submit the job again"
        )
        recent = waiting.model_copy(update={"waiting_since": fresh})
        assert progress.waited_too_long(Progress(machines={"g4dn.xlarge": recent})) is None
    finally:
        get_settings.cache_clear()


def test_a_job_expires_for_a_late_agent_and_not_while_nothing_is_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """progress.expired: the agent's late start is a reason on its own; with no benchmark waited for there is no
    failure count to look up (no database is reached: the unit tests have none)."""
    monkeypatch.setenv("AGENT_WAIT_TIMEOUT_S", "60")
    from shared.core.settings import get_settings
    from shared.training import TrainConfig

    get_settings.cache_clear()
    try:
        now = datetime.now(UTC)
        late = MachineProgress(needed=4, done=0, pending=4, waiting_since=(now - timedelta(seconds=120)).isoformat())
        args = {"training": TrainConfig(), "since": now, "waited": {}, "ops_waited": {}}
        reason = progress.expired(Progress(machines={"g5.xlarge": late}), **args)  # type: ignore[arg-type]
        assert reason is not None and reason.startswith("no agent on g5.xlarge came up within 60 s")
        done = MachineProgress(needed=4, done=4, pending=0)
        assert progress.expired(Progress(machines={"g5.xlarge": done}), **args) is None  # type: ignore[arg-type]
    finally:
        get_settings.cache_clear()

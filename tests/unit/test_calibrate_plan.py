"""Calibration plans as pure logic: image sizes, batch sizes and training configurations."""

import pytest

from calibration import run as calibrate
from shared.core.errors import InvalidRequest
from shared.training import TrainConfig


def test_a_plan_spans_image_sizes_batch_sizes_and_configurations() -> None:
    """Each (configuration, setting) is a unit of the plan; the CPU default spreads 64-160 px and batch 2-32."""
    sgd, adamw = TrainConfig(), calibrate.config_from_key("adamw")
    plan = calibrate.Plan(
        machine_type="local", cnns=("resnet18",), settings=((64, (8, 32)), (112, (2, 4))), configs=(sgd, adamw, sgd)
    )
    units = {(u.image_size, u.batch_sizes, u.config.cost_key()) for u in plan.units()}
    assert units == {
        (64, (8, 32), "sgd/fp32"), (112, (2, 4), "sgd/fp32"),
        (64, (8, 32), "adamw+wd/fp32"), (112, (2, 4), "adamw+wd/fp32"),
    }  # fmt: skip
    assert len(plan.units()) == 4 and all(u.units() == [u] for u in plan.units())
    assert calibrate.Plan(machine_type="local", batch_sizes=(2,), image_size=32).grid() == ((32, (2,)),)
    sizes = [size for size, _ in calibrate.CPU_SETTINGS]
    batches = {b for _, bs in calibrate.CPU_SETTINGS for b in bs}
    assert sizes == [64, 112, 160] and min(batches) == 2 and max(batches) == 32
    keys = ["sgd", "sgd+momentum", "adamw", "adam+wd/amp_bf16", "sgd/fp32/channels_last",
            "sgd+momentum/amp_fp16/channels_last/cudnn_benchmark"]  # fmt: skip
    assert [calibrate.config_from_key(k).cost_key() for k in keys] == [
        "sgd/fp32", "sgd+momentum/fp32", "adamw+wd/fp32", "adam+wd/amp_bf16", "sgd/fp32/channels_last",
        "sgd+momentum/amp_fp16/channels_last/cudnn_benchmark",
    ]  # fmt: skip
    tuned = calibrate.config_from_key("sgd/cudnn_benchmark")
    assert tuned.cudnn_benchmark and tuned.calibrate_command("g5.xlarge").endswith("--cudnn-benchmark")
    # Off, the setting stays out of what an agent receives (agents that predate it accept the task); on, it is in.
    assert "cudnn_benchmark" not in TrainConfig().wire() and tuned.wire()["cudnn_benchmark"] is True
    assert calibrate.config_from_key("sgd", "amp_bf16").precision == "amp_bf16"
    with pytest.raises(InvalidRequest, match="unknown: nesterov"):
        calibrate.config_from_key("sgd+nesterov")

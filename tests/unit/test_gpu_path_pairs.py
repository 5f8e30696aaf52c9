"""bench/gpu_path_models.py's paired steps: batch b at 224 px against 2b at 160 px, the same pixels per step."""

from typing import Any

import pytest

from bench import gpu_path_models as gpm


def step(cnn: str, size: int, batch: int, ms: float, **config: Any) -> Any:
    """A stored step that ran (shared.measurements.steps.measured's row), SGD fp32 unless config says otherwise."""
    row = {"id": 0, "cnn_name": cnn, "image_size": size, "batch_size": batch, "step_ms": ms, "environment_id": 1,
           "optimizer": "sgd", "precision": "fp32", "momentum": 0.0, "weight_decay": 0.0, "channels_last": False,
           "cudnn_benchmark": False}  # fmt: skip
    return row | config


def test_each_224_px_step_is_paired_with_twice_its_batch_at_160_px_of_its_own_configuration() -> None:
    steps = [
        step("resnet18", 224, 8, 12.0), step("resnet18", 160, 16, 10.0),  # 1.2
        step("resnet18", 224, 32, 20.0), step("resnet18", 160, 64, 25.0),  # 0.8
        step("resnet18", 224, 128, 50.0),  # no 160 px step at 256: unpaired
        step("vgg11", 224, 8, 5.0),  # its 160 px step ran out of memory (not among the steps that ran): unpaired
        step("vgg11", 224, 32, 9.0, precision="amp_bf16", momentum=0.9), step("vgg11", 160, 64, 9.0),  # other config
    ]  # fmt: skip
    pairs = gpm.paired_steps(steps, "sgd/fp32")
    assert [(cnn, batch) for cnn, batch, _ in pairs] == [("resnet18", 8), ("resnet18", 32)]
    assert [ratio for _, _, ratio in pairs] == pytest.approx([1.2, 0.8])
    floor = gpm.pair_floor(pairs)
    assert floor is not None
    assert floor == pytest.approx((20.0, 20.0))
    assert gpm.pair_floor([]) is None


def test_a_configuration_pairs_only_its_own_optimizer_precision_and_decay() -> None:
    bf16 = {"precision": "amp_bf16", "momentum": 0.9}
    adamw = {"optimizer": "adamw", "precision": "amp_fp16", "weight_decay": 1e-4}
    steps = [
        step("alexnet", 224, 8, 4.0, **bf16), step("alexnet", 160, 16, 5.0, **bf16),
        step("alexnet", 224, 8, 6.0, **adamw), step("alexnet", 160, 16, 3.0, **adamw),
        step("alexnet", 224, 8, 1.0), step("alexnet", 160, 16, 1.0),
    ]  # fmt: skip
    assert [r for _, _, r in gpm.paired_steps(steps, "sgd+momentum/amp_bf16")] == pytest.approx([0.8])
    assert [r for _, _, r in gpm.paired_steps(steps, "adamw+wd/amp_fp16")] == pytest.approx([2.0])
    assert [r for _, _, r in gpm.paired_steps(steps, "sgd/fp32")] == pytest.approx([1.0])
    assert gpm.paired_steps(steps, "sgd/fp32/channels_last") == []

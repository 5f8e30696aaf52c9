"""channels_last and grouped convs: cuDNN's NHWC speed-up is the dense convs', not ResNeXt's or RegNet's grouped ones,
which run NCHW kernels behind copies of their activations."""

import numpy as np
import pytest

from prediction.reference import convs, grouped, load, sanity
from prediction.reference.specs import GpuSpecs
from prediction.reference.wholestep import network
from shared.training import TrainConfig

AMP = TrainConfig(optimizer="sgd", momentum=0.9, precision="amp_fp16")
NHWC = AMP.model_copy(update={"channels_last": True})


def _gpu(name: str) -> GpuSpecs:
    return GpuSpecs.from_row(sanity.gpu_rows()[name])


def _conv_ms(cnn: str, grouped_only: bool, config: TrainConfig, gpu: GpuSpecs, batch: int = 128) -> float:
    """Calibrated conv time of one step of a CNN's grouped convs alone, or of its dense ones (one group)."""
    layers, work = network(cnn, 224)
    geo = convs.geometry([s for s, _ in layers])
    dense = geo.groups == 1
    keep = grouped.is_grouped(geo) if grouped_only else dense
    picked = [layer for layer, k in zip(layers, keep, strict=True) if k]
    [est] = load().predict_steps(convs=picked, workload=work, batch_sizes=[batch], gpu=gpu, training=config)
    return est.conv_ms


@pytest.mark.parametrize("gpu", ["RTX-3090", "A100-SXM4-80GB", "H100-SXM5-80GB"])
def test_grouped_convs_gain_nothing_from_nhwc_and_dense_ones_do(gpu: str) -> None:
    specs = _gpu(gpu)
    for cnn in ("resnext50_32x4d", "regnet_x_400mf"):
        assert _conv_ms(cnn, True, NHWC, specs) > _conv_ms(cnn, True, AMP, specs)
        assert _conv_ms(cnn, False, NHWC, specs) < _conv_ms(cnn, False, AMP, specs)


def test_the_copies_are_each_phases_two_activations_read_and_written() -> None:
    """A 3x3 grouped conv at stride 1 (x and y alike): per phase 2 x (x + y) bytes at the streaming bandwidth, plus
    one kernel floor per tensor; twice the batch, twice the bytes."""
    [spec] = [{"in_channels": 64, "out_channels": 64, "in_h": 28, "in_w": 28, "kernel": [3, 3], "stride": [1, 1],
               "padding": [1, 1], "groups": 4}]  # fmt: skip
    geo = convs.geometry([spec])
    assert grouped.is_grouped(geo).tolist() == [True]
    got = grouped.layout_transposes_ms(geo, np.array([8.0, 16.0]), "amp_fp16", 1000.0, 0.5, 0.004)
    tensor_bytes = 8 * 64 * 28 * 28 * 2
    expected = 2 * 2 * tensor_bytes / (1000e9 * 0.5) * 1e3 + 0.008
    assert got.shape == (1, 2, 3) and got[0, 0] == pytest.approx([expected] * 3)
    assert got[0, 1, 0] - 0.008 == pytest.approx(2 * (expected - 0.008))


def test_depthwise_and_plain_convs_are_not_grouped() -> None:
    specs = [
        {"in_channels": 32, "out_channels": 32, "in_h": 8, "in_w": 8, "kernel": [3, 3], "groups": 32},
        {"in_channels": 32, "out_channels": 64, "in_h": 8, "in_w": 8, "kernel": [1, 1]},
        {"in_channels": 32, "out_channels": 32, "in_h": 8, "in_w": 8, "kernel": [3, 3], "groups": 2},
    ]
    assert grouped.is_grouped(convs.geometry(specs)).tolist() == [False, False, True]


def test_a_regnet_loses_more_of_its_nhwc_speed_up_than_a_resnet() -> None:
    """RegNetX-400MF's grouped convs (16 channels a group) are most of its conv work: its step gains less from
    channels_last than ResNet-50's, whose convs are all dense."""
    gpu = _gpu("RTX-3090")
    ratios = {}
    for cnn in ("resnet50", "regnet_x_400mf"):
        layers, work = network(cnn, 224)
        [a] = load().predict_steps(convs=layers, workload=work, batch_sizes=[256], gpu=gpu, training=AMP)
        [b] = load().predict_steps(convs=layers, workload=work, batch_sizes=[256], gpu=gpu, training=NHWC)
        ratios[cnn] = b.step_ms / a.step_ms
    assert ratios["regnet_x_400mf"] > ratios["resnet50"] + 0.02

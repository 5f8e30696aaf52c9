"""The reference predictor's layer cache answers exactly what computing every point on its own answers."""

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from prediction.reference import GpuSpecs, ReferenceModel, convs, depthwise
from prediction.reference.model import MODEL_JSON, MONOTONE_ANCHORS, from_json_text
from shared.cnn import zoo as cnn_zoo
from shared.training import TrainConfig

A100 = GpuSpecs("A100-test", fp32_tflops=19.5, mem_bandwidth_gbs=1555, fp16_tflops=312, tf32_tflops=156,
                sm_count=108, l2_mib=40, compute_capability="8.0", memory_gib=40)  # fmt: skip
T4 = GpuSpecs("T4-test", fp32_tflops=8.1, mem_bandwidth_gbs=320, fp16_tflops=65, compute_capability="7.5")
P100 = GpuSpecs("P100-test", fp32_tflops=9.3, mem_bandwidth_gbs=732, fp16_tflops=18.7)  # no tensor cores
CNNS = ("resnet18", "mobilenet_v3_small", "densenet121")


def fresh() -> ReferenceModel:
    """The committed model, loaded anew (an empty cache)."""
    return from_json_text(MODEL_JSON.read_text())


def one_point(
    model: ReferenceModel, specs: Sequence[Mapping[str, Any]], batch: int, gpu: GpuSpecs, precision: str
) -> tuple[np.ndarray, np.ndarray]:
    """(times (L, 3), on tensor cores (L, 3)) of one batch size, computed as before the cache, from the public parts:
    its own time, capped by its times at the fixed batch sizes above it."""
    out, on_tensor = uncapped(model, specs, batch, gpu, precision)
    for anchor in MONOTONE_ANCHORS[batch < MONOTONE_ANCHORS]:
        out = np.minimum(out, uncapped(model, specs, int(anchor), gpu, precision)[0])
    return out, on_tensor


def uncapped(
    model: ReferenceModel, specs: Sequence[Mapping[str, Any]], batch: int, gpu: GpuSpecs, precision: str
) -> tuple[np.ndarray, np.ndarray]:
    """One batch size's layer times on their own (no cap)."""
    gpu = gpu.filled()
    geo = convs.geometry(specs)
    tensor = convs.uses_tensor_cores(geo, gpu, precision)

    def times(on: np.ndarray) -> np.ndarray:
        feats, roof, _ = convs.features(specs, [batch], gpu, precision, on)
        return model.conv_from_features(feats, roof)[:, 0]

    simt = times(np.zeros_like(tensor))
    fast = times(tensor)
    on_tensor = tensor[:, None] & (fast < simt)
    out = np.where(on_tensor, fast, simt)
    dw = depthwise.is_depthwise(geo)
    coef = model.params.get("depthwise", {}).get(precision)
    if coef is not None and dw.any():
        out[dw] = depthwise.times(convs.geometry([s for s, d in zip(specs, dw, strict=True) if d]),
                                  np.array([float(batch)]), gpu, precision, coef)[:, 0]  # fmt: skip
        on_tensor[dw] = False
    out[geo.transposed] = out[geo.transposed][..., [1, 0, 2]]
    on_tensor[geo.transposed] = on_tensor[geo.transposed][..., [1, 0, 2]]
    return out, on_tensor


def layers_of(cnn: str) -> list[tuple[dict[str, Any], int]]:
    """A torchvision CNN's conv specs with counts at 224 px."""
    read = cnn_zoo.conv_layers(cnn, 224)
    return [(s.to_json(), n) for s, n in zip(read.signatures, read.counts, strict=True)]


@pytest.mark.parametrize("gpu", [A100, T4, P100], ids=lambda g: g.name)
@pytest.mark.parametrize("precision", ["fp32", "amp_fp16"])
def test_cached_layer_times_equal_each_point_computed_alone(gpu: GpuSpecs, precision: str) -> None:
    """Whatever was asked before (other CNNs, other batch sizes), every layer time equals its own computation."""
    model = fresh()
    sizes = [1, 3, 64, 255, 256]
    model.predict_convs(specs=[s for s, _ in layers_of("densenet121")], batch_sizes=[2, 64, 300], gpu=gpu,
                        precision=precision)  # fmt: skip
    for cnn in CNNS:
        specs = [s for s, _ in layers_of(cnn)]
        got = model.predict_convs(specs=specs, batch_sizes=sizes, gpu=gpu, precision=precision)
        for j, b in enumerate(sizes):
            want, _on = one_point(model, specs, b, gpu, precision)
            np.testing.assert_array_equal(got[:, j], want, err_msg=f"{cnn} at batch {b}")


@pytest.mark.parametrize("config", [TrainConfig(), TrainConfig(precision="amp_fp16", optimizer="adam")])
def test_whole_steps_do_not_depend_on_what_was_cached(config: TrainConfig) -> None:
    """A job's step estimates are the same from a cold model, a warm one, and batch size by batch size."""
    sizes = list(range(1, 33)) + [100, 256]
    warm = fresh()
    for cnn in CNNS:
        warm.predict_steps(convs=layers_of(cnn), workload={}, batch_sizes=[1, 7, 256], gpu=A100, training=config)
    for cnn in CNNS:
        read = cnn_zoo.conv_layers(cnn, 224)
        layers = layers_of(cnn)
        cold = fresh().predict_steps(convs=layers, workload=read.workload, batch_sizes=sizes, gpu=A100,
                                     training=config)  # fmt: skip
        again = warm.predict_steps(convs=layers, workload=read.workload, batch_sizes=sizes, gpu=A100, training=config)
        single = fresh()  # each batch size asked alone: no slot of one serves another
        alone = [
            single.predict_steps(convs=layers, workload=read.workload, batch_sizes=[b], gpu=A100, training=config)[0]
            for b in (1, 17, 256)
        ]
        assert cold == again
        assert alone == [cold[sizes.index(b)] for b in (1, 17, 256)]


def test_the_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past its size, the least recently used layers are dropped, and answers stay the same."""
    from prediction.reference import model as model_module

    monkeypatch.setattr(model_module, "LAYER_CACHE_SLOTS", 2_000)
    model = fresh()
    specs = [s for s, _ in layers_of("resnet18")]
    first = model.predict_convs(specs=specs, batch_sizes=list(range(1, 129)), gpu=T4)
    model.predict_convs(specs=[s for s, _ in layers_of("mobilenet_v3_small")], batch_sizes=list(range(1, 129)), gpu=T4)
    assert model.cached_slots() <= 2_000 + 129 * len(layers_of("mobilenet_v3_small"))
    np.testing.assert_array_equal(model.predict_convs(specs=specs, batch_sizes=list(range(1, 129)), gpu=T4), first)

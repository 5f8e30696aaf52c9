"""Reading CNNs from ONNX files and JSON layer lists, exactly, and the workload beside the convs."""

from collections import Counter

import onnx
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from shared.cnn import layer_list, onnx_reader
from shared.cnn import zoo as cnn_zoo
from shared.core.errors import ExtractionError
from tests.support.onnx_models import export, tutorial_export


def onnx_layers(data: bytes, size: int) -> Counter:
    """Signature counts read from an ONNX file through parse, strip and read, as the service does."""
    signatures, _ = onnx_reader.read(onnx_reader.strip(onnx_reader.parse(data)), size)
    return Counter(signatures)


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "squeezenet1_1"])
def test_onnx_export_reads_like_the_torchvision_model(name: str) -> None:
    """Same signatures and counts from the model's ONNX export as from the model, at two sizes."""
    data = export(name)
    for size in (224, 160):
        torch_layers = cnn_zoo.conv_layers(name, size)
        assert onnx_layers(data, size) == Counter(dict(zip(torch_layers.signatures, torch_layers.counts, strict=True)))


def test_onnx_workload_matches_the_torch_reading() -> None:
    """Conv FLOPs, batch norms (count, channels and map sizes) and parameters agree between the two readers."""
    _, onnx_work = onnx_reader.read(onnx_reader.strip(onnx_reader.parse(export("resnet18"))), 224)
    torch_work = cnn_zoo.conv_layers("resnet18", 224).workload
    assert onnx_work["ops"]["conv"]["flops"] == pytest.approx(torch_work["ops"]["conv"]["flops"])
    assert onnx_work["ops"]["batch_norm"]["count"] == torch_work["ops"]["batch_norm"]["count"] == 20
    assert onnx_work["parameters"] == torch_work["parameters"] == cnn_zoo.parameter_count("resnet18")
    # each batch norm's channels and map size, which set its time where channels are fewer than SMs
    assert onnx_work["batch_norm_channels"] == torch_work["batch_norm_channels"]


def test_stripped_graph_is_small_and_keeps_shapes() -> None:
    """What is stored has no weight values but reads the same."""
    data = export("resnet18")
    stripped = onnx_reader.strip(onnx_reader.parse(data))
    assert len(stripped) < len(data) / 100
    assert onnx_layers(data, 224) == Counter(onnx_reader.read(stripped, 224)[0])


def test_fixed_size_onnx_says_so() -> None:
    """A model exported at a fixed size cannot be read at another, and the error says why."""
    data = export("squeezenet1_1", size=128, dynamic=False)
    assert sum(onnx_layers(data, 128).values()) == cnn_zoo.conv_layers("squeezenet1_1", 128).total
    with pytest.raises(ExtractionError, match="fixed at 128x128"):
        onnx_layers(data, 224)


def test_the_tutorials_export_is_read_at_its_batch_of_one_and_flagged_as_eval_mode() -> None:
    """Batch fixed at 1 and batch norm folded (eval mode): read, with the same convs, and a warning that says so."""
    data = tutorial_export("resnet18")
    model = onnx_reader.parse(data)
    convs = Counter(onnx_reader.read(onnx_reader.strip(model), 224)[0])
    assert sum(convs.values()) == cnn_zoo.conv_layers("resnet18", 224).total
    [warning] = onnx_reader.export_warnings(model)
    assert "eval-mode export" in warning and "TrainingMode.TRAINING" in warning
    # A training-mode export keeps batch norm apart and says nothing.
    assert onnx_reader.export_warnings(onnx_reader.parse(export("resnet18"))) == []
    assert onnx_reader.export_warnings(onnx_reader.parse(export("squeezenet1_1"))) == []


def test_bad_onnx_files() -> None:
    """Garbage, a graph with a dangling input, external data and a conv-less graph are refused clearly."""
    with pytest.raises(ExtractionError, match="not an ONNX model"):
        onnx_reader.parse(b"\x80\x04\x95 this is a pickle, not a model")
    model = onnx.load_model_from_string(export("squeezenet1_1"))
    model.graph.node[3].input[0] = "nowhere"
    with pytest.raises(ExtractionError, match="broken ONNX graph"):
        onnx_reader.parse(model.SerializeToString())
    model = onnx.load_model_from_string(export("squeezenet1_1"))
    weight = model.graph.initializer[0]
    weight.data_location = onnx.TensorProto.EXTERNAL
    weight.external_data.add(key="location", value="../../etc/passwd")
    with pytest.raises(ExtractionError, match="outside the file"):
        onnx_reader.parse(model.SerializeToString())
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 3, 8, 8])
    relu_only = onnx.helper.make_model(
        onnx.helper.make_graph([onnx.helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    )
    with pytest.raises(ExtractionError, match="no Conv"):
        onnx_reader.parse(relu_only.SerializeToString())


def test_json_layer_list() -> None:
    """A layer list gives its signatures with counts; bad layers and other sizes are named."""
    spec = layer_list.parse(
        b'{"image_size": 32, "layers": [{"in_channels": 3, "out_channels": 16, "input_size": 32, "kernel": 3,'
        b' "padding": 1}, {"in_channels": 16, "out_channels": 16, "input_size": [32, 32], "kernel": [3, 3],'
        b' "padding": 1, "groups": 16, "count": 4}]}'
    )
    signatures, _ = layer_list.read(spec.model_dump(mode="json"), 32)
    counts = Counter(signatures)
    assert sorted(counts.values()) == [1, 4] and signatures.total() == 5 and len(signatures) == 2
    depthwise = next(s for s in counts if s.groups == 16)
    assert (depthwise.in_channels, depthwise.kernel, depthwise.padding) == (16, (3, 3), (1, 1))
    with pytest.raises(ExtractionError, match="described at 32 px"):
        layer_list.read(spec.model_dump(mode="json"), 64)
    with pytest.raises(ExtractionError, match=r"layers\.0.*divisible by groups"):
        layer_list.parse(
            b'{"image_size": 32, "layers": [{"in_channels": 3, "out_channels": 16, "input_size": 32,'
            b' "kernel": 3, "groups": 2}]}'
        )
    with pytest.raises(ExtractionError, match="does not fit"):
        layer_list.parse(
            b'{"image_size": 8, "layers": [{"in_channels": 3, "out_channels": 4, "input_size": 2, "kernel": 5}]}'
        )


def test_torch_workload_is_consistent_with_a_real_forward() -> None:
    """Meta-device FLOPs equal PyTorch's FLOP counter on a real CPU forward; parameters are exact."""
    reading = cnn_zoo.conv_layers("resnet18", 64)
    model = cnn_zoo.build("resnet18", device="cpu").train()
    counter = FlopCounterMode(display=False)
    with counter:
        model(torch.randn(2, 3, 64, 64))
    ops = reading.workload["ops"]
    assert (ops["conv"]["flops"] + ops["linear"]["flops"]) * 2 == pytest.approx(counter.get_total_flops())
    assert reading.workload["parameters"] == sum(p.numel() for p in model.parameters())
    assert reading.workload["parameter_tensors"] == len(list(model.parameters()))
    batch_norms = sum(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())
    assert ops["batch_norm"]["count"] == batch_norms and ops["linear"]["count"] == 1
    assert reading.workload["activation_bytes"] is not None
    assert reading.workload["activation_bytes"] > 0

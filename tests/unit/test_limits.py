"""Bounds at the door, as pure logic: numbers, names, batch sizes, points, layer counts, ONNX graphs."""

import json
from collections.abc import Iterator

import numpy as np
import onnx
import onnx.helper
import onnx.numpy_helper
import pytest
from pydantic import ValidationError

from shared.cnn import layer_list, onnx_reader
from shared.core.errors import ExtractionError, PayloadTooLarge
from shared.core.settings import get_settings
from shared.jobs.request import JobRequest, points_limit
from shared.machine_request import MachineCreate

GOOD = '{"cnns": ["resnet18"], "machines": ["local"], "batch_sizes": [8]'
MARKER = np.float32(1.2345678e-7)  # a value no shape constant has: its bytes mark a tensor's data


def job(extra: str = "") -> JobRequest:
    """A JobRequest from JSON text, as the API parses a body."""
    return JobRequest.model_validate_json(GOOD + extra + "}")


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        (', "dataset_size": 1e400', "dataset_size"),
        (', "dataset_size": 1' + "0" * 400, "dataset_size"),
        (', "dataset_size": 10000000000000', "dataset_size"),
        (', "epochs": 1e400', "epochs"),
        (', "epochs": 1' + "0" * 40, "epochs"),
        (', "batch_sizes": {"min": 1, "max": 1' + "0" * 400 + "}", "batch_sizes"),
    ],
)
def test_overflowing_numbers_are_refused(extra: str, field: str) -> None:
    """A dataset size or epoch count no float holds (or past any real one) is a validation error naming it."""
    body = GOOD.replace(', "batch_sizes": [8]', "") if "batch_sizes" in extra else GOOD
    with pytest.raises(ValidationError, match=field):
        JobRequest.model_validate_json(body + extra + "}")


def test_largest_allowed_dataset_stays_finite() -> None:
    """The bounds keep steps x epochs a finite float."""
    request = job(', "dataset_size": 1000000000000, "epochs": 100000')
    assert np.isfinite(float(request.dataset_size) * request.epochs)


@pytest.mark.parametrize("bad", ["resnet18\u0000", "res\nnet", "resnet18\n", "a\u007f", "", "x" * 65, "-lead"])
def test_control_characters_and_bad_names_are_refused(bad: str) -> None:
    """NUL, newline (even trailing), DEL and malformed names never pass as CNN or machine names."""
    with pytest.raises(ValidationError, match="cnns.0"):
        JobRequest.model_validate({"cnns": [bad], "machines": ["local"], "batch_sizes": [8]})
    with pytest.raises(ValidationError, match="machines.0"):
        JobRequest.model_validate({"cnns": ["resnet18"], "machines": [bad], "batch_sizes": [8]})


def test_machine_fields_refuse_control_characters() -> None:
    """A custom machine's name and GPU name refuse NUL and DEL; NaN and infinity are out of range."""
    figures = {
        "name": "my-box", "gpu": "My GPU", "gpu_count": 1, "gpu_memory_gib": 16, "gpu_fp32_tflops": 10,
        "gpu_fp16_tflops": 20, "gpu_mem_bandwidth_gbs": 900, "gpu_sm_count": 80, "gpu_l2_mib": 6,
        "gpu_tdp_watts": 300, "price_usd_per_hour": 1,
    }  # fmt: skip
    assert MachineCreate.model_validate(figures).gpu == "My GPU"
    for field, value in [("name", "my\x00box"), ("gpu", "GPU\x00"), ("gpu", "GPU\x7f"), ("name", "box\n")]:
        with pytest.raises(ValidationError, match=field):
            MachineCreate.model_validate({**figures, field: value})
    for field in ("gpu_memory_gib", "price_usd_per_hour"):
        for figure in (float("nan"), float("inf")):
            with pytest.raises(ValidationError, match=field):
                MachineCreate.model_validate({**figures, field: figure})


def test_duplicate_batch_sizes_are_merged() -> None:
    """Batch sizes are stored sorted and unique, so two spellings of one request are one request."""
    request = JobRequest.model_validate({"cnns": ["resnet18"], "machines": ["local"], "batch_sizes": [32, 8, 8, 16]})
    assert request.batch_sizes == [8, 16, 32]
    assert request.model_dump(mode="json")["batch_sizes"] == [8, 16, 32]
    again = JobRequest.model_validate(request.model_dump(mode="json"))
    assert again == request


@pytest.mark.parametrize(
    ("batch_sizes", "schedule", "asked"),
    [
        ({"min": 1, "max": 5000}, None, 5000),
        ({"min": 8, "max": 100_000, "step": 8}, None, 12500),
        ({"min": 1, "max": 1001}, [{"epochs": 1, "batch_size": 500}, {"epochs": 1, "batch_size": 3000}], 1002),
        (list(range(1, 1202)), None, 1201),
    ],
)
def test_too_many_batch_sizes_says_how_many_were_asked(
    batch_sizes: object, schedule: list[dict[str, int]] | None, asked: int
) -> None:
    """A range over the limit is counted whole in the refusal (the list checked is cut short at the limit)."""
    body = {"cnns": ["resnet18"], "machines": ["local"], "batch_sizes": batch_sizes, "schedule_batch": "per_gpu"}
    limit = get_settings().max_batch_sizes
    with pytest.raises(ValidationError, match=rf"\b{asked} batch sizes requested; at most {limit} are allowed"):
        JobRequest.model_validate({**body, "schedule": schedule} if schedule else body)


@pytest.fixture
def door(request: pytest.FixtureRequest) -> Iterator[None]:
    """Validation as at the API's door: the points limit of the request set."""
    token = points_limit.set(request.param)
    yield
    points_limit.reset(token)


@pytest.mark.parametrize("door", [200_000], indirect=True)
def test_points_limit_at_the_door(door: None) -> None:
    """CNNs x machines x batch sizes over the limit is refused with the count and the limit."""
    machines = [f"m{i}" for i in range(30)]
    body = {"cnns": [f"cnn{i}" for i in range(10)], "machines": machines, "batch_sizes": {"min": 1, "max": 1000}}
    with pytest.raises(ValidationError, match=r"300000 prediction points .*10 CNNs x 30 machine types x 1000 .*200000"):
        JobRequest.model_validate(body)
    assert JobRequest.model_validate({**body, "machines": machines[:20]}).points() == 200_000


def test_points_limit_not_applied_away_from_the_door() -> None:
    """A worker re-reading a stored request does not refuse it under a limit the API did not apply."""
    body = {"cnns": [f"c{i}" for i in range(10)], "machines": [f"m{i}" for i in range(30)], "batch_sizes": [1]}
    body["batch_sizes"] = {"min": 1, "max": 1000}
    assert points_limit.get() is None
    assert JobRequest.model_validate(body).points() == 300_000


def layer(i: int, count: int) -> str:
    """One distinct conv layer of a layer list, as JSON text."""
    return f'{{"in_channels": {i + 1}, "out_channels": 8, "input_size": 32, "kernel": 3, "count": {count}}}'


def test_layer_counts_stay_counts() -> None:
    """100 layers of 100,000 repeats each read as 100 entries with counts, never 10 million signatures."""
    data = ('{"image_size": 32, "layers": [' + ", ".join(layer(i, 100_000) for i in range(100)) + "]}").encode()
    signatures, _ = layer_list.read(layer_list.parse(data).model_dump(mode="json"), 32)
    assert len(signatures) == 100 and signatures.total() == 10_000_000
    assert [s.in_channels for s in signatures] == list(range(1, 101))  # order of first use kept


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("in_channels", 10**400),
        ("out_channels", 10**8),
        ("input_size", [32, 10**6]),
        ("kernel", 5000),
        ("padding", -1),
        ("dtype", "float32\u0000"),
        ("count", 100_001),
    ],
)
def test_layer_numbers_are_bounded(field: str, value: object) -> None:
    """Every number of a layer is bounded, and the dtype is one of the few there are."""
    spec = {"in_channels": 3, "out_channels": 8, "input_size": 32, "kernel": 3, field: value}
    data = json.dumps({"image_size": 32, "layers": [spec]}).encode()
    with pytest.raises(ExtractionError, match=f"layers.0.{field}"):
        layer_list.parse(data)
    layer_list.parse(
        json.dumps({"image_size": 32, "layers": [{**spec, field: 3 if field != "dtype" else "float16"}]}).encode()
    )


def test_layer_list_over_the_json_limit_is_too_large() -> None:
    """A layer list bigger than any JSON body may be is refused before it is parsed."""
    limit = get_settings().max_json_bytes
    data = b'{"image_size": 32, "layers": [' + b" " * limit + layer(0, 1).encode() + b"]}"
    with pytest.raises(PayloadTooLarge, match=f"{limit} bytes"):
        layer_list.parse(data)


def conv_model(constants: dict[str, onnx.TensorProto] | None = None, relus: int = 0) -> onnx.ModelProto:
    """x → Conv (weight from a Constant node) → `relus` Relus → y, with dynamic height and width."""
    weight = onnx.numpy_helper.from_array(np.full((8, 3, 3, 3), MARKER, dtype=np.float32), "w")
    nodes = [
        onnx.helper.make_node("Constant", [], ["w"], value=weight),
        onnx.helper.make_node("Constant", [], ["big_list"], value_floats=[float(MARKER)] * 500),
        onnx.helper.make_node("Conv", ["x", "w"], ["h0"], pads=[1, 1, 1, 1]),
    ]
    nodes += [onnx.helper.make_node("Relu", [f"h{i}"], [f"h{i + 1}"]) for i in range(relus)]
    nodes.append(onnx.helper.make_node("Identity", [f"h{relus}"], ["y"]))
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["n", 3, "h", "w"])
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["n", 8, "h", "w"])
    inits = [onnx.numpy_helper.from_array(np.full((64, 64), MARKER, dtype=np.float32), "unused")]
    graph = onnx.helper.make_graph(nodes, "g", [x], [y], initializer=inits)
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])


def test_constant_tensors_are_stored_as_shapes_only() -> None:
    """Constant nodes (tensor or list), initializers: no data in what is stored, and it reads the same."""
    data = conv_model().SerializeToString()
    marker = MARKER.tobytes()
    assert data.count(marker) > 1000
    model = onnx_reader.parse(data)
    stripped = onnx_reader.strip(model)
    assert marker not in stripped and len(stripped) < 1000
    signatures, work = onnx_reader.read(stripped, 32)
    assert (signatures, work) == onnx_reader.read(data, 32)
    (sig,) = signatures
    assert (sig.in_channels, sig.out_channels, sig.kernel, sig.in_h) == (3, 8, (3, 3), 32)


def test_onnx_node_count_is_bounded() -> None:
    """A graph over MAX_ONNX_NODES is refused before it is checked or read; one at the limit is fine."""
    limit = get_settings().max_onnx_nodes
    at_limit = conv_model(relus=limit - 4)  # 2 Constants, Conv, Identity
    assert sum(1 for _ in at_limit.graph.node) == limit
    onnx_reader.parse(at_limit.SerializeToString())
    over = conv_model(relus=limit - 3)
    with pytest.raises(ExtractionError, match=f"{limit + 1} nodes; at most {limit}"):
        onnx_reader.parse(over.SerializeToString())


def test_subgraph_nodes_count_and_external_constants_are_refused() -> None:
    """Nodes inside an If branch count toward the limit; a Constant pointing outside the file is refused."""
    limit = get_settings().max_onnx_nodes
    model = conv_model()
    out = onnx.helper.make_tensor_value_info("o", onnx.TensorProto.FLOAT, None)
    branch = onnx.helper.make_graph(
        [onnx.helper.make_node("Constant", [], ["o"], value_float=1.0) for _ in range(limit)], "b", [], [out]
    )
    model.graph.node.append(onnx.helper.make_node("If", ["cond"], ["unused"], then_branch=branch, else_branch=branch))
    with pytest.raises(ExtractionError, match=f"{2 * limit + 5} nodes"):
        onnx_reader.parse(model.SerializeToString())
    model = conv_model()
    tensor = model.graph.node[0].attribute[0].t
    tensor.ClearField("raw_data")
    tensor.data_location = onnx.TensorProto.EXTERNAL
    tensor.external_data.add(key="location", value="../../etc/passwd")
    with pytest.raises(ExtractionError, match="outside the file"):
        onnx_reader.parse(model.SerializeToString())


def test_stored_structure_is_bounded() -> None:
    """Documentation is not stored; a graph whose bare structure is still huge (a 17 MB name) is refused."""
    model = conv_model()
    model.graph.node[2].doc_string = "d" * 100_000
    model.doc_string = "d" * 100_000
    assert len(onnx_reader.strip(onnx_reader.parse(model.SerializeToString()))) < 1000
    model = conv_model()
    model.graph.node[2].name = "n" * (onnx_reader.MAX_STORED_GRAPH_BYTES + 1)
    with pytest.raises(ExtractionError, match="without its tensors"):
        onnx_reader.strip(onnx_reader.parse(model.SerializeToString()))

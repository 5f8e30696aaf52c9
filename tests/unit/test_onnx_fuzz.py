"""Generated ONNX graphs, within and past every bound: registration reads each one or refuses it with a
TraincastError below 500 (a 4xx at the API), and what it accepts stays inside a layer list's bounds.

Graphs are chains of the ops the reader knows, with random shapes, attributes, opsets and weights that may be
missing, mis-sized or declared without data. Derandomised: the same examples every run, so a failure reproduces.
"""

import math
from typing import Any

import onnx
import onnx.helper as oh
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.cnn import layer_list, registry
from shared.cnn import onnx_reader as reader
from shared.core.errors import TraincastError

F, I64 = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64
EXAMPLES = 1000
HUGE = [1025, 2**16 + 1, 2**31, 2**40, 2**62, 2**63 - 1]
# Past a bound, zero, negative (a proto holds any int64) or symbolic: what a perturbation puts in place of a figure.
ODD = st.one_of(st.sampled_from(HUGE), st.integers(-3, 0), st.just("d"))
PERTURBATIONS = ["conv figure", "image dim", "image rank", "opset", "group", "auto_pad", "pads length",
                 "weight without data", "external data", "unknown op", "pool window"]  # fmt: skip


def zeros(name: str, dims: list[int]) -> onnx.TensorProto:
    """An initializer of zeros."""
    return oh.make_tensor(name, F, dims, [0.0] * math.prod(dims))


def declared(name: str, dims: list[Any], external: bool = False) -> onnx.TensorProto:
    """An initializer declared without its data, or pointing at a file outside the upload."""
    made = onnx.TensorProto(name=name, data_type=F)
    made.dims.extend(d if isinstance(d, int) else 1 for d in dims)
    if external:
        made.data_location = onnx.TensorProto.EXTERNAL
        made.external_data.add(key="location", value="/etc/passwd")
    return made


@st.composite
def graphs(draw: Any) -> bytes:
    """A small valid CNN (a chain of 1-6 ops after a Conv), then 0-2 perturbations past the bounds."""
    bad = draw(st.lists(st.sampled_from(PERTURBATIONS), max_size=2, unique=True))
    channels = draw(st.integers(1, 8))
    image: list[Any] = ["N", channels, "H", "W"]
    nodes, inits = [], []
    ops = ["Conv", *draw(st.lists(st.sampled_from(["Conv", "ConvTranspose", "Relu", "BatchNormalization", "MaxPool",
                                                   "AveragePool", "Add", "Concat"]), max_size=5))]  # fmt: skip
    if draw(st.booleans()):
        ops += ["GlobalAveragePool", "Flatten", "Gemm"]
    if "unknown op" in bad:
        ops.insert(draw(st.integers(0, len(ops))), "NotAnOp")
    for i, op in enumerate(ops):
        x, y, attrs, extra = f"x{i}", f"x{i + 1}", {}, []  # type: str, str, dict[str, Any], list[str]
        if op in ("Conv", "ConvTranspose"):
            out, k = draw(st.integers(1, 16)), draw(st.integers(1, 5))
            group = draw(st.sampled_from([g for g in range(1, 9) if channels % g == 0 and out % g == 0]))
            attrs = {"kernel_shape": [k, k], "strides": [draw(st.integers(1, 3))] * 2, "group": group}
            attrs |= {"pads": [draw(st.integers(0, k - 1))] * 4, "dilations": [draw(st.integers(1, 2))] * 2}
            weight = [out, channels // group, k, k] if op == "Conv" else [channels, out // group, k, k]
            if "conv figure" in bad and draw(st.booleans()):
                what = draw(st.sampled_from(["kernel_shape", "strides", "pads", "dilations", "out"]))
                odd = draw(ODD.filter(lambda v: isinstance(v, int)))
                if what == "out":
                    weight[0 if op == "Conv" else 1] = odd
                elif what == "kernel_shape":
                    attrs[what], weight[2:] = [odd, odd], [odd, odd]
                else:
                    attrs[what] = [odd] * len(attrs[what])
            if "group" in bad and draw(st.booleans()):
                attrs["group"] = draw(st.one_of(st.integers(-1, 7), st.sampled_from(HUGE)))
            if "auto_pad" in bad and draw(st.booleans()):
                attrs.pop("pads")
                attrs["auto_pad"] = draw(st.sampled_from(["SAME_UPPER", "SAME_LOWER", "VALID", "BOGUS"]))
            if "pads length" in bad and draw(st.booleans()):
                attrs["pads"] = draw(st.lists(st.integers(0, 2), min_size=1, max_size=7))
            small = all(isinstance(d, int) and 0 < d <= 64 for d in weight)
            if "external data" in bad and draw(st.booleans()):
                inits.append(declared(f"w{i}", weight, external=True))
            elif "weight without data" in bad and draw(st.booleans()) or not small:
                inits.append(declared(f"w{i}", weight))
            else:
                inits.append(zeros(f"w{i}", weight))
            extra = [f"w{i}"]
            channels = out if op == "Conv" else out // group * group
        elif op in ("MaxPool", "AveragePool"):
            k = draw(st.integers(1, 3))
            attrs = {"kernel_shape": [k, k], "strides": [draw(st.integers(1, 2))] * 2, "pads": [0] * 4}
            if "pool window" in bad and draw(st.booleans()):
                attrs["kernel_shape"] = [draw(ODD.filter(lambda v: isinstance(v, int)))] * 2
        elif op == "BatchNormalization":
            for part in ("s", "b", "m", "v"):
                inits.append(zeros(f"{part}{i}", [channels]))
                extra.append(f"{part}{i}")
        elif op in ("Add", "Concat"):
            extra = [x]
            if op == "Concat":
                attrs, channels = {"axis": 1}, channels * 2
        elif op == "Gemm":
            inits.append(zeros(f"g{i}", [channels, draw(st.integers(1, 10))]))
            extra = [f"g{i}"]
        nodes.append(oh.make_node(op, [x, *extra], [y], **attrs))
    if "image dim" in bad:
        image[draw(st.integers(0, 3))] = draw(ODD)
    if "image rank" in bad:
        image = draw(st.lists(st.one_of(ODD, st.integers(1, 8)), max_size=10))
    out_rank = 2 if ops[-1] == "Gemm" else 4
    inputs = [oh.make_tensor_value_info("x0", F, image)]
    output = oh.make_tensor_value_info(f"x{len(nodes)}", F, [f"o{j}" for j in range(out_rank)])
    graph = oh.make_graph(nodes, "fuzz", inputs, [output], inits)
    opset = draw(st.sampled_from([-1, 0, 1, 6, 1000])) if "opset" in bad else draw(st.sampled_from([11, 13, 17, 21]))
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)]).SerializeToString()


def accepted_within_bounds(graph: bytes, size: int) -> None:
    """Read at a size as a job reads it: refused clearly, or layers inside a layer list's bounds and finite work."""
    try:
        signatures, workload = reader.read(graph, size)
    except TraincastError as exc:
        assert exc.status < 500, exc
        return
    for sig in signatures:
        assert 1 <= sig.in_channels <= layer_list.MAX_CHANNELS and 1 <= sig.out_channels <= layer_list.MAX_CHANNELS
        assert 1 <= sig.groups <= layer_list.MAX_CHANNELS and min(sig.in_h, sig.in_w) >= 1
        windows = (*sig.kernel, *sig.stride, *sig.padding, *sig.dilation, *sig.output_padding)
        assert all(0 <= w <= layer_list.MAX_WINDOW for w in windows), sig
    for figure in leaves(workload):
        if figure is None:  # a figure the reader leaves unknown
            continue
        assert math.isfinite(float(figure)) and float(figure) >= 0, workload


def leaves(value: Any) -> list[Any]:
    """Every number of a nested workload."""
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in leaves(v)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in leaves(v)]
    return [value]


@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(graphs())
def test_registration_reads_or_clearly_refuses_every_generated_graph(data: bytes) -> None:
    """No exception but a TraincastError below 500 (an OverflowError, IndexError or ValueError is a 500 at the API),
    and what is accepted reads within bounds at the sizes jobs ask for."""
    try:
        graph, definition, parameters = registry.checked_onnx(data)
    except TraincastError as exc:
        assert exc.status < 500, exc
        return
    assert len(graph) <= reader.MAX_STORED_GRAPH_BYTES and definition["nodes"] >= 1
    assert 0 <= int(parameters) <= 10**15
    for size in (8, 64, 224):
        accepted_within_bounds(graph, size)

"""Reading an uploaded ONNX model: parsed and shape-inferred with the onnx package, never executed.

What is stored is the graph with the values of its constant tensors removed (their shapes stay):
initializers, Constant nodes and tensor attributes, in subgraphs and functions too. A 200 MB upload
becomes a few kilobytes and can be read again at any image size. Graphs are bounded in node count.
"""

import math
from collections import Counter
from collections.abc import Iterator
from typing import Any

import onnx
import onnx.helper
import onnx.shape_inference
from google.protobuf.message import DecodeError

from shared.cnn.layer_list import MAX_CHANNELS, MAX_SIZE, MAX_WINDOW
from shared.cnn.signatures import ConvSignature
from shared.cnn.workload import Workload, WorkloadJson
from shared.core.errors import ExtractionError
from shared.core.settings import get_settings

# Constant tensors larger than this lose their values; smaller ones (shape constants for Reshape,
# Resize's scales and the like: 512 bytes at most) are kept because shape inference reads them.
KEEP_VALUES_UP_TO = 64
# What is stored of a graph once its tensor values are gone: names, attributes and shapes only.
# Beyond this the structure itself is the payload (huge names, attribute lists).
MAX_STORED_GRAPH_BYTES = 16 * 1024 * 1024
_DATA_FIELDS = ("raw_data", "float_data", "double_data", "int32_data", "int64_data", "uint64_data", "string_data")
_BATCH = 2  # the batch the graph is read at; figures are divided by it
# Bounds on every tensor of a graph, as on a layer list's numbers (shared/cnn/layer_list.py): far past real CNNs,
# so no figure overflows downstream and an agent is never asked for an absurd tensor.
MAX_RANK = 8
MAX_DIM = 1 << 31
MAX_ELEMENTS = 1 << 40  # of one tensor at the batch it is read at

_KIND_OF = {
    "BatchNormalization": "batch_norm", "LayerNormalization": "batch_norm", "InstanceNormalization": "batch_norm",
    "Relu": "activation", "Clip": "activation", "Sigmoid": "activation", "HardSigmoid": "activation",
    "HardSwish": "activation", "Gelu": "activation", "Tanh": "activation", "LeakyRelu": "activation",
    "PRelu": "activation", "Elu": "activation", "Selu": "activation", "Softplus": "activation",
    "MaxPool": "pooling", "AveragePool": "pooling", "GlobalAveragePool": "pooling",
    "GlobalMaxPool": "pooling", "ReduceMean": "pooling",
    "Gemm": "linear", "MatMul": "linear",
    "Add": "elementwise", "Mul": "elementwise", "Sub": "elementwise", "Div": "elementwise",
    "Concat": "concat",
    "Softmax": "softmax_loss", "LogSoftmax": "softmax_loss", "SoftmaxCrossEntropyLoss": "softmax_loss",
}  # fmt: skip
_IGNORED = {
    "Reshape", "Flatten", "Shape", "Gather", "Unsqueeze", "Squeeze", "Constant", "Identity", "Transpose",
    "Slice", "Split", "Cast", "Dropout", "ConstantOfShape", "Expand", "Range", "Tile", "Pad",
}  # fmt: skip
_PARAMETER_INPUTS = {
    "Conv": (1, 2),
    "ConvTranspose": (1, 2),
    "Gemm": (1, 2),
    "MatMul": (1,),
    "BatchNormalization": (1, 2),
}


def parse(data: bytes) -> onnx.ModelProto:
    """Decode and check an upload; a clear ExtractionError for anything that is not a usable ONNX CNN."""
    try:
        model = onnx.load_model_from_string(data)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise ExtractionError(f"not an ONNX model: the file does not decode as ONNX protobuf ({exc})") from exc
    if not model.graph.node:
        raise ExtractionError("not an ONNX model: the graph has no nodes")
    limit = get_settings().max_onnx_nodes
    nodes = sum(len(g.node) for g in _graphs(model))
    if nodes > limit:
        raise ExtractionError(f"the ONNX graph has {nodes} nodes; at most {limit} are allowed", nodes=nodes)
    external = [t.name for t in _tensors(model) if t.data_location == onnx.TensorProto.EXTERNAL]
    if external:
        # External data would make us read other files; a single self-contained file is required.
        raise ExtractionError(f"tensors stored outside the file are not supported (e.g. {external[0]!r})")
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        raise ExtractionError(f"broken ONNX graph: {str(exc).splitlines()[0]}") from exc
    if not any(n.op_type in ("Conv", "ConvTranspose") for n in model.graph.node):
        raise ExtractionError("the ONNX graph has no Conv or ConvTranspose node: not a CNN")
    newest = onnx.defs.onnx_opset_version()
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx") and not 1 <= opset.version <= newest:
            raise ExtractionError(f"ONNX opset {opset.version}: this server reads opsets 1 to {newest}")
    for value in (*model.graph.input, *model.graph.output, *model.graph.value_info):
        _bounded(value.name, [d.dim_value for d in value.type.tensor_type.shape.dim], "declared")
    for tensor in _tensors(model):
        _bounded(tensor.name, list(tensor.dims), "constant")
    _image_input(model)
    return model


def _bounded(name: str, dims: list[int], what: str) -> None:
    """Refuse a tensor whose rank, dimensions or size no CNN has (they would overflow the figures read from it)."""
    if len(dims) > MAX_RANK:
        raise ExtractionError(f"{what} tensor {name[:80]!r} has rank {len(dims)}; at most {MAX_RANK} is read")
    if any(d > MAX_DIM for d in dims):
        raise ExtractionError(f"{what} tensor {name[:80]!r} has a dimension over {MAX_DIM}: {dims[:8]}")
    if math.prod(max(d, 1) for d in dims) > MAX_ELEMENTS:
        raise ExtractionError(f"{what} tensor {name[:80]!r} has over {MAX_ELEMENTS} elements: {dims[:8]}")


def strip(model: onnx.ModelProto) -> bytes:
    """The model without the values of its constant tensors (shapes kept) or its documentation, as bytes."""
    stripped = onnx.ModelProto()
    stripped.CopyFrom(model)
    stripped.ClearField("training_info")  # training graphs and their tensors are never read
    stripped.ClearField("metadata_props")
    stripped.ClearField("doc_string")
    for graph in _graphs(stripped):
        graph.ClearField("doc_string")
        for node in graph.node:
            node.ClearField("doc_string")
            _constant_as_tensor(node)
    for tensor in _tensors(stripped):
        if math.prod(tensor.dims) > KEEP_VALUES_UP_TO:
            for name in _DATA_FIELDS:
                tensor.ClearField(name)
    data = stripped.SerializeToString()
    if len(data) > MAX_STORED_GRAPH_BYTES:
        raise ExtractionError(
            f"the ONNX graph's structure is {len(data)} bytes without its tensors; at most {MAX_STORED_GRAPH_BYTES}"
        )
    return data


def input_size(model: onnx.ModelProto) -> tuple[int | None, int | None]:
    """The image input's height and width, None where symbolic."""
    dims = _image_input(model).type.tensor_type.shape.dim
    return (dims[2].dim_value or None, dims[3].dim_value or None)


def read(graph: bytes, image_size: int) -> tuple[Counter[ConvSignature], WorkloadJson]:
    """Each conv signature with its count (in node order of first use) and the workload, at image_size."""
    try:
        return _read(graph, image_size)
    except OverflowError as exc:  # a figure past a float the bounds did not foresee: still the upload's fault
        raise ExtractionError(f"a figure of the graph is too large to read at {image_size}x{image_size}") from exc


def _read(graph: bytes, image_size: int) -> tuple[Counter[ConvSignature], WorkloadJson]:
    model = onnx.load_model_from_string(graph)
    dims = _image_input(model).type.tensor_type.shape.dim
    for axis in (2, 3):
        if dims[axis].dim_value and dims[axis].dim_value != image_size:
            raise ExtractionError(
                f"the model's input is fixed at {dims[2].dim_value}x{dims[3].dim_value}; "
                f"it cannot be read at {image_size}x{image_size} (export it with dynamic height and width)"
            )
    # A batch fixed at export (torch.onnx.export's default: the example's batch, often 1) is read as it is: reshapes
    # recorded for that batch would not hold for another. Figures are per sample either way.
    batch = dims[0].dim_value if 0 < dims[0].dim_value <= MAX_DIM else _BATCH
    dims[0].dim_value = batch
    dims[2].dim_value = image_size
    dims[3].dim_value = image_size
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except (onnx.shape_inference.InferenceError, RuntimeError) as exc:
        raise ExtractionError(f"cannot infer shapes at {image_size}x{image_size}: {str(exc).splitlines()[0]}") from exc
    shapes, dtypes = _shapes(inferred)
    for name, shape in shapes.items():
        _bounded(name, shape, "inferred")
    signatures: Counter[ConvSignature] = Counter()
    work = Workload()
    params: set[str] = set()
    inits = {t.name for t in inferred.graph.initializer}
    for node in inferred.graph.node:
        kind = "conv" if node.op_type in ("Conv", "ConvTranspose") else _kind(node.op_type)
        if kind is None:
            continue
        if kind == "conv":
            signatures[_conv(node, shapes, dtypes)] += 1
        params.update(
            node.input[i]
            for i in _PARAMETER_INPUTS.get(node.op_type, ())
            if i < len(node.input) and node.input[i] in inits
        )
        ins = [shapes[i] for i in node.input if i in shapes]
        outs = [shapes[o] for o in node.output if o in shapes]
        nbytes = 4.0 * (sum(math.prod(s) for s in ins) + sum(math.prod(s) for s in outs))
        work.add(kind, _flops(node, kind, ins, outs), nbytes, 4.0 * sum(math.prod(s) for s in outs))
        if node.op_type == "BatchNormalization" and ins and len(ins[0]) == 4:  # trains as a batch norm over NCHW
            work.add_norm(ins[0][1], ins[0][2] * ins[0][3])
    work.parameters = sum(math.prod(shapes[p]) for p in params)
    work.parameter_tensors = len(params)
    work.largest_parameter = max((math.prod(shapes[p]) for p in params), default=0)
    return signatures, work.per_sample(batch).to_json()


def _graphs(model: onnx.ModelProto) -> Iterator[onnx.GraphProto | onnx.FunctionProto]:
    """The main graph, every subgraph (If, Loop, Scan bodies) and every local function, nested ones too."""
    pending: list[onnx.GraphProto | onnx.FunctionProto] = [model.graph, *model.functions]
    while pending:
        graph = pending.pop()
        yield graph
        for node in graph.node:
            for attr in node.attribute:
                if attr.HasField("g"):
                    pending.append(attr.g)
                pending.extend(attr.graphs)


def _tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every tensor a model carries: initializers, sparse ones, and node attributes (Constant's value)."""
    for graph in _graphs(model):
        if isinstance(graph, onnx.GraphProto):
            yield from graph.initializer
            for sparse in graph.sparse_initializer:
                yield from (sparse.values, sparse.indices)
        for node in graph.node:
            for attr in node.attribute:
                if attr.HasField("t"):
                    yield attr.t
                yield from attr.tensors
                for sparse in [attr.sparse_tensor, *attr.sparse_tensors]:
                    yield from (sparse.values, sparse.indices)
    for info in model.training_info:
        yield from info.initialization.initializer
        yield from info.algorithm.initializer


def _constant_as_tensor(node: onnx.NodeProto) -> None:
    # A Constant's value_floats / value_ints is its data as a list: made a tensor so strip keeps its shape only.
    if node.op_type != "Constant" or node.domain not in ("", "ai.onnx"):
        return
    for attr in node.attribute:
        kind = {"value_floats": onnx.TensorProto.FLOAT, "value_ints": onnx.TensorProto.INT64}.get(attr.name)
        values = attr.floats if attr.name == "value_floats" else attr.ints
        if kind is not None and len(values) > KEEP_VALUES_UP_TO:
            tensor = onnx.TensorProto(name="value", data_type=kind, dims=[len(values)])
            node.attribute.remove(attr)
            node.attribute.append(onnx.helper.make_attribute("value", tensor))
            return


def export_warnings(model: onnx.ModelProto) -> list[str]:
    """What the graph says of how it was exported that makes it differ from the graph training runs."""
    nodes = [n for g in _graphs(model) for n in g.node]
    norms = [n for n in nodes if n.op_type == "BatchNormalization"]
    training_norm = any(a.name == "training_mode" and a.i == 1 for n in norms for a in n.attribute)
    training_norm = training_norm or any(len(n.output) > 1 for n in norms)  # opsets < 14: running stats out
    convs = [n for n in nodes if n.op_type in ("Conv", "ConvTranspose")]
    biased = bool(convs) and all(len(n.input) > 2 and n.input[2] for n in convs)
    if any(n.op_type == "Dropout" for n in nodes) or training_norm:
        return []
    if norms:
        return ["exported in eval mode (batch norm in inference mode): read as the training graph, whose batch norm "
                "costs the same kind of work"]  # fmt: skip
    if biased:
        return ["looks like an eval-mode export (no batch norm or dropout node, and every conv has a bias): if the "
                "model has batch norm, the export folded it into the convs and its cost is missing from every "
                "answer. Export in training mode: torch.onnx.export(model, x, path, dynamo=False, "
                "training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)"]  # fmt: skip
    return []


def _image_input(model: onnx.ModelProto) -> onnx.ValueInfoProto:
    inits = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    images = [i for i in inputs if len(i.type.tensor_type.shape.dim) == 4]
    if len(images) != 1:
        raise ExtractionError(
            f"expected one image input of shape [batch, channels, height, width], found {len(images)}"
        )
    return images[0]


def _shapes(model: onnx.ModelProto) -> tuple[dict[str, list[int]], dict[str, str]]:
    shapes: dict[str, list[int]] = {}
    dtypes: dict[str, str] = {}
    infos = list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output)
    for vi in infos:
        tt = vi.type.tensor_type
        if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
            shapes[vi.name] = [d.dim_value for d in tt.shape.dim]
            dtypes[vi.name] = _dtype(tt.elem_type)
    for t in model.graph.initializer:
        shapes[t.name] = list(t.dims)
        dtypes[t.name] = _dtype(t.data_type)
    return shapes, dtypes


def _dtype(elem_type: int) -> str:
    return str(onnx.helper.tensor_dtype_to_np_dtype(elem_type))


def _kind(op_type: str) -> str | None:
    return None if op_type in _IGNORED else _KIND_OF.get(op_type, "other")


def _conv(node: onnx.NodeProto, shapes: dict[str, list[int]], dtypes: dict[str, str]) -> ConvSignature:
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    where = f"{node.op_type} node {node.name or node.output[0]!r}"
    x, w = shapes.get(node.input[0]), shapes.get(node.input[1])
    if x is None or w is None:
        raise ExtractionError(f"{where}: input or weight shape unknown after shape inference")
    if len(x) != 4:
        raise ExtractionError(f"{where}: only 2-D convolutions are supported (input has {len(x)} dims)")
    transposed = node.op_type == "ConvTranspose"
    if transposed and "output_shape" in attrs:
        raise ExtractionError(f"{where}: ConvTranspose with output_shape is not supported; use pads")
    groups = int(attrs.get("group", 1))
    kernel = tuple(attrs.get("kernel_shape", w[2:]))
    stride = tuple(attrs.get("strides", (1, 1)))
    dilation = tuple(attrs.get("dilations", (1, 1)))
    padding = _padding(attrs, x[2:], kernel, stride, dilation, where)
    # The bounds of a layer list's layer (shared/cnn/layer_list.py), with the same messages.
    for field, values, low, high in (
        ("channels", (x[1], w[0], w[1] * groups), 1, MAX_CHANNELS), ("input size", x[2:], 1, MAX_SIZE),
        ("kernel", kernel, 1, MAX_WINDOW), ("stride", stride, 1, MAX_WINDOW), ("dilation", dilation, 1, MAX_WINDOW),
        ("padding", padding, 0, MAX_WINDOW), ("group", (groups,), 1, MAX_CHANNELS),
    ):  # fmt: skip
        if not all(low <= int(v) <= high for v in values):
            raise ExtractionError(f"{where}: {field} {list(values)} must be between {low} and {high}")
    return ConvSignature(
        in_channels=x[1],
        out_channels=w[1] * groups if transposed else w[0],
        in_h=x[2],
        in_w=x[3],
        kernel=(int(kernel[0]), int(kernel[1])),
        stride=(int(stride[0]), int(stride[1])),
        padding=padding,
        dilation=(int(dilation[0]), int(dilation[1])),
        groups=groups,
        bias=len(node.input) > 2 and bool(node.input[2]),
        transposed=transposed,
        output_padding=tuple(int(v) for v in attrs.get("output_padding", (0, 0))),  # type: ignore[arg-type]
        dtype=dtypes.get(node.input[0], "float32"),
    )


def _padding(
    attrs: dict[str, Any], size: list[int], kernel: tuple[int, ...], stride: tuple[int, ...],
    dilation: tuple[int, ...], where: str,
) -> tuple[int, int]:  # fmt: skip
    auto = attrs.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto == "VALID":
        return (0, 0)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = []
        for i in range(2):
            total = max(
                (math.ceil(size[i] / stride[i]) - 1) * stride[i] + (kernel[i] - 1) * dilation[i] + 1 - size[i], 0
            )
            pads.append((total // 2, total - total // 2))
        begin, end = [p[0] for p in pads], [p[1] for p in pads]
    else:
        p = list(attrs.get("pads", (0, 0, 0, 0)))
        begin, end = p[:2], p[2:]
    if begin != end:
        raise ExtractionError(f"{where}: asymmetric padding {begin}/{end} is not supported yet")
    return (int(begin[0]), int(begin[1]))


def _flops(node: onnx.NodeProto, kind: str, ins: list[list[int]], outs: list[list[int]]) -> float:
    if not outs:
        return 0.0
    if kind == "conv" and len(ins) >= 2:
        # A multiply-add per weight per output position (Conv) or per input position (ConvTranspose).
        positions = outs[0] if node.op_type == "Conv" else ins[0]
        return 2.0 * math.prod(positions) * math.prod(ins[1][1:])
    if kind == "linear" and len(ins) >= 2:
        return 2.0 * math.prod(outs[0]) * ins[0][-1]
    return float(math.prod(outs[0]))

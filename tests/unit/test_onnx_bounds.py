"""ONNX graphs are bounded as layer lists are: rank, dimensions, size, conv windows, opset."""

from collections.abc import Callable, Sequence

import onnx
import onnx.helper as oh
import pytest

from shared.cnn import onnx_reader
from shared.core.errors import ExtractionError

F = onnx.TensorProto.FLOAT


def model(
    *, image: Sequence[int | str], stride: int = 1, extra: Sequence[onnx.ValueInfoProto] = (), opset: int = 17
) -> bytes:
    """One 3x3 Conv over an image input (and any extra inputs), serialised."""
    weight = oh.make_tensor("w", F, [8, 3, 3, 3], [0.0] * (8 * 3 * 3 * 3))
    conv = oh.make_node("Conv", ["image", "w"], ["y"], pads=[1, 1, 1, 1], strides=[stride, stride])
    graph = oh.make_graph(
        [conv], "g", [oh.make_tensor_value_info("image", F, list(image)), *extra],
        [oh.make_tensor_value_info("y", F, ["b", 8, "oh", "ow"])], [weight],
    )  # fmt: skip
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)]).SerializeToString()


def reads(data: bytes, size: int = 32) -> None:
    """Parse and read as registration does."""
    parsed = onnx_reader.parse(data)
    onnx_reader.read(onnx_reader.strip(parsed), size)


def test_a_small_conv_graph_reads() -> None:
    """The bounds leave an ordinary graph alone."""
    reads(model(image=["batch", 3, "h", "w"]))


def huge_input(rank: int, dim: int) -> Callable[[], bytes]:
    """A graph with a second input of that rank and dimension."""
    return lambda: model(image=["b", 3, "h", "w"], extra=[oh.make_tensor_value_info("x", F, [dim] * rank)])


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (huge_input(20, 2**62), "rank 20"),  # an OverflowError and a 500 before
        (huge_input(6, 2**40), "dimension over"),
        (huge_input(6, 2**20), "elements"),
        (lambda: model(image=[2, 3, 2**40, 2**40]), "dimension over"),
        (lambda: model(image=["b", 3, "h", "w"], opset=1000), "opset 1000"),
    ],
)
def test_graphs_past_the_bounds_are_refused_clearly(data: Callable[[], bytes], words: str) -> None:
    """Each is an ExtractionError (a 422 at the API) naming what is wrong, never an overflow."""
    with pytest.raises(ExtractionError, match=words):
        reads(data())


def test_a_conv_window_past_a_layer_lists_bound_is_refused() -> None:
    """A stride of 2,000 (a layer list allows 1,024) on a large enough image is refused as a layer list's is."""
    with pytest.raises(ExtractionError, match="stride"):
        reads(model(image=["b", 3, "h", "w"], stride=2000), size=2048)

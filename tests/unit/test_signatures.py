"""Conv signatures: exact, stable, shared across CNNs, and functional convs included."""

import pytest
import torch
import torch.nn.functional as F  # noqa: N812

from shared.cnn import zoo as cnn_zoo
from shared.cnn.signatures import ConvSignature
from shared.core.errors import ExtractionError


@pytest.mark.parametrize(
    ("name", "convs", "unique"),
    # Conv counts follow from the papers' architectures: ResNet-18 has 17 3x3 convs + 3 downsample
    # 1x1s; VGG-16 has 13 convs; ResNet-50 has 49 + 4 downsample; AlexNet 5.
    [("resnet18", 20, 11), ("vgg16", 13, 9), ("resnet50", 53, 23), ("alexnet", 5, 5)],
)
def test_counts_at_224(name: str, convs: int, unique: int) -> None:
    """Conv calls and unique signatures of well-known CNNs at 224 px."""
    layers = cnn_zoo.conv_layers(name, 224)
    assert layers.total == convs
    assert len(layers.signatures) == unique


def test_signature_fields_and_hash() -> None:
    """The first conv of ResNet-18 is read exactly and round-trips through JSON with the same hash."""
    first = cnn_zoo.conv_layers("resnet18", 224).signatures[0]
    assert (first.in_channels, first.out_channels, first.in_h, first.kernel, first.stride, first.padding) == (
        3,
        64,
        224,
        (7, 7),
        (2, 2),
        (3, 3),
    )
    assert first.bias is False and first.groups == 1 and first.dtype == "float32"
    again = ConvSignature.from_json(first.to_json())
    assert again == first and again.hash == first.hash and len(first.hash) == 32


def test_shared_layers_share_keys() -> None:
    """ResNet-18 and ResNet-34 share their stem conv; image size changes the signature."""
    r18 = {s.hash for s in cnn_zoo.conv_layers("resnet18", 224).signatures}
    r34 = {s.hash for s in cnn_zoo.conv_layers("resnet34", 224).signatures}
    small = {s.hash for s in cnn_zoo.conv_layers("resnet18", 112).signatures}
    assert r18 <= r34  # every ResNet-18 layer shape also occurs in ResNet-34
    assert not r18 & small


def test_functional_conv_is_counted() -> None:
    """A conv called with F.conv2d in forward (no nn.Conv2d module) is in the list."""

    class Functional(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.empty(8, 3, 5, 5))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.conv2d(x, self.weight, stride=2, padding=2, dilation=1)

    with torch.device("meta"):
        model = Functional()
    layers = cnn_zoo.conv_layers_of(model, 32)
    assert layers.total == 1
    sig = layers.signatures[0]
    assert (sig.in_channels, sig.out_channels, sig.kernel, sig.stride, sig.padding) == (3, 8, (5, 5), (2, 2), (2, 2))


def test_every_builtin_runs_on_the_meta_device() -> None:
    """Each torchvision model yields conv layers at its usual size without allocating real memory."""
    for name in cnn_zoo.builtin_names():
        size = 299 if name == "inception_v3" else 224  # Inception-v3's aux head needs 299
        assert cnn_zoo.conv_layers(name, size).total > 0, name


def test_too_small_image_is_a_clear_error() -> None:
    """A size a model cannot take names the model and the size."""
    with pytest.raises(ExtractionError, match="inception_v3 cannot run on 64x64"):
        cnn_zoo.conv_layers("inception_v3", 64)

"""Built-in CNNs (torchvision classification models) and reading their conv layers."""

from collections import Counter
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

from shared.errors import ExtractionError, NotFound
from shared.signatures import ConvSignature

# Batch norm in training mode refuses a batch of one at 1x1 spatial size; two avoids it and
# the batch size is not part of a signature anyway.
_EXTRACT_BATCH = 2


@dataclass(frozen=True)
class ConvLayers:
    """The conv layers of a CNN at one input size: signatures in order of first use and counts."""

    signatures: tuple[ConvSignature, ...]
    counts: tuple[int, ...]

    @property
    def total(self) -> int:
        """Number of conv calls in one forward pass."""
        return sum(self.counts)


@lru_cache(maxsize=1)
def builtin_names() -> tuple[str, ...]:
    """Names of every torchvision classification model."""
    import torchvision.models

    return tuple(sorted(torchvision.models.list_models(module=torchvision.models)))


@lru_cache(maxsize=1)
def _patch_regnet() -> None:
    # RegNet computes its stage widths with tensors and .tolist(); on the meta device there is
    # no data to list, so that arithmetic (not the model) runs on the CPU.
    import torch
    from torchvision.models import regnet

    original = regnet.BlockParams.from_init_params.__func__  # type: ignore[attr-defined]

    def on_cpu(cls: Any, *args: Any, **kwargs: Any) -> Any:
        with torch.device("cpu"):
            return original(cls, *args, **kwargs)

    regnet.BlockParams.from_init_params = classmethod(on_cpu)  # type: ignore[method-assign, assignment]


def _build(name: str, num_classes: int = 1000) -> Any:
    import torch
    import torchvision.models

    _patch_regnet()

    if name not in builtin_names():
        raise NotFound(f"unknown CNN {name!r}", cnn=name)
    kwargs: dict[str, Any] = {"weights": None, "num_classes": num_classes}
    if name in ("googlenet", "inception_v3"):
        kwargs["init_weights"] = False  # scipy-free, and weights are never used here
    with torch.device("meta"):
        return torchvision.models.get_model(name, **kwargs)


@cache
def parameter_count(name: str) -> int:
    """Parameters of the model with 1000 classes: torchvision's published count, else counted on meta."""
    import torchvision.models

    try:
        return int(torchvision.models.get_model_weights(name).DEFAULT.meta["num_params"])
    except (KeyError, ValueError, AttributeError):
        return sum(p.numel() for p in _build(name).parameters())


@lru_cache(maxsize=256)
def conv_layers(name: str, image_size: int) -> ConvLayers:
    """Every convolution one training forward pass of a built-in CNN runs."""
    try:
        return conv_layers_of(_build(name), image_size)
    except ExtractionError as exc:
        raise ExtractionError(f"{name} {exc.detail}", cnn=name, image_size=image_size) from exc


def conv_layers_of(model: Any, image_size: int) -> ConvLayers:
    """Every convolution a model on the meta device runs in one training forward pass."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[ConvSignature] = []

    class _RecordConvs(TorchDispatchMode):
        # Intercepting the operator (not nn.Conv2d modules) also catches functional convs.
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            if func is torch.ops.aten.convolution.default:
                seen.append(_signature_of(args))
            return func(*args, **(kwargs or {}))

    model.train()
    x = torch.empty(_EXTRACT_BATCH, 3, image_size, image_size, device="meta")
    try:
        with _RecordConvs():
            model(x)
    except RuntimeError as exc:
        raise ExtractionError(
            f"cannot run on {image_size}x{image_size} images: {str(exc).splitlines()[0]}", image_size=image_size
        ) from exc
    counts = Counter(seen)
    order = list(dict.fromkeys(seen))
    return ConvLayers(tuple(order), tuple(counts[s] for s in order))


def _signature_of(args: tuple[Any, ...]) -> ConvSignature:
    x, w, b, stride, padding, dilation, transposed, output_padding, groups = args[:9]
    if x.dim() != 4:
        raise ExtractionError(f"only 2-D convolutions are supported, got input of {x.dim()} dims")
    in_channels = int(x.shape[1])
    out_channels = int(w.shape[1] * groups) if transposed else int(w.shape[0])
    return ConvSignature(
        in_channels=in_channels,
        out_channels=out_channels,
        in_h=int(x.shape[2]),
        in_w=int(x.shape[3]),
        kernel=(int(w.shape[2]), int(w.shape[3])),
        stride=_pair(stride),
        padding=_pair(padding),
        dilation=_pair(dilation),
        groups=int(groups),
        bias=b is not None,
        transposed=bool(transposed),
        output_padding=_pair(output_padding),
        dtype=str(x.dtype).removeprefix("torch."),
    )


def _pair(v: Any) -> tuple[int, int]:
    vals = [int(i) for i in v]
    return (vals[0], vals[0]) if len(vals) == 1 else (vals[0], vals[1])

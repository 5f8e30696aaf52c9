"""Built-in CNNs (torchvision classification models) and reading any PyTorch model on the meta device."""

import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from functools import cache, lru_cache
from typing import Any

from shared.cnn import builtins as cnn_registry
from shared.cnn.aten_ops import from_aten
from shared.cnn.flow import Flow
from shared.cnn.op_signatures import OpSignature, optimizer_signature, without_backward
from shared.cnn.signatures import ConvSignature
from shared.cnn.workload import Workload, WorkloadJson, record_aten
from shared.core.errors import ExtractionError, NotFound

# Batch norm in training mode refuses a batch of one at 1x1 spatial size; two avoids it and
# the batch size is not part of a signature anyway.
_EXTRACT_BATCH = 2


@dataclass(frozen=True)
class ConvLayers:
    """A CNN read at one input size: conv signatures in order of first use, counts, workload."""

    signatures: tuple[ConvSignature, ...]
    counts: tuple[int, ...]
    workload: WorkloadJson = field(default_factory=lambda: WorkloadJson(), compare=False)
    # The other operators (and the optimizer step, count 1) in order of first use; empty where a reader cannot tell.
    ops: tuple[OpSignature, ...] = field(default=(), compare=False)
    op_counts: tuple[int, ...] = field(default=(), compare=False)

    @property
    def total(self) -> int:
        """Number of conv calls in one forward pass."""
        return sum(self.counts)

    def view(self) -> dict[str, Any]:
        """The public description: conv count, unique layers with their counts, workload."""
        return {
            "conv_count": self.total,
            "unique_signatures": len(self.signatures),
            "layers": [
                {"hash": s.hash, "count": c, **s.to_json()} for s, c in zip(self.signatures, self.counts, strict=True)
            ],
            "workload": self.workload,
        }


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


def build(name: str, num_classes: int = 1000, device: str = "meta") -> Any:
    """A torchvision model without weights, on the meta device unless asked otherwise."""
    import torch
    import torchvision.models

    if name not in builtin_names():
        raise NotFound(f"unknown CNN {name!r}", cnn=name)
    _patch_regnet()
    kwargs: dict[str, Any] = {"weights": None, "num_classes": num_classes}
    if name in ("googlenet", "inception_v3"):
        kwargs["init_weights"] = False  # scipy-free, and weights are never used here
    with torch.device(device):
        return torchvision.models.get_model(name, **kwargs)


@cache
def parameter_count(name: str) -> int:
    """Parameters of the model with 1000 classes: torchvision's published count, else counted on meta."""
    import torchvision.models

    try:
        return int(torchvision.models.get_model_weights(name).DEFAULT.meta["num_params"])
    except (KeyError, ValueError, AttributeError):
        return sum(p.numel() for p in build(name).parameters())


@lru_cache(maxsize=256)
def conv_layers(name: str, image_size: int, num_classes: int = 1000) -> ConvLayers:
    """Every convolution, and the workload, of one training forward pass of a built-in CNN."""
    try:
        return conv_layers_of(build(name, num_classes), image_size, num_classes)
    except ExtractionError as exc:
        known = cnn_registry.get(name)
        least = known.min_image_size if known else None
        hint = f" ({name} needs at least {least} px)" if least and least > image_size else ""
        raise ExtractionError(f"{name} {exc.detail}{hint}", cnn=name, image_size=image_size) from exc


def default_image_size(name: str) -> int:
    """The size a built-in CNN was designed for."""
    return 299 if name == "inception_v3" else 224


def runs_at(name: str, image_size: int) -> bool:
    """Whether a built-in CNN's training forward pass runs at this image size (traced on meta)."""
    try:
        conv_layers_of(build(name), image_size)
        return True
    except ExtractionError:
        return False


@cache
def smallest_size(name: str) -> int | None:
    """The smallest image size a built-in CNN trains at, if sizes above it all work (None otherwise)."""

    def works(size: int) -> bool:
        return runs_at(name, size)

    lo, hi = 8, 299
    if not works(hi):
        return None
    while lo < hi:  # the smallest size that works, if working is monotonic in size
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if works(mid) else (mid + 1, hi)
    # Some models need sizes divisible by a window or patch; then there is no single minimum.
    return lo if all(works(lo + k) for k in range(1, 8)) else None


def conv_layers_of(model: Any, image_size: int, num_classes: int | None = None) -> ConvLayers:
    """Every convolution and the workload of a meta-device model's training forward pass and loss."""
    import torch
    import torch.nn.functional as F  # noqa: N812
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[ConvSignature] = []
    seen_ops: list[OpSignature] = []
    called: list[int] = []  # the trace call each of seen_ops was read from
    work = Workload()
    x = torch.empty(_EXTRACT_BATCH, 3, image_size, image_size, device="meta")
    target = torch.zeros(_EXTRACT_BATCH, dtype=torch.long, device="meta")  # data, made outside the step
    flow = Flow(x, _EXTRACT_BATCH)

    class _Record(TorchDispatchMode):
        # Intercepting operators (not nn.Conv2d modules) also catches functional convs.
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            kwargs = kwargs or {}
            if func is torch.ops.aten.native_batch_norm.default:
                out = _batch_norm_shapes(*args)
            elif func is torch.ops.aten.convolution.default:
                out = _conv_output(func(*args, **kwargs), args[0])
            else:
                out = func(*args, **kwargs)
            name = func.overloadpacket.__name__
            flow.note(name, args, out)
            if func is torch.ops.aten.convolution.default:
                seen.append(_signature_of(args))
            else:
                op = from_aten(name, args, out, _EXTRACT_BATCH, batched=flow.carries)
                if op is not None:
                    seen_ops.append(op)
                    called.append(len(flow.calls) - 1)
            record_aten(work, func, args, kwargs, out)
            return out

    model.train()
    saved = _SavedTensors({p.untyped_storage()._cdata for p in model.parameters()})
    try:
        with torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack), _Record():
            out = model(x)
            logits = out.logits if hasattr(out, "logits") else out  # inception/googlenet aux outputs
            if num_classes is not None and isinstance(logits, torch.Tensor) and logits.dim() == 2:
                F.cross_entropy(logits, target)
    except (RuntimeError, AssertionError, ValueError) as exc:
        # Models check their input with torch._assert (AssertionError: ViT's fixed patch grid) or
        # ValueError as well as failing inside an op (RuntimeError); each means "not at this size".
        raise ExtractionError(
            f"cannot run on {image_size}x{image_size} images: {(str(exc).splitlines() or [type(exc).__name__])[0]}",
            image_size=image_size,
        ) from exc
    params = list(model.parameters())
    work.parameters = sum(p.numel() for p in params)
    work.parameter_tensors = len(params)
    work.largest_parameter = max((p.numel() for p in params), default=0)
    work.saved_bytes = float(saved.nbytes)
    counts = Counter(seen)
    order = list(dict.fromkeys(seen))
    sums, through = flow.backward()
    # An op no gradient comes back through (autograd's copy of an in-place op's input) has no backward in the step.
    seen_ops = [op if at in through else without_backward(op) for op, at in zip(seen_ops, called, strict=True)]
    seen_ops += sums
    seen_ops.append(optimizer_signature([tuple(p.shape) for p in params if p.requires_grad]))
    op_counts = Counter(seen_ops)
    op_order = list(dict.fromkeys(seen_ops))
    return ConvLayers(
        tuple(order), tuple(counts[s] for s in order), work.per_sample(_EXTRACT_BATCH).to_json(),
        tuple(op_order), tuple(op_counts[o] for o in op_order),
    )  # fmt: skip


class _SavedTensors:
    """Sums the distinct storages autograd saves for backward: the activation memory a step keeps."""

    def __init__(self, parameter_storages: set[int]) -> None:
        self.seen = set(parameter_storages)  # weights are saved too, but counted as parameters
        self.nbytes = 0
        self.kept: list[Any] = []  # holds each storage, so its address is not reused by another

    def pack(self, t: Any) -> Any:
        storage = t.untyped_storage()
        if storage._cdata not in self.seen:
            self.seen.add(storage._cdata)
            self.kept.append(storage)
            self.nbytes += storage.nbytes()
        return t

    @staticmethod
    def unpack(t: Any) -> Any:
        return t


def _batch_norm_shapes(x: Any, *rest: Any) -> tuple[Any, Any, Any]:
    # The meta kernel of batch norm is a slow Python reference (~10 ms a call); its output
    # shapes are simple: the input's, and per-channel statistics in training (empty otherwise).
    import torch

    training = bool(rest[4]) if len(rest) > 4 else True
    stats = x.shape[1] if training else 0
    return (torch.empty_like(x), x.new_empty((stats,)), x.new_empty((stats,)))


def _conv_output(out: Any, x: Any) -> Any:
    # Meta's convolution always returns NCHW; cuDNN's and oneDNN's return channels-last for a channels-last input
    # (convnext's blocks after its first residual add), which decides the layout of every op downstream.
    import torch

    if x.dim() == 4 and not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last):
        return torch.empty_like(out, memory_format=torch.channels_last)
    return out


def _signature_of(args: tuple[Any, ...]) -> ConvSignature:
    x, w, b, stride, padding, dilation, transposed, output_padding, groups = args[:9]
    if x.dim() != 4:
        raise ExtractionError(f"only 2-D convolutions are supported, got input of {x.dim()} dims")
    return ConvSignature(
        in_channels=int(x.shape[1]),
        out_channels=int(w.shape[1] * groups) if transposed else int(w.shape[0]),
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


def main(argv: list[str]) -> int:
    """`python -m shared.cnn.zoo NAME IMAGE_SIZE NUM_CLASSES`: the CNN's view as JSON, or its error (exit 1).

    The API asks shared/cnn/describer.py's warm child instead, which answers the same JSON; torch is never in the API.
    """
    name, size, classes = argv[0], int(argv[1]), int(argv[2])
    try:
        print(json.dumps(conv_layers(name, size, classes).view()))
    except (ExtractionError, NotFound) as exc:
        print(json.dumps({"error": exc.detail, "status": exc.status}))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

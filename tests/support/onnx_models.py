"""ONNX files made here from torchvision models (random weights), as a user would export them."""

import io
import warnings
from functools import cache

import torch
import torchvision


@cache
def export(name: str, size: int = 224, dynamic: bool = True) -> bytes:
    """The model exported in training mode, batch (and by default height and width) symbolic."""
    model = torchvision.models.get_model(name, weights=None)
    axes = {0: "batch", 2: "height", 3: "width"} if dynamic else {0: "batch"}
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (torch.randn(2, 3, size, size),),
            buf,  # type: ignore[arg-type]  # the TorchScript exporter writes to any file object
            dynamo=False,
            training=torch.onnx.TrainingMode.TRAINING,  # keep batch norm apart from the convs, as training runs
            do_constant_folding=False,
            input_names=["image"],
            dynamic_axes={"image": axes},
        )
    return buf.getvalue()


@cache
def tutorial_export(name: str) -> bytes:
    """The export PyTorch's tutorial shows: `torch.onnx.export(model, torch.randn(1, 3, 224, 224), path)` with the
    TorchScript exporter (the default one needs onnxscript): batch fixed at 1, eval mode, batch norm folded."""
    model = torchvision.models.get_model(name, weights=None)
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(1, 3, 224, 224),), buf, dynamo=False)  # type: ignore[arg-type]
    return buf.getvalue()

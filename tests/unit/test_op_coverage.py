"""Every aten call of every built-in CNN's traced training step is measured as an op signature or named free."""

from typing import Any

import pytest

from shared.cnn import builtins
from shared.cnn import zoo as cnn_zoo
from shared.cnn.op_signatures import FREE, VIEWS, canonical_name, is_free


def smallest(name: str) -> int:
    """The smallest image size a built-in CNN trains at (its only one, or its default where sizes are irregular)."""
    entry = builtins.get(name)
    assert entry is not None, f"{name} is not in builtin_cnns.json"
    return entry.only_image_size or entry.min_image_size or entry.default_image_size


@pytest.mark.parametrize("name", cnn_zoo.builtin_names())
def test_every_aten_call_is_measured_or_free(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tracing the CNN's step on the meta device, each call that yields no signature is one FREE or VIEWS names."""
    unaccounted: dict[str, int] = {}
    real = cnn_zoo.from_aten

    def spying(op: str, args: tuple[Any, ...], out: Any, batch: int, **kwargs: Any) -> Any:
        sig = real(op, args, out, batch, **kwargs)
        if sig is None and not is_free(op, args, out):
            unaccounted[op] = unaccounted.get(op, 0) + 1
        return sig

    monkeypatch.setattr(cnn_zoo, "from_aten", spying)
    read = cnn_zoo.conv_layers_of(cnn_zoo.build(name), smallest(name), 1000)
    assert not unaccounted, f"{name}: aten ops neither measured nor listed free: {unaccounted}"
    assert read.total > 0 and read.ops[-1].op == "optimizer"


def test_a_call_free_only_without_a_gradient_is_measured_with_one() -> None:
    """A split a gradient flows back through (its backward concatenates) is measured; the same split without is free."""
    import torch

    from shared.cnn.aten_ops import from_aten

    x = torch.empty(2, 8, 4, 4, device="meta")
    parts = torch.ops.aten.split.Tensor(x, 4, 1)
    assert from_aten("split", (x, 4, 1), parts, 2) is None and is_free("split", (x, 4, 1), parts)
    x.requires_grad_()
    sig = from_aten("split", (x, 4, 1), parts, 2)
    assert sig is not None and sig.arguments["parts"] == [64, 64] and not is_free("split", (x, 4, 1), parts)
    # An op the extraction does not know is neither: the coverage test above would name it.
    assert from_aten("cumsum", (x, 1), x, 2) is None and not is_free("cumsum", (x, 1), x)
    assert all(canonical_name(n) == n for n in (*FREE, *VIEWS))

"""shared/cnn/builtin_cnns.json, the torch-free registry of built-in CNNs, is what torchvision says today."""

import json

import pytest

from shared.cnn import builtins as cnn_registry
from shared.cnn import builtins_gen
from shared.cnn import zoo as cnn_zoo
from shared.cnn.builtins import BuiltinCnn

ENTRIES = [cnn_registry.get(name) for name in cnn_registry.names()]


def test_names_and_parameters_match_torchvision() -> None:
    """Every torchvision classification model is listed once, with its parameter count and default size."""
    assert cnn_registry.names() == cnn_zoo.builtin_names()
    stale = [
        name
        for name, e in zip(cnn_registry.names(), ENTRIES, strict=True)
        if e is None
        or (e.parameters, e.default_image_size) != (cnn_zoo.parameter_count(e.name), cnn_zoo.default_image_size(e.name))
    ]
    assert stale == [], f"out of date: run `python -m shared.cnn.builtins_gen` ({stale[:5]})"


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name if e else "?")
def test_image_sizes_match_tracing(entry: BuiltinCnn) -> None:
    """Each recorded size bound holds when the model is traced on either side of it; no bound: tracing finds none."""
    name = entry.name
    hint = "out of date: run `python -m shared.cnn.builtins_gen`"
    if entry.min_image_size is not None:
        least = entry.min_image_size
        assert cnn_zoo.runs_at(name, least) and cnn_zoo.runs_at(name, 299), hint
        assert least == 8 or not cnn_zoo.runs_at(name, least - 1), hint
    elif entry.only_image_size is not None:
        only = entry.only_image_size
        assert cnn_zoo.runs_at(name, only), hint
        assert not any(cnn_zoo.runs_at(name, only + d) for d in (-32, -1, 1, 32)), hint
    else:
        assert builtins_gen.entry_of(name) == entry, hint


def test_refusals_name_the_size_and_the_bound() -> None:
    """Too small for its minimum, or another size than its only one: a reason; a size it runs at: none."""
    inception = cnn_registry.get("inception_v3")
    vit = cnn_registry.get("vit_b_16")
    assert inception is not None and inception.min_image_size is not None
    assert vit is not None and vit.only_image_size == 224
    least = inception.min_image_size
    assert cnn_registry.refusal("inception_v3", least - 1) == (
        f"inception_v3 cannot run on {least - 1}x{least - 1} images: it needs at least {least} px"
    )
    assert cnn_registry.refusal("inception_v3", least) is None
    only = "vit_b_16 cannot run on 256x256 images: it takes 224x224 images only"
    assert cnn_registry.refusal("vit_b_16", 256) == only
    assert cnn_registry.refusal("vit_b_16", 224) is None
    assert cnn_registry.refusal("not_a_cnn", 8) is None


def test_file_is_rendered_as_generated() -> None:
    """The committed file is exactly what the generator writes for its content (one CNN a line)."""
    text = cnn_registry.PATH.read_text()
    assert cnn_registry.render(json.loads(text)) == text

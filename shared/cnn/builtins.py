"""The built-in CNNs without torch: names, parameter counts and the image sizes each runs at.

Read from builtin_cnns.json, which `python -m shared.cnn.builtins` generates from torchvision by tracing each
model on the meta device (tests/unit/test_cnn_registry.py fails when it is out of date). The API checks names and
sizes against it, so the API process never imports torch.
"""

import json
import sys
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

PATH = Path(__file__).with_name("builtin_cnns.json")
# A model that runs at its default size but not 1 or 32 px either side takes that size only (ViT's position embedding).
_ONLY_PROBE = 32


class BuiltinCnn(BaseModel):
    """What is known of a built-in CNN without reading it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    parameters: int
    default_image_size: int
    # The smallest size it trains at, every larger one up to 299 px working too; None: no such size.
    min_image_size: int | None = None
    # The one size it trains at; None: more than one (or not known).
    only_image_size: int | None = None


@cache
def _entries() -> dict[str, BuiltinCnn]:
    data = json.loads(PATH.read_text())
    return {e["name"]: BuiltinCnn.model_validate(e) for e in data["cnns"]}


def names() -> tuple[str, ...]:
    """Names of every built-in CNN, sorted."""
    return tuple(_entries())


def get(name: str) -> BuiltinCnn | None:
    """A built-in CNN's entry, or None for any other name."""
    return _entries().get(name)


def refusal(name: str, image_size: int) -> str | None:
    """Why a built-in CNN cannot run at this image size, when the registry knows it cannot; else None."""
    entry = get(name)
    if entry is None:
        return None
    cannot = f"{name} cannot run on {image_size}x{image_size} images"
    if entry.only_image_size is not None and image_size != entry.only_image_size:
        return f"{cannot}: it takes {entry.only_image_size}x{entry.only_image_size} images only"
    if entry.min_image_size is not None and image_size < entry.min_image_size:
        return f"{cannot}: it needs at least {entry.min_image_size} px"
    return None


def generate() -> dict[str, Any]:
    """The registry's content, from torchvision (imports torch: never called by the API)."""
    from shared.cnn import zoo as cnn_zoo

    return {"cnns": [entry_of(name).model_dump() for name in cnn_zoo.builtin_names()]}


def entry_of(name: str) -> BuiltinCnn:
    """One built-in CNN's entry, found by tracing it at several sizes (imports torch)."""
    from shared.cnn import zoo as cnn_zoo

    default = cnn_zoo.default_image_size(name)
    least = cnn_zoo.smallest_size(name)
    only = None
    others = (default - 1, default + 1, default - _ONLY_PROBE, default + _ONLY_PROBE)
    if least is None and cnn_zoo.runs_at(name, default) and not any(cnn_zoo.runs_at(name, s) for s in others):
        only = default
    return BuiltinCnn(
        name=name,
        parameters=cnn_zoo.parameter_count(name),
        default_image_size=default,
        min_image_size=least,
        only_image_size=only,
    )


def render(content: dict[str, Any]) -> str:
    """The file's text: one CNN a line, so a change shows as a small diff."""
    lines = ",\n".join(f"  {json.dumps(e, sort_keys=True)}" for e in content["cnns"])
    return '{"cnns": [\n' + lines + "\n]}\n"


if __name__ == "__main__":
    PATH.write_text(render(generate()))
    print(f"wrote {PATH} ({len(json.loads(PATH.read_text())['cnns'])} CNNs)", file=sys.stderr)

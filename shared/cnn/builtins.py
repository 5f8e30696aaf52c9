"""The built-in CNNs without torch: names, parameter counts and the image sizes each runs at.

Read from builtin_cnns.json, which `python -m shared.cnn.builtins_gen` generates from torchvision by tracing each
model on the meta device (tests/unit/test_cnn_registry.py fails when it is out of date). The API checks names and
sizes against it, so the API process never imports torch.
"""

import json
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

PATH = Path(__file__).with_name("builtin_cnns.json")


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


def render(content: dict[str, Any]) -> str:
    """The file's text: one CNN a line, so a change shows as a small diff."""
    lines = ",\n".join(f"  {json.dumps(e, sort_keys=True)}" for e in content["cnns"])
    return '{"cnns": [\n' + lines + "\n]}\n"

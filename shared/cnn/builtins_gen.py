"""Write shared/cnn/builtin_cnns.json from torchvision: `python -m shared.cnn.builtins_gen` (imports torch).

Apart from shared/cnn/builtins.py so that the torch-free registry never imports the zoo (they imported each other).
"""

import json
import sys
from typing import Any

from shared.cnn import zoo as cnn_zoo
from shared.cnn.builtins import PATH, BuiltinCnn, render

# A model that runs at its default size but not 1 or 32 px either side takes that size only (ViT's position embedding).
_ONLY_PROBE = 32


def generate() -> dict[str, Any]:
    """The registry's content, from torchvision (imports torch: never called by the API)."""
    return {"cnns": [entry_of(name).model_dump() for name in cnn_zoo.builtin_names()]}


def entry_of(name: str) -> BuiltinCnn:
    """One built-in CNN's entry, found by tracing it at several sizes (imports torch)."""
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


if __name__ == "__main__":
    PATH.write_text(render(generate()))
    print(f"wrote {PATH} ({len(json.loads(PATH.read_text())['cnns'])} CNNs)", file=sys.stderr)

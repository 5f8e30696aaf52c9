"""CNNs a job can name."""

from typing import Any

from fastapi import APIRouter

from shared import cnn_zoo

router = APIRouter(prefix="/v1/cnns", tags=["cnns"])


@router.get("")
def list_cnns() -> dict[str, Any]:
    """Built-in CNNs with their parameter counts."""
    return {
        "cnns": [
            {"name": n, "source": "torchvision", "parameters": cnn_zoo.parameter_count(n)}
            for n in cnn_zoo.builtin_names()
        ]
    }

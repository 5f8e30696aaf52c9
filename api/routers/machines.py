"""Machine types: specs and prices."""

from typing import Any

from fastapi import APIRouter

from shared import machines

router = APIRouter(prefix="/v1/machines", tags=["machines"])


@router.get("")
def list_machines() -> dict[str, Any]:
    """Every machine type with GPU, memory, vCPUs and price per hour."""
    return {"machines": machines.list_all()}

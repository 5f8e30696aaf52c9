"""Machine types: the catalog of cloud GPU machine types, and your own GPUs registered by their specs."""

from typing import Any

from fastapi import APIRouter, Depends, Response

from api.auth import require
from shared import machine_types
from shared.jobs.request import MachineCreate
from shared.machine_types import MachineTypeInfo

router = APIRouter(prefix="/v1/machines", tags=["machines"], dependencies=[Depends(require("read"))])


@router.get("")
def list_machines() -> dict[str, Any]:
    """Every machine type with GPU figures, memory, vCPUs, prices and where they come from."""
    return {"machines": [_view(m) for m in machine_types.list_all()]}


@router.post("", status_code=201, dependencies=[Depends(require("admin"))])
def create_machine(figures: MachineCreate, response: Response) -> dict[str, Any]:
    """Register a machine type by its GPU's figures; jobs can name it at once (reference predictions)."""
    created = machine_types.create(figures=figures)
    response.headers["Location"] = f"/v1/machines/{created['name']}"
    return _view(created)


@router.get("/{name}")
def get_machine(name: str) -> dict[str, Any]:
    """One machine type."""
    return _view(machine_types.get_by_name(name=name))


def _view(row: MachineTypeInfo) -> dict[str, Any]:
    view = {k: v.isoformat() if hasattr(v, "isoformat") else v for k, v in row.items()}
    view["registered"] = row.get("registered_at") is not None
    return view

"""Machine types: the catalog of cloud GPU machine types, and your own GPUs registered by their specs."""

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Depends, Response

from api.auth import Reader, Submitter, require
from api.routing import ParsedOffLoop
from shared import interconnect, jobs, machine_types
from shared.machine_request import MachineCreate
from shared.machine_types import MachineTypeInfo

router = APIRouter(
    route_class=ParsedOffLoop, prefix="/v1/machines", tags=["machines"], dependencies=[Depends(require("read"))]
)


@router.get("")
def list_machines(principal: Reader) -> dict[str, Any]:
    """Every machine type this key may use: the catalog, types admins registered and its own (an admin: all)."""
    return {"machines": [_view(m) for m in machine_types.list_all(owner=principal.visible_owner)]}


@router.post("", status_code=201)
def create_machine(figures: MachineCreate, response: Response, principal: Submitter) -> dict[str, Any]:
    """Register a machine type by its GPU's figures; jobs can name it at once (reference predictions).

    Registered by an admin key it is shared with every key; by another key, it is that key's own.
    """
    owner = None if principal.is_admin else principal.key_id
    created = machine_types.create(figures=figures, owner_key_id=owner)
    response.headers["Location"] = f"/v1/machines/{created['name']}"
    return _view(created)


@router.get("/{name}")
def get_machine(name: str, principal: Reader) -> dict[str, Any]:
    """One machine type (another key's own is 404)."""
    return _view(machine_types.get_by_name(name=name, owner=principal.visible_owner))


@router.delete("/{name}", status_code=204)
def delete_machine(name: str, principal: Submitter) -> Response:
    """Delete a registered machine type: its owner or an admin; never the catalog, one an unfinished job names, or
    one with stored measurements."""
    owner = principal.visible_owner
    machine_types.delete(name=name, owner=owner, using=jobs.open_using_machine(name=name))
    return Response(status_code=204)


def _view(row: MachineTypeInfo) -> dict[str, Any]:
    view = {k: v.isoformat() if hasattr(v, "isoformat") else v for k, v in row.items() if k != "owner_key_id"}
    view["registered"] = row.get("registered_at") is not None
    view["shared"] = row.get("owner_key_id") is None
    # How its GPUs and machines are linked, as data-parallel answers use it (None: one GPU, nothing given).
    links = interconnect.links_of(row["name"], row)
    view["links"] = None if links is None else asdict(links)
    return view

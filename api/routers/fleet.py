"""The self-hosted AWS fleet: what runs, what it costs, and holding or draining a machine type."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query
from pydantic import BaseModel, ConfigDict, Field

from api.auth import require
from api.routing import ParsedOffLoop
from fleet import service as fleet

router = APIRouter(
    route_class=ParsedOffLoop, prefix="/v1/fleet", tags=["fleet"], dependencies=[Depends(require("read"))]
)
MachineType = Annotated[str, Path(max_length=100)]


class Hold(BaseModel):
    """How many agents to keep for a machine type; null: follow the work waiting."""

    model_config = ConfigDict(extra="forbid")
    held: int | None = Field(ge=0)


@router.get("")
def get_fleet(events: Annotated[int, Query(ge=0, le=500)] = 20) -> dict[str, Any]:
    """Limits, per-type wanted/queued/waiting and launch pauses (until, why, failures in a row), instances, events."""
    return fleet.status(events=events)


@router.put("/{machine_type}", dependencies=[Depends(require("admin"))])
def hold_type(machine_type: MachineType, body: Hold) -> dict[str, Any]:
    """Hold a machine type at a number of agents, or give it back to the controller (null)."""
    return fleet.hold(machine_type=machine_type, count=body.held)


@router.post("/{machine_type}/drain", dependencies=[Depends(require("admin"))])
def drain_type(machine_type: MachineType) -> dict[str, Any]:
    """Terminate the type's instances now (agents finish their current window) and hold it at 0."""
    return fleet.drain(machine_type=machine_type)

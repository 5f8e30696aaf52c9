"""Benchmark agents: who is alive and what each is measuring."""

from typing import Annotated

from fastapi import APIRouter, Depends, Query
from typing_extensions import TypedDict

from api.auth import require
from shared import agents
from shared.core.settings import get_settings


class AgentList(TypedDict):
    """GET /v1/agents: agents, alive first."""

    agents: list[agents.AgentListed]


router = APIRouter(prefix="/v1/agents", tags=["agents"], dependencies=[Depends(require("read"))])


@router.get("")
def list_agents(
    machine_type: Annotated[
        str | None, Query(alias="machine", max_length=100, description="only agents of this machine type")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> AgentList:
    """Registered agents, alive first: machine type, host, device, environment, heartbeat, current work."""
    rows = agents.list_all(alive_after_s=get_settings().agent_alive_after_s, machine_type=machine_type, limit=limit)
    return {"agents": rows}

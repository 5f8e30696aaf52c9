"""How a machine type's GPUs talk to each other and to other machines: data/interconnect.csv (sources in
data/interconnect.md), read once. The API checks requests with it; worker/parallel.py models the all-reduce."""

import csv
from dataclasses import dataclass
from functools import cache

from shared.machine_types import DATA

CSV = DATA / "interconnect.csv"


@dataclass(frozen=True)
class Links:
    """One machine type's links: within the machine (per-GPU bus bandwidth) and to other machines."""

    intra_link: str  # nvswitch, nvlink, pcie or none
    intra_gbs: float | None  # GB/s an all-reduce within the machine gets per GPU, each way (NCCL's bus bandwidth)
    network_gbps: float | None  # Gbit/s to other machines
    network_kind: str  # EFA, GPUDirect-TCPX, InfiniBand, Ethernet
    source: str = ""


def _number(text: str | None) -> float | None:
    return float(text) if text not in (None, "") else None


@cache
def table() -> dict[str, Links]:
    """Every machine type's links, by name."""
    with CSV.open(newline="") as f:
        return {
            row["name"]: Links(
                intra_link=row["intra_link"],
                intra_gbs=_number(row["intra_gbs"]),
                network_gbps=_number(row["network_gbps"]),
                network_kind=row["network_kind"],
                source=row["source"],
            )  # fmt: skip
            for row in csv.DictReader(f)
        }


def links_for(name: str) -> Links | None:
    """A machine type's links; None for one not in the table (a user's own, or `local`)."""
    return table().get(name)


def network_gbps(name: str) -> float | None:
    """A machine type's network bandwidth to other machines, Gbit/s; None where unknown."""
    links = links_for(name)
    return None if links is None else links.network_gbps

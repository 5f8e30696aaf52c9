"""How a machine type's GPUs talk to each other and to other machines: data/interconnect.csv (sources in
data/interconnect.md), read once. The API checks requests with it; prediction/parallel.py models the all-reduce."""

import csv
from dataclasses import dataclass
from functools import cache
from typing import Any

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
    rdma: bool | None = None  # False: NCCL over TCP sockets; None: as the catalog's network figures were taken


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


# An own machine type with several GPUs and no link given: PCIe 4.0 x16 (NCCL's 24 GB/s per GPU).
PCIE_GBS = 24.0


def own_links(info: Any) -> Links | None:
    """The links a registered machine type's owner gave (a machine_types row), or None where it gave none."""
    link, nics = info.get("gpu_link"), info.get("nics")
    if link is None and nics is None:
        return None
    count = info.get("gpu_count") or 0
    link = link or ("pcie" if count > 1 else "none")
    gbs = info.get("gpu_link_gbs") or (PCIE_GBS if link == "pcie" else None)
    network = nics * info["nic_gbps"] if nics else None
    rdma = info.get("network_rdma") if nics else None
    kind = "none given" if not nics else f"{nics} x {info['nic_gbps']:g} Gbit/s, {'RDMA' if rdma else 'TCP'}"
    return Links(intra_link=link, intra_gbs=gbs, network_gbps=network, network_kind=kind,
                 source=f"given when {info['name']} was registered", rdma=rdma)  # fmt: skip


def links_of(name: str, info: Any = None) -> Links | None:
    """A machine type's links: the catalog's (data/interconnect.csv), else its owner's; None where neither says."""
    return links_for(name) or (own_links(info) if info is not None else None)


def network_gbps(name: str, info: Any = None) -> float | None:
    """A machine type's network bandwidth to other machines, Gbit/s; None where unknown."""
    links = links_of(name, info)
    return None if links is None else links.network_gbps

"""The host CPUs of catalog machine types (data/machine_cpus.csv): model, threads per core and clock, with sources.

A vCPU on most cloud GPU machines is one hardware thread, two to a core: decoding JPEGs on both threads of a core
gives about SMT_YIELD times one thread's throughput, not twice, so a vCPU there decodes less than a vCPU that is a
whole core. Clouds that say nothing of threads per core leave it unknown, and nothing is scaled for it.
"""

import csv
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

CSV = Path(__file__).resolve().parent.parent / "data" / "machine_cpus.csv"
# Throughput of two hardware threads on one core over one thread alone, for integer-heavy work like JPEG decoding:
# Intel's Hyper-Threading pages quote up to 30%; an assumption until an agent on such a host measures its own.
SMT_YIELD = 1.25


@dataclass(frozen=True)
class HostCpu:
    """What a machine type's vCPUs are."""

    cpu: str
    threads_per_core: int | None
    ghz: float | None
    ghz_kind: str
    source: str

    @property
    def per_vcpu(self) -> float | None:
        """One vCPU's share of a core's decoding throughput, in whole cores; None where threads per core is unknown."""
        if self.threads_per_core is None:
            return None
        return 1.0 if self.threads_per_core == 1 else SMT_YIELD / self.threads_per_core

    def words(self) -> str:
        """The CPU in a phrase: model, threads per core, clock."""
        words = {None: "threads per core not published", 1: "one thread per core"}
        threads = words.get(self.threads_per_core, f"{self.threads_per_core} threads per core")
        clock = f", {self.ghz:g} GHz ({self.ghz_kind})" if self.ghz else ""
        return f"{self.cpu}, {threads}{clock}"


@cache
def _rows() -> tuple[tuple[re.Pattern[str], HostCpu], ...]:
    with CSV.open(newline="") as f:
        return tuple(
            (re.compile(r["pattern"]), HostCpu(
                cpu=r["cpu"], threads_per_core=int(r["threads_per_core"]) if r["threads_per_core"] else None,
                ghz=float(r["ghz"]) if r["ghz"] else None, ghz_kind=r["ghz_kind"], source=r["source"]))
            for r in csv.DictReader(f)
        )  # fmt: skip


def of(machine_type: str) -> HostCpu | None:
    """The catalog's CPU for a machine type, or None (own machine types, `local`)."""
    return next((cpu for pattern, cpu in _rows() if pattern.fullmatch(machine_type)), None)

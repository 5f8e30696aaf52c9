"""Write a benchmark's section into docs/PERFORMANCE.md, replacing that section's previous figures."""

import os
import re
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "PERFORMANCE.md"
HEADER = (
    "# Performance\n\nFigures written by the benchmarks in `bench/`; each section says the command that produced it.\n"
)


def write_section(title: str, body: str) -> None:
    """Replace (or append) the `## title` section of docs/PERFORMANCE.md."""
    text = DOC.read_text() if DOC.exists() else HEADER
    section = f"## {title}\n\n{body.strip()}\n"
    pattern = re.compile(rf"^## {re.escape(title)}\n.*?(?=^## |\Z)", re.S | re.M)
    text = pattern.sub(lambda _m: section + "\n", text) if pattern.search(text) else text.rstrip() + "\n\n" + section
    DOC.parent.mkdir(exist_ok=True)
    DOC.write_text(text.rstrip() + "\n")


def agent_settings() -> str:
    """The agent settings this run changed from their defaults (BENCH_* and AGENT_* in the environment)."""
    changed = sorted(f"{k}={v}" for k, v in os.environ.items() if k.startswith(("BENCH_", "AGENT_")))
    return (
        f"agent settings {', '.join(changed)}, the rest at their defaults"
        if changed
        else "agent settings at their defaults"
    )


def ratio_row(what: str, now: float, baseline: float, digits: int = 2, baseline_note: str = "") -> str:
    """A table row: a figure, its baseline from the same run (with what the baseline was), and their ratio."""
    return f"| {what} | {now:.{digits}f} | {baseline:.{digits}f}{baseline_note} | {now / baseline:.2f}× |"


def publish(title: str, body: str) -> None:
    """Print a benchmark's section and write it into docs/PERFORMANCE.md."""
    print(body)
    write_section(title, body)

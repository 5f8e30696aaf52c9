"""Write a benchmark's section into docs/PERFORMANCE.md, replacing that section's previous figures."""

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

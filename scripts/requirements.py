"""pyproject.toml's requirements, one a line, for `pip install -r` / `pip download -r` (scripts/venv.sh, wheelhouse.sh).

Usage: python scripts/requirements.py [--without torch,torchvision] [--build] [EXTRA ...]
Standard library only (tomllib: Python 3.11+), so any Python can run it before the venv exists.
"""

import argparse
import re
import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def name_of(requirement: str) -> str:
    """A requirement's project name, normalised (PEP 503): 'Torch==2.1' → 'torch', 'celery[redis]' → 'celery'."""
    return re.sub(r"[-_.]+", "-", re.split(r"[\s<>=!~;\[(@]", requirement.strip(), maxsplit=1)[0]).lower()


def requirements(*, extras: list[str], without: set[str], build: bool) -> list[str]:
    """The dependencies, those of the extras, and the build backend's if asked, without the named projects."""
    data = tomllib.loads(PYPROJECT.read_text())
    optional = data["project"].get("optional-dependencies", {})
    unknown = [e for e in extras if e not in optional]
    if unknown:
        raise SystemExit(f"error: pyproject.toml has no extra {', '.join(unknown)} (it has {', '.join(optional)})")
    found = list(data["project"]["dependencies"]) + [r for e in extras for r in optional[e]]
    if build:
        found += data["build-system"]["requires"]
    skip = {name_of(n) for n in without}
    return [r for r in dict.fromkeys(found) if name_of(r) not in skip]


def main(argv: list[str] | None = None) -> int:
    """Print the requirements, one a line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("extras", nargs="*", help="optional dependency groups, e.g. dev embedded")
    parser.add_argument("--without", default="", help="comma-separated projects to leave out, e.g. torch,torchvision")
    parser.add_argument("--build", action="store_true", help="add the build backend's requirements (setuptools)")
    args = parser.parse_args(argv)
    without = {n for n in args.without.split(",") if n.strip()}
    print("\n".join(requirements(extras=args.extras, without=without, build=args.build)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`traincast catalog refresh`: read the AWS machine types' specs and prices from AWS into the catalog."""

import argparse
import os
import sys
from datetime import UTC, datetime
from typing import Any

from cli import render


def default_region() -> str:
    """The region boto3 would use from the environment, else us-east-1."""
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add `catalog` with its sub-command `refresh` to the command-line grammar."""
    ca = sub.add_parser("catalog", help="the machine-type catalog")
    commands = ca.add_subparsers(dest="catalog_command", required=True)
    rf = commands.add_parser("refresh", help="read specs, on-demand and spot prices of the AWS GPU types from AWS")
    rf.add_argument("--region", default=default_region(), help="AWS region (default: AWS_REGION, AWS_DEFAULT_REGION)")
    rf.add_argument("--types", default=None, help="instance types a,b (default: every AWS type in the catalog)")


def run(args: argparse.Namespace) -> int:
    """Carry out a `catalog` sub-command; print what changed, or one line saying why it failed."""
    # Imported here so the HTTP commands of `traincast` start without boto3 and the database layer.
    from fleet import catalog
    from shared.core.errors import TraincastError

    types = [t for t in args.types.split(",") if t.strip()] if args.types else None
    try:
        changed = catalog.refresh(region=args.region, types=types)
    except TraincastError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if not changed:
        print("no AWS machine types in the catalog")
        return 0
    print(render.table([_row(c) for c in changed], ["type", "on-demand $/h", "spot $/h", "read at"]))
    for c in changed:
        for column, why in c["not_refreshed"].items():
            print(f"{c['name']}: {column} kept: {why}")
    return 0


def _row(c: dict[str, Any]) -> list[str]:
    """One refreshed type: old → new on-demand and spot price, and when the figures were read."""
    on_demand = _change(c["old_price_usd_per_hour"], c["price_usd_per_hour"], added=c["added"])
    spot = _change(c["old_spot_price_usd_per_hour"], c["spot_price_usd_per_hour"], added=c["added"])
    name = f"{c['name']} (new)" if c["added"] else c["name"]
    return [name, on_demand, spot, _when(c["specs_read_at"])]


def _change(old: float | None, new: float | None, *, added: bool) -> str:
    if added or old == new:
        return _usd(new)
    return f"{_usd(old)} → {_usd(new)}"


def _usd(value: float | None) -> str:
    # Four decimals: spot prices and small on-demand prices differ below the cent.
    return "-" if value is None else f"{value:.4f}"


def _when(at: datetime | None) -> str:
    return "-" if at is None else at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")

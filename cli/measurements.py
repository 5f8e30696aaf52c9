"""`traincast measurements`: export and import measurement bundles, straight in PostgreSQL (DATABASE_URL).

A bundle carries machine types' layer, op, whole-step, input-rate and all-reduce rows with their environments to
another installation (docs/BUNDLES.md); an admin key can do the same over HTTP (/v1/measurements).
"""

import argparse
import platform
import sys
from pathlib import Path
from typing import Any

from cli import render
from cli.client import CliError


def add_parser(sub: Any) -> None:
    """The `measurements` subcommands."""
    ms = sub.add_parser("measurements", help="export and import measurement bundles; talks to PostgreSQL directly")
    mc = ms.add_subparsers(dest="measurements_command", required=True)
    ex = mc.add_parser("export", help="write machine types' measured rows with their environments to one file")
    ex.add_argument("--machine-type", "-m", action="append", required=True, help="repeat for several")
    ex.add_argument("--output", "-o", required=True, help="the bundle to write (gzip JSON lines; '-' for stdout)")
    im = mc.add_parser("import", help="store a bundle's rows here (each once), then fit models from its whole steps")
    im.add_argument("bundle", help="a file `traincast measurements export` wrote ('-' for stdin)")
    im.add_argument(
        "--as", dest="rename", action="append", default=[], metavar="OLD=NEW",
        help="store the rows of machine type OLD as NEW (registered here already); needed for 'local'",
    )  # fmt: skip
    im.add_argument("--no-fit", action="store_true", help="store the rows only; fit no model from them")


def run(args: argparse.Namespace) -> int:
    """Carry out a `measurements` subcommand."""
    from shared.measurements import transfer  # onnx and numpy come with it: only for this command, not every CLI start

    if args.measurements_command == "export":
        to_stdout = args.output == "-"
        with sys.stdout.buffer if to_stdout else open(args.output, "wb") as out:  # noqa: SIM115
            counts = transfer.export(machine_types=args.machine_type, out=out, source=platform.node())
        where = "stdout" if to_stdout else args.output
        print(f"wrote {_counts(counts)} to {where}", file=sys.stderr if to_stdout else sys.stdout)
        return 0
    rename = transfer.renames(args.rename, flag="--as")
    try:
        with sys.stdin.buffer if args.bundle == "-" else Path(args.bundle).open("rb") as raw:
            bundle = transfer.read(raw)
    except OSError as exc:
        raise CliError(f"cannot read {args.bundle}: {exc.strerror or exc}") from None
    report = transfer.load(bundle=bundle, rename=rename)
    already = sum(report.already.values())
    print(f"stored {_counts(report.stored)} of {', '.join(report.machine_types)}; {already} rows were here already")
    if args.no_fit or not report.changes_models:
        return 0
    from worker import refit  # the worker (and torch) only for the fit

    fitted = refit.refit(machine_types=report.machine_types)
    rows = [[f["machine_type"], f["training"], f["version"] or "–", _mape(f), f.get("note", "")] for f in fitted]
    if rows:
        print(render.table(rows, ["machine type", "training", "model version", "held-out error", "note"]))
    return 0


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {kind.replace('_', ' ')} rows" for kind, n in counts.items() if n) or "no rows"


def _mape(fitted: dict[str, Any]) -> str:
    return f"{fitted['loco_mape']:.1f}%" if fitted.get("loco_mape") is not None else "–"

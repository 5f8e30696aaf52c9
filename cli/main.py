"""`traincast`: submit and follow prediction jobs (over HTTP), calibrate and train (admin, direct)."""

import argparse
import os
import sys
from typing import NoReturn

from cli import admin, catalog, cnns, fleet, jobs, keys, machines, measurements
from cli.client import Api, CliError

DEFAULT_API = "http://127.0.0.1:8000"


class _Parser(argparse.ArgumentParser):
    """argparse with its errors on one line, as every other CLI error (the usage is one --help away)."""

    def error(self, message: str) -> NoReturn:
        """Print the mistake and where the usage is; exit 2, argparse's status for a usage error."""
        self.exit(2, f"error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    """The command-line grammar."""
    p = _Parser(prog="traincast", description=__doc__)
    p.add_argument("--api-url", default=os.environ.get("TRAINCAST_API_URL", DEFAULT_API), help="API base URL")
    sub = p.add_subparsers(dest="command", required=True)
    jobs.add_parser(sub)
    cnns.add_parser(sub)
    admin.add_parser(sub)
    fleet.add_parser(sub)
    machines.add_parser(sub)
    catalog.add_parser(sub)
    keys.add_parser(sub)
    measurements.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point: every failure is one line on stderr and exit status 1."""
    from shared.core import logs
    from shared.core.errors import TraincastError

    # Warnings and errors of the modules operator commands run (calibrate, train, migrate) as the other processes'.
    logs.setup("cli", level="WARNING")
    args = build_parser().parse_args(argv)
    api = Api(args.api_url)
    try:
        if args.command in jobs.COMMANDS:
            return jobs.run(api, args)
        if args.command == "cnns":
            return cnns.run(api, args)
        if args.command == "fleet":
            return fleet.run(api, args)
        if args.command == "machines":
            return machines.run(api, args)
        if args.command == "catalog":
            return catalog.run(args)
        if args.command == "keys":
            return keys.run(args)
        if args.command == "measurements":
            return measurements.run(args)
        return admin.run(args)
    except (CliError, TraincastError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `traincast machines list | head`: the reader has gone; say nothing more, as cat and ls do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's flush at exit must not fail again
        return 141


if __name__ == "__main__":
    sys.exit(main())

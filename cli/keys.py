"""`traincast keys`: create, list and revoke API keys, straight in PostgreSQL (DATABASE_URL) like `migrate`.

Talking to the database, not the API, is what lets the first admin key be made when no key exists yet; once one
exists, an admin key can do the same over HTTP (`/v1/keys`, api/routers/keys.py), which keeps the last admin key.
`python -m cli.keys PATH` keeps a working local admin key in PATH (mode 0600): what `make up` runs.
"""

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from cli import render
from shared import keys
from shared.core.errors import TraincastError

LIMIT_HEADERS = ["max jobs", "max points", "bench s/day"]


def add_parser(sub: Any) -> None:
    """The `keys` subcommands."""
    ks = sub.add_parser("keys", help="API keys (create, list, revoke); talks to PostgreSQL directly")
    kc = ks.add_subparsers(dest="keys_command", required=True)
    cr = kc.add_parser("create", help="create a key; the key itself is the last line printed")
    cr.add_argument("--name", required=True, help="who or what uses it")
    cr.add_argument("--scope", required=True, choices=keys.SCOPES, help="read ⊂ submit ⊂ admin")
    cr.add_argument("--rate", type=float, default=None, help="requests per second (default: API_RATE_PER_KEY_S)")
    cr.add_argument(
        "--max-jobs",
        type=int,
        default=None,
        help="jobs queued or running at once (default: MAX_UNFINISHED_JOBS_PER_KEY)",
    )
    cr.add_argument(
        "--max-points", type=int, default=None, help="prediction points per job (default: MAX_POINTS_PER_JOB)"
    )
    cr.add_argument(
        "--bench-seconds-per-day",
        type=float,
        default=None,
        help="layer benchmark seconds its jobs may send agents in 24 h (default: MAX_BENCH_SECONDS_PER_KEY_DAY)",
    )
    kc.add_parser("list", help="every key: id, name, scope, rate, limits, created, last used, revoked (no secrets)")
    rv = kc.add_parser("revoke", help="revoke a key by id, or by name when one unrevoked key has it")
    rv.add_argument("ref", help="key id or name")


def run(args: argparse.Namespace) -> int:
    """Carry out a `keys` subcommand."""
    if args.keys_command == "create":
        row, key = keys.create(
            name=args.name,
            scope=args.scope,
            rate_per_s=args.rate,
            max_unfinished_jobs=args.max_jobs,
            max_points_per_job=args.max_points,
            bench_seconds_per_day=args.bench_seconds_per_day,
        )
        rate = f"{row['rate_per_s']:g}/s" if row["rate_per_s"] else "the default rate"
        limits = ", ".join(f"{label} {value}" for label, value in zip(LIMIT_HEADERS, _limits(row), strict=True))
        print(
            f"created key {row['id']} ({row['name']}, scope {row['scope']}, {rate}, {limits}); it is shown only once:"
        )
        print(key)
        return 0
    if args.keys_command == "list":
        rows = [
            [
                k["id"],
                k["name"],
                k["scope"],
                f"{k['rate_per_s']:g}/s" if k["rate_per_s"] else "default",
                *_limits(k),
                _when(k["created_at"]),
                _when(k["last_used_at"]),
                _when(k["revoked_at"]) if k["revoked_at"] else "",
            ]
            for k in keys.list_all()
        ]
        headers = ["id", "name", "scope", "rate", *LIMIT_HEADERS, "created", "last used", "revoked"]
        print(render.table(rows, headers) if rows else "no keys yet: traincast keys create --name N --scope admin")
        return 0
    row = keys.revoke(ref=args.ref)
    print(f"key {row['id']} ({row['name']}) revoked at {_when(row['revoked_at'])}")
    return 0


def _limits(row: keys.KeyRow) -> list[str]:
    # A key without its own limit follows the setting, which may change: say "default", not today's number.
    values = (row["max_unfinished_jobs"], row["max_points_per_job"], row["bench_seconds_per_day"])
    return [f"{v:g}" if v is not None else "default" for v in values]


def _when(at: Any) -> str:
    return at.isoformat(timespec="seconds") if at is not None else "never"


def ensure_local_admin(path: Path, *, name: str = "local-admin") -> bool:
    """Keep a working admin key in `path` (mode 0600): reuse the one there, else create one. True if created."""
    try:
        existing = path.read_text().strip()
    except OSError:
        existing = ""
    if existing:
        try:
            if keys.authenticate(token=existing).is_admin:
                return False
        except TraincastError as exc:
            if exc.status != 401:  # the database is down: say so rather than mint a key
                raise
    # The operator's own key on their own machine: no daily benchmark budget to run out of (a morning of
    # trying GPU types charged it past its 3,600 s and locked it out for a day). Keys made for others keep theirs.
    _row, key = keys.create(name=name, scope="admin", bench_seconds_per_day=keys.MAX_BENCH_SECONDS_PER_DAY)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    # Created 0600 (never briefly readable by others), then renamed over the old file.
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(key + "\n")
    os.chmod(temporary, 0o600)
    os.replace(temporary, path)
    return True


def main(argv: list[str] | None = None) -> int:
    """`python -m cli.keys PATH`: make sure PATH holds a working local admin key."""
    path = Path((argv if argv is not None else sys.argv[1:] or [".run/admin.key"])[0])
    try:
        created = ensure_local_admin(path)
    except TraincastError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{'created' if created else 'reusing'} the local admin API key in {path} (mode 0600)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

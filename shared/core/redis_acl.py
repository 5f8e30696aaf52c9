"""The processes' Redis ACL users: the one place their rules are written.

One user per process kind. docker-compose.yml's redis command (`--user` arguments, checked equal to
compose_user_args() by tests/unit/test_compose_redis.py), the ACL SETUSER lines in docs/FLEET.md (checked
equal to `python -m shared.core.redis_acl`'s output) and the users tests/integration/test_agent_redis_acl.py runs real
processes under all come from rules() below.
"""

import argparse
import json
import sys
from collections.abc import Iterable, Mapping, Sequence

from shared.core import tasks

KINDS = ("api", "worker", "agent", "fleet")
USERS = {kind: f"traincast-{kind}" for kind in KINDS}
# The environment variables docker-compose.yml takes each user's password from.
PASSWORD_VARIABLES = {kind: f"REDIS_{kind.upper()}_PASSWORD" for kind in KINDS}
# The types docker-compose.yml's agents run as: the CPU agent's, and the gpu-agent's (a compose reference).
COMPOSE_MACHINE_TYPES = ("local", "${GPU_MACHINE_TYPE:-g5.xlarge}")

_START = ("resetkeys", "resetchannels", "-@all")
# What a Celery 5 worker on kombu's Redis transport runs; no KEYS, SCAN, FLUSH*, CONFIG, DEBUG, CLIENT KILL …
# kombu 5.7 keeps the binding tables of expiring queues (Celery's reply queues) with Lua scripts.
_CELERY_COMMANDS = (
    *("+@connection", "+select", "+@transaction", "+@list", "+@hash", "+@set", "+@sortedset", "+@string"),
    *("+@pubsub", "+del", "+exists", "+expire", "+pexpire", "+time", "+evalsha", "+eval", "+script|load"),
    *("+script|exists", "-@dangerous"),
)
# Sending a task (to jobs) and the per-key token buckets (api/ratelimit.py: a Lua script of TIME, HMGET,
# HSET, EXPIRE).
_API_COMMANDS = (
    *("+@connection", "+select", "+@transaction", "+@list", "+@set", "+hmget", "+hset", "+expire", "+time"),
    *("+eval", "+evalsha", "+script|load", "-@dangerous"),
)
# Write only to jobs; the selector lets declaring jobs when sending read its length (and its priority
# lists') and nothing else.
_SEND_TO_JOBS = ("%W~jobs", "(~jobs* +llen)")
# Exchange binding tables (with kombu's deadlines and permanent sets), the reply lists of Celery's worker
# handshake (mingle) and remote control, and the event queues Celery's gossip declares.
_CELERY_SHARED_KEYS = ("~_kombu.binding*", "~*.reply.celery.pidbox*", "~celeryev.*")


def agent_type_keys(machine_type: str) -> list[str]:
    """Key patterns of one machine type's agents: its queue, its in-flight messages, its remote-control queue.

    Not `~bench.<type>*`, which would grant the queue of a type <type>.xl too: the bracket matches kombu's
    priority lists (the name, \\x06\\x16, the priority) and no character of a type name. The in-flight
    messages' keys are shared/core/tasks.py agent_unacked_keys (not the workers' `unacked`); the remote-control
    queue is the --hostname gpu_agent/__main__.py gives the agent.
    """
    queue = tasks.bench_queue(machine_type)
    own = f"~{tasks.agent_unacked_pattern(machine_type)}"
    return [f"~{queue}", f"~{queue}[^-A-Za-z0-9._+]*", own, f"~agent-{machine_type}@*.celery.pidbox*"]


def channels(db: int) -> list[str]:
    """Broadcast channels: remote control and events, under kombu's fanout prefix /<db>.

    PSUBSCRIBE patterns must equal an ACL channel pattern literally, so the db number is spelt out.
    """
    return [f"&/{db}.celery.pidbox", f"&/{db}.celeryev/worker.*"]


def rules(kind: str, *, db: int = 0, machine_types: Sequence[str] | None = None) -> list[str]:
    """The ACL rules of a kind's user (after `on >password`); agents: only machine_types', or every type's if None."""
    if kind == "agent" and machine_types is not None:
        bad = [t for t in machine_types if not tasks.valid_machine_type(t)]
        if bad or not machine_types:
            raise ValueError(f"{(bad or [''])[0][:80]!r} is not a machine type name")
    return _rules(kind, db, machine_types)


def _rules(kind: str, db: int, machine_types: Sequence[str] | None) -> list[str]:
    if kind == "api":
        # GET /metrics counts the tasks waiting in each bench.<type> (shared/core/tasks.py queue_depths): LLEN only.
        return [*_START, *_API_COMMANDS, *_SEND_TO_JOBS, "(%R~bench.* +llen)", "~_kombu.binding*", "~traincast:rate:*"]
    if kind == "fleet":
        # The controller counts the tasks waiting in each bench.<type> and its priority lists
        # (fleet/store.py queued): LLEN, read only.
        return [*_START, "+@connection", "+select", "+llen", "-@dangerous", "%R~bench.*"]
    if kind == "worker":
        # Workers (beat too) consume jobs, send to and take back queued work from bench.*, run remote control
        # and events; their own in-flight messages stay in kombu's default keys.
        own = ("~jobs*", "~bench.*", "~unacked", "~unacked_index", "~unacked_mutex", "~*@*.celery.pidbox*")
        return [*_START, *_CELERY_COMMANDS, *own, *_CELERY_SHARED_KEYS, *channels(db)]
    if kind == "agent":
        if machine_types is None:
            types = ["~bench.*", "~unacked.bench.*", "~agent-*@*.celery.pidbox*"]
        else:
            types = [key for t in machine_types for key in agent_type_keys(t)]
        return [*_START, *_CELERY_COMMANDS, *_SEND_TO_JOBS, *_CELERY_SHARED_KEYS, *types, *channels(db)]
    raise ValueError(f"no Redis user for process kind {kind!r}; one of {', '.join(KINDS)}")


def server_args(
    passwords: Mapping[str, str], *, db: int = 0, machine_types: Sequence[str] = COMPOSE_MACHINE_TYPES
) -> list[str]:
    """redis-server arguments making each kind's user, `--user <name> on ><password> <rules…>`, in KINDS order."""
    args: list[str] = []
    for kind in KINDS:
        types = machine_types if kind == "agent" else None
        args += ["--user", USERS[kind], "on", f">{passwords[kind]}", *_rules(kind, db, types)]
    return args


def compose_user_args() -> list[str]:
    """docker-compose.yml's redis `--user` arguments: passwords and the gpu-agent's type as compose references."""
    return server_args({kind: f"${{{var}:?set {var}}}" for kind, var in PASSWORD_VARIABLES.items()})


def setuser_lines(kinds: Iterable[str], *, db: int = 0, machine_types: Sequence[str] | None = None) -> list[str]:
    """`ACL SETUSER` commands for these kinds, with PASSWORD to replace."""
    return [
        " ".join(["ACL SETUSER", USERS[kind], "on", ">PASSWORD", *rules(kind, db=db, machine_types=machine_types)])
        for kind in kinds
    ]


def compose_yaml(width: int = 110) -> str:
    """compose_user_args() as YAML flow-list items, a line per user, to follow the redis command's --requirepass."""
    lines: list[str] = []
    for arg in compose_user_args():
        item = f"{json.dumps(arg)},"
        if arg == "--user" or len(lines[-1]) + len(item) >= width:
            lines.append(f"      {item}")
        else:
            lines[-1] += f" {item}"
    return "\n".join(lines).removesuffix(",")


def main(argv: list[str] | None = None) -> int:
    """Print the ACL SETUSER lines (or, with --compose, docker-compose.yml's redis user arguments)."""
    parser = argparse.ArgumentParser(prog="python -m shared.core.redis_acl", description=main.__doc__)
    parser.add_argument("kinds", nargs="*", metavar="KIND", help=f"some of {', '.join(KINDS)} (default: all)")
    parser.add_argument("--db", type=int, default=0, help="the Redis db number the processes' URLs name")
    parser.add_argument("--types", help="comma-separated machine types the agents' user is limited to")
    parser.add_argument("--compose", action="store_true", help="print docker-compose.yml's redis --user arguments")
    args = parser.parse_args(argv)
    if args.compose:
        print(compose_yaml())
        return 0
    types = None if args.types is None else [t for t in args.types.split(",") if t]
    unknown = [k for k in args.kinds if k not in KINDS]
    try:
        if unknown:
            raise ValueError(f"no Redis user for process kind {unknown[0]!r}; one of {', '.join(KINDS)}")
        print("\n".join(setuser_lines(args.kinds or KINDS, db=args.db, machine_types=types)))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

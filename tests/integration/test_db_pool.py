"""shared/core/db.py's per-process connection pool: reuse, broken connections dropped, a fork's own pool."""

import os

import psycopg2
import pytest

from shared.core import db
from shared.core.errors import ServiceUnavailable

BACKEND = "SELECT pg_backend_pid() AS pid"


def backend() -> int:
    """The server process serving the connection a transaction borrows."""
    with db.transaction() as cur:
        cur.execute(BACKEND)
        return int(db.one(cur)["pid"])


def terminate(pid: int) -> None:
    """End a server process from another, unpooled connection."""
    conn = db.connect()
    try:
        with conn, conn.cursor() as cur:
            cur.execute("SELECT pg_terminate_backend(%s)", (pid,))
    finally:
        conn.close()


def test_transactions_reuse_one_connection() -> None:
    """Sequential transactions of a process run on the same server connection, each committed."""
    first = backend()
    assert backend() == first == backend()
    with db.transaction() as cur:
        cur.execute("CREATE TEMP TABLE pool_probe (n int)")  # lives as long as the session
    with db.transaction() as cur:
        cur.execute("INSERT INTO pool_probe VALUES (1)")
        cur.execute(BACKEND)
        assert db.one(cur)["pid"] == first
    with db.transaction() as cur:
        cur.execute("SELECT count(*) AS n FROM pool_probe")
        assert db.one(cur)["n"] == 1
        cur.execute("DROP TABLE pool_probe")


def test_a_failed_transaction_is_rolled_back_and_its_connection_kept() -> None:
    """An error in the body rolls back; the connection, healthy, is lent again."""
    first = backend()
    with pytest.raises(ZeroDivisionError), db.transaction() as cur:
        cur.execute("CREATE TEMP TABLE pool_rollback (n int)")
        raise ZeroDivisionError
    with db.transaction() as cur:
        cur.execute("SELECT to_regclass('pg_temp.pool_rollback') AS t")
        assert db.one(cur)["t"] is None
        cur.execute(BACKEND)
        assert db.one(cur)["pid"] == first


def test_a_broken_connection_is_discarded() -> None:
    """A connection whose server process died mid-transaction raises there and is never lent again."""
    # The lost connection surfaces as OperationalError or, from the rollback, InterfaceError (both transient).
    with pytest.raises((psycopg2.OperationalError, psycopg2.InterfaceError)), db.transaction() as cur:
        cur.execute(BACKEND)
        doomed = int(db.one(cur)["pid"])
        terminate(doomed)
        cur.execute("SELECT 1")
    assert backend() != doomed


def test_an_idle_connection_the_server_dropped_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pooled connection whose server process ended while it was idle is found dead before it is lent."""
    doomed = backend()
    terminate(doomed)
    monkeypatch.setattr(db, "POOL_PING_AFTER_S", 0.0)
    assert backend() != doomed


def test_a_forked_child_makes_its_own_pool() -> None:
    """A child never lends its parent's connection (their socket is shared); the parent's still works after."""
    parent = backend()
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        code = 1
        try:
            pids = (backend(), backend())
            os.write(write_end, f"{pids[0]} {pids[1]} {db.pool().pid}".encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end) as fh:
        reported = fh.read().split()
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    first, second, owner = (int(v) for v in reported)
    assert first == second != parent  # its own connection, reused within the child
    assert owner == child
    assert backend() == parent  # the parent's session survived the child's exit


def test_an_unreachable_server_is_service_unavailable() -> None:
    """No server at the URL: ServiceUnavailable, as before pooling."""
    with pytest.raises(ServiceUnavailable, match="unreachable"), db.transaction("postgresql://postgres@127.0.0.1:1/x"):
        pass


def test_close_pools_closes_idle_connections() -> None:
    """After close_pools the next transaction opens a new connection."""
    before = backend()
    assert db.pool().idle() >= 1
    db.close_pools()
    assert db.pool().idle() == 0
    assert backend() != before

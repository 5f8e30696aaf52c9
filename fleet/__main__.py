"""Run the fleet controller: `python -m fleet` (one per deployment; a second one waits)."""

import logging
import signal
import threading

from fleet.controller import Controller
from shared.core import logs, secrets
from shared.core.db import connect
from shared.core.settings import get_settings

log = logging.getLogger("fleet")
# Any fixed number: a second controller (a restarted container, a mistaken replica) waits for it
# instead of launching twice for the same work.
LOCK_KEY = 7_246_002
TRY_LOCK = "SELECT pg_try_advisory_lock(%s)"


def main() -> None:
    """Hold the controller lock and run a pass every FLEET_EVERY_S until SIGTERM."""
    logs.setup("fleet")
    secrets.load_from_environment()
    settings = get_settings()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    if not settings.fleet_enabled:
        log.warning("FLEET_ENABLED is false: the controller launches nothing; jobs for AWS types wait for agents")
    lock = connect()
    lock.autocommit = True
    while not stop.is_set():
        with lock.cursor() as cur:
            cur.execute(TRY_LOCK, (LOCK_KEY,))
            row = cur.fetchone()
        if row and row[0]:
            break
        log.info("another fleet controller holds the lock; waiting")
        stop.wait(settings.fleet_every_s)
    controller = Controller.from_settings() if settings.fleet_enabled else None
    while not stop.is_set():
        if controller is not None:
            try:
                controller.tick()
            except Exception:  # AWS, Redis or PostgreSQL down for a while: try again next pass
                log.exception("fleet pass failed")
        stop.wait(settings.fleet_every_s)
    lock.close()
    log.info("fleet controller stopped")


if __name__ == "__main__":
    main()

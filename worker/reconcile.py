"""Find jobs that stopped moving and send their work again; sending twice is harmless."""

import logging

from shared import tasks
from shared.db import transaction
from shared.settings import get_settings
from worker import planning

log = logging.getLogger(__name__)

SELECT_STALE = """
SELECT id, status FROM jobs
WHERE status IN ('queued', 'running') AND updated_at < now() - make_interval(secs => %s)
ORDER BY created_at"""
TOUCH = "UPDATE jobs SET updated_at = now() WHERE id = %s"


def run() -> int:
    """Re-plan stale queued jobs, re-send missing work of stale running ones; returns how many."""
    with transaction() as cur:
        cur.execute(SELECT_STALE, (get_settings().reconcile_after_s,))
        stale = cur.fetchall()
    for job in stale:
        log.warning("job %s is %s with no progress: sending its work again", job["id"], job["status"])
        if job["status"] == "queued":
            tasks.send(tasks.PLAN_JOB, args=[str(job["id"])])
        else:
            planning.resend_missing(job["id"])
        with transaction() as cur:
            # Wait a full period again before the next re-send.
            cur.execute(TOUCH, (job["id"],))
    return len(stale)

"""Find jobs that stopped moving and send the work that was really lost; take back work nobody needs."""

import logging
import uuid
from functools import partial

from shared import tasks
from shared.db import transaction
from shared.settings import get_settings
from worker import planning, withdrawal

log = logging.getLogger(__name__)

SELECT_STALE = """
SELECT id, status FROM jobs
WHERE status IN ('queued', 'running') AND updated_at < now() - make_interval(secs => %s)
ORDER BY created_at"""
TOUCH = "UPDATE jobs SET updated_at = now() WHERE id = %s AND status IN ('queued', 'running')"


def run() -> int:
    """Re-plan stale queued jobs, re-send lost work of stale running ones; returns how many jobs it took up."""
    withdrawal.sweep()
    with transaction() as cur:
        cur.execute(SELECT_STALE, (get_settings().reconcile_after_s,))
        stale = cur.fetchall()
    for job in stale:
        # Each job on its own: one that raises fails alone, and the pass goes on with the rest.
        planning.contained(job["id"], partial(_take_up, job["id"], job["status"]))
    return len(stale)


def _take_up(job_id: uuid.UUID, status: str) -> None:
    if status == "queued":
        log.warning("job %s is queued with no progress: sending its plan message again", job_id)
        tasks.send(tasks.PLAN_JOB, args=[str(job_id)])
    else:
        sent = planning.resend_missing(job_id)
        if sent:
            log.warning("job %s had no progress: sent %d lost benchmark tasks again", job_id, sent)
    with transaction() as cur:
        # Wait a full period again before the next look.
        cur.execute(TOUCH, (job_id,))

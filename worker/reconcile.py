"""Find jobs that stopped moving and send the work that was really lost; take back work nobody needs."""

import logging
import uuid
from functools import partial

from shared import jobs
from shared.core import tasks
from shared.core.settings import get_settings
from shared.jobs import JobStatus
from worker import planning, withdrawal

log = logging.getLogger(__name__)


def run() -> int:
    """Re-plan stale queued jobs, re-send lost work of stale running ones; returns how many jobs it took up."""
    withdrawal.sweep()
    stale = jobs.stale(after_s=get_settings().reconcile_after_s)
    for job in stale:
        # Each job on its own: one that raises fails alone, and the pass goes on with the rest.
        planning.contained(job["id"], partial(_take_up, job["id"], job["status"]))
    return len(stale)


def _take_up(job_id: uuid.UUID, status: str) -> None:
    if status == JobStatus.QUEUED:
        log.warning("job %s is queued with no progress: sending its plan message again", job_id)
        tasks.send(tasks.PLAN_JOB, args=[str(job_id)])
    else:
        sent = planning.resend_missing(job_id)
        if sent:
            log.warning("job %s had no progress: sent %d lost benchmark tasks again", job_id, sent)
    jobs.touch(job_id=job_id)  # wait a full period again before the next look

"""Benchmark work of jobs that ended is taken back from the queues; lost work is told from work in hand."""

import logging
from collections import defaultdict
from collections.abc import Sequence

from shared import agents, jobs
from shared.core import tasks
from shared.core.settings import get_settings
from shared.jobs import Plan
from shared.jobs.request import JobRequest
from worker import coverage, queued

log = logging.getLogger(__name__)


def _targets(job: jobs.PlannedJob) -> dict[tuple[str, str], dict[int, set[int]]]:
    """(task, queue) → signature → batch sizes a planned job may have sent there (conv layers and ops)."""
    plan, request = Plan.model_validate(job["plan"]), JobRequest.stored(job["request"])
    peers = plan.peers_of(request.machines)
    sizes = request.batch_size_list()
    out: dict[tuple[str, str], dict[int, set[int]]] = defaultdict(lambda: defaultdict(set))
    for machine_type in request.machines:
        for queue in {machine_type, *peers.get(machine_type, [machine_type])}:
            for sig in coverage.signature_ids(plan):
                out[(tasks.BENCH_LAYERS, queue)][sig] |= set(sizes)
            for sig, bs in coverage.op_points(plan, sizes):
                out[(tasks.BENCH_OPS, queue)][sig].add(bs)
    return out


def withdraw_jobs(ended: Sequence[jobs.PlannedJob]) -> int:
    """Remove the queued benchmark tasks of ended jobs that no running job also needs; returns how many."""
    unwanted: dict[tuple[str, str], dict[int, set[int]]] = defaultdict(lambda: defaultdict(set))
    for job in ended:
        if job.get("plan"):
            for target, sigs in _targets(job).items():
                for sig, sizes in sigs.items():
                    unwanted[target][sig] |= sizes
    if not unwanted:
        return 0
    # Running jobs keep their queued work, whoever else asked for it too.
    for job in jobs.live_plans():
        for target, sigs in _targets(job).items():
            for sig in sigs:
                unwanted.get(target, {}).pop(sig, None)
    return sum(queued.withdraw(queue, dict(sigs), task) for (task, queue), sigs in unwanted.items())


def sweep() -> int:
    """Withdraw the queued work of jobs canceled or failed within WITHDRAW_WINDOW_S (cancels come from the API)."""
    ended = jobs.recently_ended(within_s=get_settings().withdraw_window_s)
    return withdraw_jobs(ended) if ended else 0


def lost(gaps: coverage.Missing, task: str = tasks.BENCH_LAYERS) -> coverage.Missing:
    """The gaps whose work (layer or op tasks) is neither waiting in its queue nor being measured by a live agent."""
    if not gaps:
        return gaps
    settings = get_settings()
    listed = agents.list_all(alive_after_s=settings.agent_alive_after_s, limit=500)
    in_hand = queued.busy(listed, settings.bench_stuck_after_s, task)
    out: coverage.Missing = {}
    for machine_type, gap in gaps.items():
        waiting = queued.signatures(machine_type, task)
        left = {(s, b) for s, b in gap if s not in waiting and (machine_type, s) not in in_hand}
        if left:
            out[machine_type] = left
    return out

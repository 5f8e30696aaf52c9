"""A job's progress: how many of the benchmarks it needs are stored, whether it waits for an agent, and whether it
has waited too long or on benchmarks that keep failing."""

from datetime import UTC, datetime
from typing import Any

from fleet import service as fleet
from shared import agents
from shared.core.settings import get_settings
from shared.jobs import Plan, Progress
from shared.jobs.models import Counts, MachineProgress
from shared.jobs.request import JobRequest
from shared.measurements import layers, ops
from shared.training import TrainConfig
from worker import coverage, queued


def of(
    plan: Plan,
    request: JobRequest,
    gaps: coverage.Missing,
    op_gaps: coverage.Missing,
    previous: Progress | None = None,
    listed: list[agents.AgentListed] | None = None,
) -> Progress:
    """A job's progress: conv layer and op benchmarks needed, done and pending, in all and per machine type.

    listed: the agents, when the caller has just read them (coverage.listed_agents).
    """
    per_machine = len(coverage.signature_ids(plan)) * len(request.batch_size_list())
    ops_per_machine = coverage.op_point_count(plan, request.batch_size_list())
    pending = {m: len(gaps.get(m, ())) for m in request.machines}
    ops_pending = {m: len(op_gaps.get(m, ())) for m in request.machines}
    counts_by_type = {
        m: MachineProgress(needed=per_machine, done=per_machine - pending[m], pending=pending[m])
        for m in request.machines
    }
    if ops_per_machine:
        for m, counts in counts_by_type.items():
            counts.ops_needed, counts.ops_pending = ops_per_machine, ops_pending[m]
    if gaps or op_gaps:
        settings = get_settings()
        listed = coverage.listed_agents() if listed is None else listed
        # A hung agent serves nobody: with only hung agents a type waits for one, and the wait times out.
        alive = {a["machine_type"] for a in listed if a["alive"] and not queued.stuck(a, settings.bench_stuck_after_s)}
        before = previous.machines if previous is not None else {}
        # Asked only when some machine type waits: this runs after every stored signature.
        left = {m: pending[m] + ops_pending[m] for m in request.machines}
        waits_on = plan.waits_on if plan.waits_on is not None else request.machines
        # Read only when a type the job waits on has no agent (the reference answers the others).
        booting = fleet.booting() if any(left[m] and m not in alive and m in waits_on for m in counts_by_type) else {}
        for m, counts in counts_by_type.items():
            counts.agent_alive = m in alive
            if left[m] and m not in waits_on:
                counts.answered_by = "reference"  # measured later where an agent or the fleet can
            elif left[m] and m not in alive:
                # Said in the job, so nobody waits on a machine type no agent serves without knowing.
                counts.waiting_for = f"waiting for an agent on {m}" + (
                    f" (the fleet launched {booting[m]}; it is booting)" if m in booting else ""
                )
                # Kept across updates: the clock of the agent-wait timeout starts once.
                since = before[m].waiting_since if m in before else None
                counts.waiting_since = since or datetime.now(UTC).isoformat()
    total = per_machine * len(request.machines)
    out = Progress(
        layer_benchmarks=Counts(needed=total, done=total - sum(pending.values()), pending=sum(pending.values())),
        machines=counts_by_type,
    )
    if ops_per_machine:
        ops_total = ops_per_machine * len(request.machines)
        out.op_benchmarks = Counts(
            needed=ops_total, done=ops_total - sum(ops_pending.values()), pending=sum(ops_pending.values())
        )
    return out


def waited_too_long(progress: Progress) -> str | None:
    """The failure reason when a machine type has had no agent for AGENT_WAIT_TIMEOUT_S, else None."""
    timeout = get_settings().agent_wait_timeout_s
    for m, counts in progress.machines.items():
        since = counts.waiting_since
        if since and (datetime.now(UTC) - datetime.fromisoformat(since)).total_seconds() > timeout:
            waiting = counts.pending + (counts.ops_pending or 0)
            return (
                f"no agent on {m} came up within {timeout:.0f} s ({waiting} benchmarks waiting "
                f"for it); start one (AGENT_MACHINE_TYPE={m} python -m gpu_agent) or enable the fleet, then "
                "submit the job again"
            )
    return None


def expired(
    progress: Progress, *, training: TrainConfig, since: datetime, waited: coverage.Missing,
    ops_waited: coverage.Missing,
) -> str | None:  # fmt: skip
    """Why a running job must fail now (no agent came up in time, or a benchmark it waits for kept failing since
    `since`, the job's start), else None."""
    return waited_too_long(progress) or failed_too_often(training=training, since=since, waited=waited,
                                                         ops_waited=ops_waited)  # fmt: skip


def failed_too_often(
    *, training: TrainConfig, since: datetime, waited: coverage.Missing, ops_waited: coverage.Missing
) -> str | None:
    """The failure reason when a missing layer or op benchmark raised BENCH_MAX_FAILURES times since `since`."""
    limit = get_settings().bench_max_failures
    layer = layers.failed_too_often(
        signature_ids=_sigs(waited), machine_types=sorted(waited), precision=training.layer_precision, since=since,
        limit=limit,
    ) if waited else None  # fmt: skip
    if layer is not None:
        return f"the layer benchmark of signature {layer['signature_id']} {_failed(layer)}"
    op = ops.failed_too_often(
        signature_ids=_sigs(ops_waited), machine_types=sorted(ops_waited), config=training, since=since, limit=limit
    ) if ops_waited else None  # fmt: skip
    if op is None:
        return None
    sig = ops.signature(ops.specs(signature_ids=[op["signature_id"]])[op["signature_id"]]["spec"])
    what = " ".join([sig.op, "×".join(map(str, sig.shape))]).strip()
    return f"the op benchmark of signature {op['signature_id']} ({what}) {_failed(op)}"


def _sigs(waited: coverage.Missing) -> list[int]:
    return sorted({s for gap in waited.values() for s, _b in gap})


def _failed(row: dict[str, Any]) -> str:
    return f"failed {row['n']} times on {row['machine_type']}: {row['error']}"

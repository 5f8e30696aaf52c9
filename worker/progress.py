"""A job's progress: how many of the benchmarks it needs are stored, and whether it waits for an agent."""

from datetime import UTC, datetime
from typing import Any

from shared import agents, fleet
from shared.schemas import JobRequest
from shared.settings import get_settings
from worker import coverage, queued


def of(
    plan: dict[str, Any],
    request: JobRequest,
    gaps: coverage.Missing,
    op_gaps: coverage.Missing,
    previous: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A job's progress: conv layer and op benchmarks needed, done and pending, in all and per machine type."""
    per_machine = len(coverage.signature_ids(plan)) * len(request.batch_size_list())
    ops_per_machine = len(coverage.op_points(plan, request.batch_size_list()))
    pending = {m: len(gaps.get(m, ())) for m in request.machines}
    ops_pending = {m: len(op_gaps.get(m, ())) for m in request.machines}
    counts_by_type: dict[str, dict[str, Any]] = {
        m: {"needed": per_machine, "done": per_machine - pending[m], "pending": pending[m]}
        | ({"ops_needed": ops_per_machine, "ops_pending": ops_pending[m]} if ops_per_machine else {})
        for m in request.machines
    }
    if gaps or op_gaps:
        settings = get_settings()
        listed = agents.list_all(alive_after_s=settings.agent_alive_after_s, limit=500)
        # A hung agent serves nobody: with only hung agents a type waits for one, and the wait times out.
        alive = {a["machine_type"] for a in listed if a["alive"] and not queued.stuck(a, settings.bench_stuck_after_s)}
        before = (previous or {}).get("machines", {})
        # Asked only when some machine type waits: this runs after every stored signature.
        left = {m: pending[m] + ops_pending[m] for m in request.machines}
        booting = fleet.booting() if any(left[m] and m not in alive for m in counts_by_type) else {}
        waits_on = plan.get("waits_on", request.machines)
        for m, counts in counts_by_type.items():
            counts["agent_alive"] = m in alive
            if left[m] and m not in waits_on:
                counts["answered_by"] = "reference"  # measured later where an agent or the fleet can
            elif left[m] and m not in alive:
                # Said in the job, so nobody waits on a machine type no agent serves without knowing.
                counts["waiting_for"] = f"waiting for an agent on {m}" + (
                    f" (the fleet launched {booting[m]}; it is booting)" if m in booting else ""
                )
                # Kept across updates: the clock of the agent-wait timeout starts once.
                counts["waiting_since"] = before.get(m, {}).get("waiting_since") or datetime.now(UTC).isoformat()
    out: dict[str, Any] = {
        "layer_benchmarks": {
            "needed": per_machine * len(request.machines),
            "done": per_machine * len(request.machines) - sum(pending.values()),
            "pending": sum(pending.values()),
        },
        "machines": counts_by_type,
    }
    if ops_per_machine:
        out["op_benchmarks"] = {
            "needed": ops_per_machine * len(request.machines),
            "done": ops_per_machine * len(request.machines) - sum(ops_pending.values()),
            "pending": sum(ops_pending.values()),
        }
    return out


def waited_too_long(progress: dict[str, Any]) -> str | None:
    """The failure reason when a machine type has had no agent for AGENT_WAIT_TIMEOUT_S, else None."""
    timeout = get_settings().agent_wait_timeout_s
    for m, counts in progress["machines"].items():
        since = counts.get("waiting_since")
        if since and (datetime.now(UTC) - datetime.fromisoformat(since)).total_seconds() > timeout:
            waiting = counts["pending"] + counts.get("ops_pending", 0)
            return (
                f"no agent on {m} came up within {timeout:.0f} s ({waiting} benchmarks waiting "
                f"for it); start one (AGENT_MACHINE_TYPE={m} python -m gpu_agent) or enable the fleet, then "
                "submit the job again"
            )
    return None

"""Which layer benchmarks (and calibrations) a job still lacks per machine type, which it waits for, and where they go.

A machine type's benchmarks count as present when any machine type with its GPU model has them
(the plan's `peers`), so a T4 measured on g4dn.xlarge serves every cloud's T4 types.
"""

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Set
from itertools import product
from typing import Any, TypeVar

from fleet import service as fleet
from shared import agents, machine_types
from shared.core import tasks
from shared.core.settings import get_settings
from shared.jobs import Plan
from shared.jobs.request import JobRequest
from shared.measurements import layers, ops
from shared.training import TrainConfig
from worker import predictor

# Machine type → the (signature id, batch size) pairs it has no benchmark for; types lacking none are left out.
# Conv signatures and op signatures (the optimizer at batch size 0) are ids of two tables: kept in two Missings.
# Types with nothing measured share one AllPairs (a large job's op pairs are ~1.7 million): gaps are read, never
# changed.
Missing = dict[str, Set[tuple[int, int]]]
_T = TypeVar("_T")


class AllPairs(Set[tuple[int, int]]):
    """Every (signature, batch size) pair a plan wants, counted and tested without being built.

    A type with nothing measured lacks all of them, and such a gap is mostly only counted (progress) or skipped (a
    type the reference answers and no agent serves): building ~1.7 million pairs for it took 0.06 s a large job.
    at_zero: signatures wanted at batch size 0 only (optimizer steps).
    """

    def __init__(self, ids: Iterable[int], sizes: Iterable[int], at_zero: Iterable[int] = ()) -> None:
        self._ids, self._sizes, self._at_zero = frozenset(ids), frozenset(sizes), frozenset(at_zero)

    def __len__(self) -> int:
        return len(self._ids) * len(self._sizes) + len(self._at_zero)

    def __contains__(self, pair: object) -> bool:
        if not isinstance(pair, tuple) or len(pair) != 2:
            return False
        sig, bs = pair
        return (sig in self._ids and bs in self._sizes) or (bs == 0 and sig in self._at_zero)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        yield from product(sorted(self._ids), sorted(self._sizes))
        yield from ((s, 0) for s in sorted(self._at_zero))

    @classmethod
    def _from_iterable(cls, it: Iterable[_T]) -> Set[_T]:
        return set(it)  # what set operations on it return: a plain set


def signature_ids(plan: Plan) -> list[int]:
    """Every signature of the plan's CNNs."""
    return sorted({sig for pairs in plan.cnns.values() for sig, _count in pairs})


def op_ids(plan: Plan) -> list[int]:
    """Every op signature (optimizer steps included) of the plan's CNNs; none for a plan made before ops were."""
    return sorted({sig for pairs in plan.ops.values() for sig, _count in pairs})


def op_points(plan: Plan, sizes: list[int]) -> AllPairs:
    """The (op signature, batch size) pairs a plan needs: each op at every size, each optimizer step at 0."""
    optimizers = set(plan.optimizers)
    ids = op_ids(plan)
    return AllPairs([s for s in ids if s not in optimizers], sizes, at_zero=[s for s in ids if s in optimizers])


def op_point_count(plan: Plan, sizes: list[int]) -> int:
    """How many (op signature, batch size) pairs a plan needs, counted without building them."""
    return len(op_points(plan, sizes))


def missing(plan: Plan, request: JobRequest) -> Missing:
    """Per machine type, the conv pairs no machine type with its GPU model has a benchmark for."""
    sigs = signature_ids(plan)
    sizes = request.batch_size_list()
    everyone = _everyone(plan, request)
    training = request.training()
    done = layers.measured(
        signature_ids=sigs, machine_types=everyone, batch_sizes=sizes, precision=training.layer_precision,
        channels_last=training.channels_last,
    )  # fmt: skip
    return _gaps(plan, request, done, AllPairs(sigs, sizes))


def missing_ops(plan: Plan, request: JobRequest) -> Missing:
    """Per machine type, the op pairs (and optimizer steps) no machine type with its GPU model has stored."""
    ids = op_ids(plan)
    if not ids:
        return {}
    sizes = request.batch_size_list()
    done = ops.measured(
        signature_ids=ids, machine_types=_everyone(plan, request), batch_sizes=sizes, config=request.training()
    )
    return _gaps(plan, request, done, op_points(plan, sizes))


def _everyone(plan: Plan, request: JobRequest) -> list[str]:
    peers = plan.peers_of(request.machines)
    return sorted({p for m in request.machines for p in peers[m]})


def _gaps(plan: Plan, request: JobRequest, done: set[tuple[int, str, int]], wanted: AllPairs) -> Missing:
    peers = plan.peers_of(request.machines)
    by_type: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for sig, machine_type, bs in done:
        by_type[machine_type].add((sig, bs))
    out: Missing = {}
    for m in request.machines:
        measured = [by_type[p] for p in peers[m] if p in by_type]
        # Nothing measured on its GPU: the gap is every wanted pair, shared (gaps are read, never changed). Else the
        # pairs are built (by product() in C) and the measured ones taken out.
        gap: Set[tuple[int, int]] = set(wanted).difference(*measured) if measured else wanted
        if gap:
            out[m] = gap
    return out


def waited_for(gaps: Missing, plan: Plan) -> Missing:
    """The gaps the job waits for (all of them for a job planned before reference answers existed)."""
    waits_on = plan.waits_on
    return gaps if waits_on is None else {m: g for m, g in gaps.items() if m in waits_on}


def listed_agents() -> list[agents.AgentListed]:
    """The agents as routing and progress read them (alive within AGENT_ALIVE_AFTER_S)."""
    return agents.list_all(alive_after_s=get_settings().agent_alive_after_s, limit=500)


def routed(plan: Plan, *gap_sets: Missing, listed: list[agents.AgentListed] | None = None) -> list[Missing]:
    """Where each gap of each set (layer gaps, op gaps) is sent: its own type's queue if the job waits on it; for a
    type answered by the reference, the queue of a type with its GPU model that a live agent or the AWS fleet
    serves, or none. Who serves what is read once for all the sets (or given: `listed`), only if a gap needs it."""
    waits_on = plan.waits_on
    if waits_on is None or all(set(gaps) <= set(waits_on) for gaps in gap_sets):
        return list(gap_sets)
    listed = listed_agents() if listed is None else listed
    alive = {a["machine_type"] for a in listed if a["alive"]}
    fleet_types = {m["name"] for m in machine_types.list_all() if m["provider"] == "aws"} if fleet.enabled() else set()
    out: list[Missing] = []
    for gaps in gap_sets:
        sent: dict[str, set[tuple[int, int]]] = defaultdict(set)
        for machine_type, gap in gaps.items():
            peers = plan.peers_of(list(gaps))[machine_type]
            target = machine_type if machine_type in waits_on else _served(peers, alive) or _served(peers, fleet_types)
            if target is not None:
                sent[target].update(gap)
        out.append(dict(sent))
    return out


def _served(peers: list[str], served: set[str]) -> str | None:
    return next((p for p in peers if p in served), None)


def _send(
    task: str,
    gaps: Missing,
    specs: Callable[..., dict[int, dict[str, Any]]],
    job_ids: list[str] | None,
    **task_kwargs: Any,
) -> None:
    """Tasks of up to BENCH_TASK_SIGNATURES signatures per machine type, each with all its batch sizes, so a CNN
    costs few round-trips (on a GPU an agent measures a point in milliseconds: per-task costs would dominate).

    Each item names the jobs that sent it (`job_ids`), so the agent's log lines name them; agents that
    predate the field ignore it.
    """
    grouped: dict[tuple[str, int], list[int]] = defaultdict(list)
    for machine_type, gap in gaps.items():
        for sig, bs in gap:
            grouped[(machine_type, sig)].append(bs)
    if not grouped:
        return
    spec_by_id = specs(signature_ids=sorted({sig for _m, sig in grouped}))
    items: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for (machine_type, sig), sizes in sorted(grouped.items()):
        item = {"signature_id": sig, **spec_by_id[sig], "batch_sizes": sorted(sizes)}
        if job_ids:
            item["job_ids"] = job_ids
        items[machine_type].append(item)
    per_task = max(1, get_settings().bench_task_signatures)
    for machine_type, listed in items.items():
        for start in range(0, len(listed), per_task):
            tasks.send(task, queue=tasks.bench_queue(machine_type), machine_type=machine_type,
                       items=listed[start : start + per_task], **task_kwargs)  # fmt: skip


def send_work(gaps: Missing, precision: str, channels_last: bool = False, job_ids: list[str] | None = None) -> None:
    """Conv layer work: tasks of conv signatures per machine, timed in this precision and layout."""
    layout: dict[str, Any] = {"channels_last": True} if channels_last else {}  # absent: as agents before 14 accept
    _send(tasks.BENCH_LAYERS, gaps, layers.specs, job_ids, precision=precision, **layout)


def send_op_work(gaps: Missing, training: TrainConfig, job_ids: list[str] | None = None) -> None:
    """Op work: tasks of op signatures per machine, in the request's training configuration."""
    # Op benchmarks do not depend on cudnn.benchmark (they run in the agent's own setting, as their environment says).
    config = training.model_copy(update={"cudnn_benchmark": False}).wire()
    _send(tasks.BENCH_OPS, gaps, ops.specs, job_ids, config=config)


def uncalibrated(request: JobRequest, infos: dict[str, machine_types.MachineTypeInfo]) -> str | None:
    """Why the job cannot be answered: a CPU type (no reference) calibrated, but not for this training config.

    infos: the request's machine types' catalog rows. A CPU type with no model at all keeps the `no_model` answer
    (its layer benchmarks are still measured).
    """
    cpus = [m for m in request.machines if m in infos and not machine_types.reference_can_answer(infos[m])]
    if not cpus:
        return None
    training = request.training()
    key = training.cost_key()
    have = predictor.keys_of(machine_types=cpus)
    for m in cpus:
        if have.get(m) and key not in have[m]:
            return (
                f"{m} has no model calibrated for {key} (only for {', '.join(have[m])}) and no reference "
                f"predictor covers a CPU: run `{training.calibrate_command(m)}`, then submit the job again"
            )
    return None

"""The answer as a decision: per CNN and question, one winner across every machine type and layout, why, and the
options the model cannot tell apart from it.

Questions: the fastest, the cheapest, and where the job gives a deadline or a budget, the cheapest that finishes
within the deadline and the fastest that stays within the budget. An option is a (machine type, GPUs, nodes)
layout at its best batch size for the question; a choice leaves MIN_HEADROOM_PCT of memory free where any option
of its machine type does. Runners-up are the options whose P10-P90 band on the question's figure reaches the
winner's: within the model's error they may be as good, and the reasons say so.
"""

from collections.abc import Callable
from operator import itemgetter
from typing import Any, Literal, cast

from prediction.points import BY_COST, MIN_HEADROOM_PCT, headroom_pct, timed_fitting, with_headroom
from shared.jobs.point import PointDict
from shared.jobs.request import JobRequest
from shared.jobs.result import DecisionDict, OptionDict

QUESTIONS = ("fastest", "cheapest", "cheapest_within_deadline", "fastest_within_budget")
MAX_RUNNERS_UP = 5
# A bound question's unbound twin: with no winner within the bound, the reason names that one's nearest option.
RELAXED = {"cheapest_within_deadline": "fastest", "fastest_within_budget": "cheapest"}
Figure = Literal["total_seconds", "cost_usd"]
# (figure ranked, then the tie-breakers): the figure whose band decides a tie. Points and options alike.
# itemgetter: a large job ranks ~10^5 points per question, and a Python key function per point took a tenth of it.
_BY_TIME = itemgetter("total_seconds", "cost_usd", "batch_size")
RANK: dict[str, tuple[Figure, Callable[[Any], tuple[Any, ...]]]] = {
    "fastest": ("total_seconds", _BY_TIME),
    "cheapest": ("cost_usd", BY_COST),
    "cheapest_within_deadline": ("cost_usd", BY_COST),
    "fastest_within_budget": ("total_seconds", _BY_TIME),
}
_LAYOUT = itemgetter("gpus_used", "nodes")


def option(point: PointDict, capacity_gib: float | None) -> OptionDict:
    """A point as an option: its machine type, layout, times, costs and bands."""
    return {
        "machine": point["machine"],
        "gpus": point.get("gpus_used", 1),
        "nodes": point.get("nodes", 1),
        "batch_size": point["batch_size"],
        "global_batch_size": point.get("global_batch_size"),
        "allreduce_algorithm": point.get("allreduce_algorithm"),
        "source": point["source"],
        "total_seconds": cast(float, point["total_seconds"]),  # options are made of timed points only
        "total_seconds_p10": point.get("total_seconds_p10"),
        "total_seconds_p90": point.get("total_seconds_p90"),
        "cost_usd": cast(float, point["cost_usd"]),
        "cost_usd_p10": point.get("cost_usd_p10"),
        "cost_usd_p90": point.get("cost_usd_p90"),
        "spot_cost_usd": point.get("spot_cost_usd"),
        "memory_headroom_pct": headroom_pct(point, capacity_gib),
        "input_bound": point.get("input_bound"),
        "input_limit": point.get("input_limit"),
    }


def decide(per_machine: list[tuple[str, list[PointDict], float | None]], request: JobRequest) -> list[DecisionDict]:
    """Every question's decision for every CNN: per_machine holds (CNN, its points on one machine type, the memory
    one point may use there)."""
    out: list[DecisionDict] = []
    for cnn in dict.fromkeys(c for c, _, _ in per_machine):
        mine = [(points, cap) for c, points, cap in per_machine if c == cnn]
        roomy, tight = _layouts(mine)
        # The unbound questions come first: a bound one with no winner names the nearest of theirs.
        best: dict[str, list[OptionDict]] = {}
        for question in QUESTIONS:
            limit = _limit(question, request)
            if limit is None and question not in ("fastest", "cheapest"):
                continue
            best[question] = _best(roomy, question, limit)
            closest = best[question] if tight is roomy else _best(tight, question, limit)
            unbound = best[question] if limit is None else best[RELAXED[question]]
            out.append(_decision(cnn, question, best[question], closest, limit, unbound))
    return out


def _limit(question: str, request: JobRequest) -> float | None:
    """The deadline in seconds or the budget in dollars a question is bound by (None: unbound or not asked)."""
    if question == "cheapest_within_deadline" and request.deadline_hours is not None:
        return request.deadline_hours * 3600
    if question == "fastest_within_budget" and request.budget_usd is not None:
        return request.budget_usd
    return None


Layouts = list[tuple[list[Any], float | None]]  # each layout's usable points, and the memory they are judged by


def _layouts(mine: list[tuple[list[PointDict], float | None]]) -> tuple[Layouts, Layouts]:
    """Every (machine type, GPUs, nodes) layout's usable points, twice: those leaving the headroom (where a machine
    type has any; roomy), and all (tight). Each point's headroom is worked out once. Where both hold the same
    points, tight is roomy itself (one search answers both)."""
    roomy: Layouts = []
    tight: Layouts = []
    alike = True
    for points, cap in mine:
        usable = timed_fitting(points)
        spacious = with_headroom(usable, cap)
        groups = [(group, cap) for group in _by_layout(usable)]
        tight += groups
        if len(spacious) in (0, len(usable)):
            roomy += groups
        else:
            roomy += [(group, cap) for group in _by_layout(spacious)]
            alike = False
    return roomy, (roomy if alike else tight)


def _by_layout(points: list[Any]) -> list[list[Any]]:
    """The points grouped by (GPUs, nodes), in the order each layout first appears."""
    try:
        layouts = set(map(_LAYOUT, points))
    except KeyError:  # a point without its layout named: grouped one by one below
        layouts = set()
    if len(layouts) == 1:  # one layout, as most machine types answer: no dict operation per point
        return [list(points)]
    by_layout: dict[tuple[int, int], list[Any]] = {}
    for p in points:
        by_layout.setdefault((p.get("gpus_used", 1), p.get("nodes", 1)), []).append(p)
    return list(by_layout.values())


def _best(layouts: Layouts, question: str, limit: float | None) -> list[OptionDict]:
    """Each layout's best point for the question (within its deadline or budget) as an option: a large job's tens
    of thousands of points become a few hundred options."""
    _figure, key = RANK[question]
    out = []
    for group, cap in layouts:
        within = _within(group, question, limit)
        if within:
            out.append(option(min(within, key=key), cap))
    return out


def _within(options: list[Any], question: str, limit: float | None) -> list[Any]:
    """The points or options a question may choose from (those within its deadline or budget)."""
    if question == "cheapest_within_deadline":
        return [o for o in options if limit is not None and o["total_seconds"] <= limit]
    if question == "fastest_within_budget":
        return [o for o in options if limit is not None and o["cost_usd"] <= limit]
    return options


def _decision(cnn: str, question: str, roomy: list[OptionDict], tight: list[OptionDict],
              limit: float | None, everything: list[OptionDict]) -> DecisionDict:  # fmt: skip
    figure, key = RANK[question]
    ranked = sorted(roomy, key=key)
    decision: DecisionDict = {"cnn": cnn, "question": question, "winner": None, "reasons": [], "runners_up": []}
    if not ranked:
        decision["reasons"].append(_none_within(question, everything, limit))
        return decision
    winner = ranked[0]
    decision["winner"] = winner
    reasons: list[str] = [_layout(winner)]
    closest = min(tight, key=key)
    if key(closest) < key(winner):
        reasons.append(
            f"batch {closest['batch_size']} on {closest['machine']} would be {_figure(figure, closest[figure])} but "
            f"leaves {closest['memory_headroom_pct']:.0f}% of a GPU's memory free; choices keep "
            f"{MIN_HEADROOM_PCT:.0f}% (the memory model errs by a few per cent)"
        )
    if winner.get("input_bound"):
        reasons.append(_input_reason(winner))
    # One runner-up per other layout: its best batch size for the question, when its band reaches the winner's.
    best_per_layout: dict[tuple[str, int, int], OptionDict] = {}
    for o in ranked[1:]:
        best_per_layout.setdefault((o["machine"], o["gpus"], o["nodes"]), o)
    same = (winner["machine"], winner["gpus"], winner["nodes"])
    overlapping = [o for k, o in best_per_layout.items() if k != same and _overlaps(o, winner, figure)]
    decision["runners_up"] = overlapping[:MAX_RUNNERS_UP]
    if overlapping:
        names = ", ".join(f"{o['machine']} ({_figure(figure, o[figure])})" for o in overlapping[:3])
        more = f" and {len(overlapping) - 3} more" if len(overlapping) > 3 else ""
        reasons.append(f"a tie within the model's error (P10-P90 bands overlap) with {names}{more}")
    decision["reasons"] = reasons
    return decision


def _overlaps(other: OptionDict, winner: OptionDict, figure: Figure) -> bool:
    """Whether other's P10 reaches below the winner's P90 on the figure (bands unknown: the figures themselves)."""
    return _band(other, figure)[0] <= _band(winner, figure)[1]


def _band(o: OptionDict, figure: Figure) -> tuple[float, float]:
    """An option's P10 and P90 of the figure (each the figure itself where unknown)."""
    if figure == "cost_usd":
        low, mid, high = o["cost_usd_p10"], o["cost_usd"], o["cost_usd_p90"]
    else:
        low, mid, high = o["total_seconds_p10"], o["total_seconds"], o["total_seconds_p90"]
    return (mid if low is None else low), (mid if high is None else high)


def _layout(o: OptionDict) -> str:
    """'8 GPUs x 2 machines of p4d.24xlarge, batch 256 per GPU (4,096 in all)' or 'batch 64 on g4dn.xlarge'."""
    if o["gpus"] == 0:  # a CPU machine type (local without CUDA) trains on its cores
        return f"batch {o['batch_size']} on {o['machine']} (its CPU)"
    if o["gpus"] <= 1 and o["nodes"] <= 1:
        return f"batch {o['batch_size']} on one GPU of {o['machine']}"
    machines = f"{o['nodes']} machines" if o["nodes"] > 1 else "one machine"
    total = o.get("global_batch_size") or o["batch_size"] * o["gpus"] * o["nodes"]
    algorithm = f", all-reduce {o['allreduce_algorithm']}" if o.get("allreduce_algorithm") else ""
    return (f"{o['gpus']} GPUs x {machines} of {o['machine']}, batch {o['batch_size']} per GPU ({total:,} in all"
            f"{algorithm})")  # fmt: skip


def _input_reason(o: OptionDict) -> str:
    """What binds an input-bound winner and what would lift it."""
    if o.get("input_limit") == "network":
        return (
            "input-bound: reading the images over the network is slower than the GPU step; faster storage or "
            "a local copy of the dataset would lift it"
        )
    return (
        "input-bound: decoding and augmenting the JPEGs on the machine's CPUs is slower than the GPU step; "
        "more CPU cores per GPU, pre-decoded data or data echoing would lift it"
    )


def _none_within(question: str, options: list[OptionDict], limit: float | None) -> str:
    """Why a bound question has no winner."""
    if not options:
        return "no batch size fits in memory or has a time on any machine type asked"
    if question == "cheapest_within_deadline":
        fastest = min(options, key=lambda o: o["total_seconds"])
        return (f"nothing finishes within {_figure('total_seconds', limit)}: the fastest, {_layout(fastest)}, "
                f"takes {_figure('total_seconds', fastest['total_seconds'])}")  # fmt: skip
    cheapest = min(options, key=lambda o: o["cost_usd"])
    return (f"nothing stays within {_figure('cost_usd', limit)}: the cheapest, {_layout(cheapest)}, costs "
            f"{_figure('cost_usd', cheapest['cost_usd'])}")  # fmt: skip


def _figure(figure: str, value: float | None) -> str:
    """A time in hours or minutes, or dollars."""
    if value is None:
        return "-"
    if figure == "cost_usd":
        return f"${value:,.2f}"
    return f"{value / 3600:.1f} h" if value >= 3600 else f"{value / 60:.0f} min"

"""Decisions: one winner per question across machine types and layouts, with its reasons and its ties."""

from typing import Any, cast

from shared.jobs.point import PointDict
from shared.jobs.request import JobRequest
from shared.jobs.result import DecisionDict
from worker import decisions


def point(machine: str, bs: int, hours: float, usd: float, *, gpus: int = 1, nodes: int = 1, band: float = 0.1,
          peak: float | None = None, fits: bool | None = True, **extra: Any) -> PointDict:  # fmt: skip
    """A timed point with a symmetric band of ±band around its time and cost."""
    s = hours * 3600
    fields = {"cnn": "resnet50", "machine": machine, "batch_size": bs, "gpus_used": gpus, "nodes": nodes,
            "global_batch_size": bs * gpus * nodes, "source": "reference", "fits_in_memory": fits,
            "peak_memory_gib": peak, "total_seconds": s, "total_seconds_p10": s * (1 - band),
            "total_seconds_p90": s * (1 + band), "cost_usd": usd, "cost_usd_p10": usd * (1 - band),
            "cost_usd_p90": usd * (1 + band), **extra}  # fmt: skip
    # `extra` holds further PointDict keys (input_bound, input_limit), which a TypedDict literal cannot spread.
    return cast(PointDict, fields)


REQUEST = JobRequest.model_validate({"cnns": ["resnet50"], "machines": ["g4dn.xlarge"], "batch_sizes": [64]})


def by_question(found: list[DecisionDict]) -> dict[str, DecisionDict]:
    return {d["question"]: d for d in found}


def test_one_winner_across_machines_and_layouts_with_the_layout_named() -> None:
    """The fastest is 8 GPUs x 2 machines, the cheapest 8 x 1; each reason names its layout and per-GPU batch."""
    p4d = [point("p4d", 256, 3.9, 85.4, gpus=8), point("p4d", 256, 2.0, 88.0, gpus=8, nodes=2, band=0.02)]
    t4 = [point("g4dn", 256, 30.0, 120.0, band=0.02)]
    found = by_question(decisions.decide([("resnet50", p4d, 40.0), ("resnet50", t4, 15.0)], REQUEST))
    assert set(found) == {"fastest", "cheapest"}  # no deadline or budget asked
    fastest, cheapest = found["fastest"], found["cheapest"]
    assert fastest["winner"] is not None and cheapest["winner"] is not None
    assert (fastest["winner"]["machine"], fastest["winner"]["gpus"], fastest["winner"]["nodes"]) == ("p4d", 8, 2)
    assert fastest["reasons"][0] == "8 GPUs x 2 machines of p4d, batch 256 per GPU (4,096 in all)"
    assert (cheapest["winner"]["gpus"], cheapest["winner"]["nodes"]) == (8, 1)
    # p4d on two machines costs $88.0 (P10 $86.2), within the winner's band ($85.4, P90 $93.9): a tie, said so.
    assert [(o["machine"], o["nodes"]) for o in cheapest["runners_up"]] == [("p4d", 2)]
    assert "a tie within the model's error" in cheapest["reasons"][-1]
    assert fastest["runners_up"] == []  # 3.9 h's P10 (3.5 h) is past 2.0 h's P90


def test_headroom_is_said_when_it_changes_the_choice() -> None:
    """Batch 320 is cheaper but leaves 5% free: batch 256 wins and the reason says why."""
    t4 = [point("g4dn", 256, 10.0, 70.74, peak=12.0, band=0.0), point("g4dn", 320, 9.8, 69.14, peak=14.25, band=0.0)]
    cheapest = by_question(decisions.decide([("resnet50", t4, 15.0)], REQUEST))["cheapest"]
    assert cheapest["winner"] is not None
    assert cheapest["winner"]["batch_size"] == 256
    assert "batch 320 on g4dn would be $69.14 but leaves 5% of a GPU's memory free; choices keep 10%" in \
        cheapest["reasons"][1]  # fmt: skip


def test_points_that_do_not_fit_never_win_and_nothing_fitting_is_said() -> None:
    """A point out of memory is no option; with none left, no winner and a reason."""
    only = [point("g4dn", 512, 1.0, 1.0, fits=False)]
    found = by_question(decisions.decide([("resnet50", only, 15.0)], REQUEST))
    assert found["fastest"]["winner"] is None and "no batch size fits" in found["fastest"]["reasons"][0]


def test_deadline_and_budget_questions() -> None:
    """Within 5 h the cheapest is the 8-GPU machine; within $50 nothing: the reason names the cheapest and its cost."""
    request = REQUEST.model_copy(update={"deadline_hours": 5.0, "budget_usd": 50.0})
    options = [point("p4d", 256, 3.9, 85.4, gpus=8), point("g4dn", 256, 30.0, 60.0)]
    found = by_question(decisions.decide([("resnet50", options[:1], 40.0), ("resnet50", options[1:], 15.0)], request))
    cheapest, within_deadline = found["cheapest"]["winner"], found["cheapest_within_deadline"]["winner"]
    assert cheapest is not None and within_deadline is not None
    assert cheapest["machine"] == "g4dn"
    assert within_deadline["machine"] == "p4d"
    budget = found["fastest_within_budget"]
    assert budget["winner"] is None
    assert budget["reasons"] == [
        "nothing stays within $50.00: the cheapest, batch 256 on one GPU of g4dn, costs $60.00"
    ]


def test_an_input_bound_winner_says_what_binds_and_what_lifts_it() -> None:
    """Decoding on the CPUs binds: the reason says so and names the remedies."""
    fed = [point("g4dn", 256, 10.0, 70.0, input_bound=True, input_limit="decode_cpus")]
    fastest = by_question(decisions.decide([("resnet50", fed, 15.0)], REQUEST))["fastest"]
    assert "decoding and augmenting the JPEGs on the machine's CPUs" in fastest["reasons"][1]
    assert "data echoing" in fastest["reasons"][1]


def test_a_cpu_machine_type_is_not_called_a_gpu() -> None:
    """`local` without CUDA (no GPU: gpus_used 0) trains on its CPU, and the reason says so."""
    cpu = [point("local", 8, 900.0, 0.0, gpus=0)]
    found = by_question(decisions.decide([("resnet50", cpu, 16.0)], REQUEST))
    assert found["fastest"]["reasons"][0] == "batch 8 on local (its CPU)"

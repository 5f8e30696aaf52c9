"""The op points a plan needs: counted without building them, the same number as built."""

from shared.jobs import Plan
from worker import coverage


def test_op_point_count_is_the_number_of_op_points() -> None:
    """Ops shared by two CNNs count once; an optimizer step once (batch size 0); every other op per batch size."""
    plan = Plan(cnns={}, ops={"a": [(1, 2), (2, 1), (9, 1)], "b": [(1, 1), (3, 4), (8, 1)]}, optimizers=[9, 8])
    for sizes in ([1], [1, 2, 4], list(range(1, 257))):
        points = coverage.op_points(plan, sizes)
        assert coverage.op_point_count(plan, sizes) == len(points) == 3 * len(sizes) + 2
    assert coverage.op_point_count(Plan(cnns={}), [1, 2]) == 0

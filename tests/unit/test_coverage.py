"""The pairs a plan needs (worker/coverage.py AllPairs): counted and tested without building them, alike built."""

from shared.jobs import Plan
from worker import coverage


def test_op_points_are_each_op_at_every_size_and_each_optimizer_step_at_zero() -> None:
    """Ops shared by two CNNs count once; an optimizer step once (batch size 0); every other op per batch size."""
    plan = Plan(cnns={}, ops={"a": [(1, 2), (2, 1), (9, 1)], "b": [(1, 1), (3, 4), (8, 1)]}, optimizers=[9, 8])
    for sizes in ([1], [1, 2, 4], list(range(1, 257))):
        points = coverage.op_points(plan, sizes)
        built = {(sig, bs) for sig in (1, 2, 3) for bs in sizes} | {(9, 0), (8, 0)}
        assert set(points) == built and len(list(points)) == len(built)
        assert len(points) == coverage.op_point_count(plan, sizes) == 3 * len(sizes) + 2
        assert all(pair in points for pair in built)
    assert coverage.op_point_count(Plan(cnns={}), [1, 2]) == 0


def test_a_pair_outside_the_plan_is_not_in_it() -> None:
    """An optimizer step at a batch size, an op at size 0 or at a size not asked, another signature: not wanted."""
    points = coverage.AllPairs([1, 2], [4, 8], at_zero=[9])
    for pair in [(9, 4), (1, 0), (1, 16), (3, 4), (4, 1), "x", (1,)]:
        assert pair not in points
    assert (2, 8) in points and (9, 0) in points


def test_set_operations_on_all_pairs_give_plain_sets() -> None:
    """A gap taken from AllPairs (a difference, a union) is a set of its own, not a view of the plan."""
    points = coverage.AllPairs([1, 2], [4, 8])
    left = points - {(1, 4)}
    assert isinstance(left, set) and left == {(1, 8), (2, 4), (2, 8)}
    assert ({(5, 5)} | points) == {(5, 5), (1, 4), (1, 8), (2, 4), (2, 8)}
    assert points == {(1, 4), (1, 8), (2, 4), (2, 8)} and bool(coverage.AllPairs([], [4])) is False

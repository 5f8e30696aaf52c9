"""The agent's all-CPU input rate: each synchronised round's rate, and the median of them as the figure."""

import statistics

import pytest

from gpu_agent import input_bench


def test_a_round_counts_every_workers_images_from_the_first_start_to_the_last_end() -> None:
    """Two workers, 32 images each a round: round 0 spans 1.0-1.5 s, round 1 2.0-2.25 s."""
    spans = [[(1.0, 1.4), (2.0, 2.25)], [(1.1, 1.5), (2.0, 2.2)]]
    assert input_bench.round_rates(spans, 32) == pytest.approx([64 / 0.5, 64 / 0.25])


def test_rounds_stop_at_the_shortest_workers_and_the_median_ignores_a_burst() -> None:
    """A worker that reported fewer rounds bounds the count; one slowed round does not move the median."""
    steady = [(float(r), r + 0.1) for r in range(5)]
    burst = list(steady)
    burst[2] = (2.0, 2.5)  # another process took this worker's CPU for 0.4 s
    rates = input_bench.round_rates([steady, burst, steady[:4]], 10)
    assert len(rates) == 4 and rates[2] == pytest.approx(30 / 0.5)
    assert statistics.median(rates) == pytest.approx(30 / 0.1)  # the figure measure() stores

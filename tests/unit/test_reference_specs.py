"""A GPU's figures the reference model derives from its spec sheet: SMs x clock from the FP32 rate."""

import pytest

from prediction.reference.fit import gpu_table
from prediction.reference.specs import lanes_per_sm, sm_cycles_per_s


def test_sm_cycles_from_the_fp32_rate_give_each_catalog_gpus_published_clock() -> None:
    """SMs x clock comes from the FP32 rate and the lanes per SM of its compute capability: with each GPU's published
    SM count it gives a boost clock between 0.7 and 2.6 GHz for every GPU in data/gpus.csv (Kepler's 192 lanes,
    Maxwell's and consumer Pascal's 128, GP100's, Volta's, Turing's and A100's 64, GA102 and later 128)."""
    for name, gpu in gpu_table().items():
        assert gpu.sm_count, name
        clock = sm_cycles_per_s(gpu) / gpu.sm_count / 1e9
        assert 0.7 < clock < 2.6, (name, clock)
    assert sm_cycles_per_s(gpu_table()["A100-SXM4-40GB"]) == pytest.approx(108 * 1.41e9, rel=0.01)
    assert [lanes_per_sm(cc) for cc in (3.7, 5.2, 6.0, 6.1, 7.0, 7.5, 8.0, 8.6, 8.9, 9.0)] == [
        192, 128, 64, 128, 64, 64, 64, 128, 128, 128,
    ]  # fmt: skip

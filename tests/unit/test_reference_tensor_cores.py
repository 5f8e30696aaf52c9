"""Which conv layers the reference costs on tensor cores: channels per group in whole 16-byte vectors."""

import pytest

from prediction.reference import convs
from prediction.reference.fit import gpu_table
from prediction.reference.steps import kernel_precision


def spec(channels: int, groups: int = 1) -> dict[str, object]:
    """A 3x3 conv of that many channels in and out."""
    return {"in_channels": channels, "out_channels": channels, "in_h": 28, "in_w": 28, "kernel": [3, 3],
            "stride": [1, 1], "padding": [1, 1], "groups": groups}  # fmt: skip


@pytest.mark.parametrize(("precision", "expected"), [
    ("fp32", [True, True, False, True]),  # TF32: 4 channels a vector
    ("tf32", [True, True, False, True]),
    ("amp_fp16", [False, True, False, False]),  # 16-bit types: 8 a vector
    ("amp_bf16", [False, True, False, False]),
])  # fmt: skip
def test_channels_per_group_must_fill_the_vectors_of_the_precision(precision: str, expected: list[bool]) -> None:
    """116 channels (shufflenet_v2_x1_0's branches) fill TF32's vectors, not 16-bit ones; 4 channels per group too."""
    geo = convs.geometry([spec(116), spec(128), spec(6), spec(128, groups=32)])
    gpu = gpu_table()["H100-SXM5-80GB"]
    assert convs.uses_tensor_cores(geo, gpu, kernel_precision(precision)).tolist() == expected

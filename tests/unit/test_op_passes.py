"""Each memory-bound operator kind's passes over memory: counted bytes, the ratio to a ReLU forward, the bundles'
figures, and the step model taking them."""

import numpy as np
import pytest

from prediction.reference import measured, op_passes, steps
from prediction.reference.fit import STEP_DEFAULTS, gpu_table


def test_forward_bytes_count_inputs_and_outputs_as_the_workload_does() -> None:
    """fp32: an activation and batch norm read and write the tensor; max pooling writes int64 indices too."""
    assert op_passes.forward_bytes({"op": "relu", "shape": [10, 4, 4], "args": {}}) == 8 * 160
    assert op_passes.forward_bytes({"op": "batch_norm", "shape": [10, 4, 4], "args": {}}) == 8 * 160
    pool = {"kernel": [2, 2], "stride": [2, 2], "padding": [0, 0]}
    assert op_passes.forward_bytes({"op": "max_pool2d", "shape": [10, 4, 4], "args": pool}) == 4 * 160 + 12 * 40
    assert op_passes.forward_bytes({"op": "avg_pool2d", "shape": [10, 4, 4], "args": pool}) == 4 * 160 + 4 * 40
    cat = {"dim": 1, "shapes": [[2, 3, 3], [5, 3, 3]]}
    assert op_passes.forward_bytes({"op": "cat", "shape": [], "args": cat}) == 8 * 63
    residual = {"batched": True, "grad": True, "other": 100}
    assert op_passes.forward_bytes({"op": "add", "shape": [100], "args": residual}) == 4 * 300


@pytest.mark.parametrize(
    "spec",
    [
        {"op": "add", "shape": [1], "args": {"dtype": "int64", "step": True}},  # the optimizer's step counter
        {"op": "mul", "shape": [9216], "args": {"grad": False}},  # no backward
        {"op": "linear", "shape": [1, 9216], "args": {"out": 10}},  # a matmul, not memory-bound
    ],
)
def test_forward_bytes_leaves_out_what_is_not_a_memory_bound_training_op(spec: dict) -> None:
    assert op_passes.forward_bytes(spec) is None


def test_passes_are_a_kinds_time_per_byte_over_a_relu_forwards() -> None:
    """Large tensors only; a kind with too few timings is left out; without ReLU timings nothing is said."""
    big = 1e9
    relu = [("relu", big, 1.0, 1.5)] * 5
    norm = [("batch_norm", big, 3.0, 5.0)] * 5
    small = [("batch_norm", 1e3, 900.0, 900.0)] * 20  # launch-bound: ignored
    few = [("cat", big, 1.0, 1.0)] * (op_passes.MIN_ROWS - 1)
    got = op_passes.passes(relu + norm + small + few)
    assert got == {"activation": pytest.approx(2.5), "batch_norm": pytest.approx(8.0)}
    assert op_passes.passes(norm) == {}


def test_the_committed_bundles_measure_batch_norm_and_pooling_above_activations() -> None:
    """The H200's operators: batch norm's and max pooling's kernels pass over memory far more than a ReLU's, in fp32
    and in autocast's bf16; the model's constants are fp32's, for the fp32 and fp16 groups only."""
    got = op_passes.by_variant(measured.files())
    kinds = ("activation", "batch_norm", "pooling", "elementwise", "concat")
    assert set(got["fp32"]) == set(kinds)
    assert {"batch_norm", "activation", "pooling"} <= set(got["bf16"])
    for variant in ("fp32", "bf16"):
        assert all(np.isfinite(v) and v > 0 for v in got[variant].values())
        assert got[variant]["batch_norm"] > 2 * got[variant]["activation"]
        assert got[variant]["pooling"] > 2 * got[variant]["activation"]
    constants = op_passes.from_bundles(measured.files())
    assert constants == {f"passes_{k}_{g}": got["fp32"][k] for k in kinds for g in ("fp32", "fp16")}


def _batch_norm_ms(c: dict, precision: str = "fp32") -> np.ndarray:
    gpu = gpu_table()["A100-SXM4-80GB"]
    work = {"ops": {"batch_norm": {"count": 0, "bytes": 4e7, "flops": 0.0}}}
    return steps.other_ms(work, np.array([8.0, 64.0]), gpu, precision, c)  # type: ignore[arg-type]


def test_a_kinds_passes_scale_its_bytes_in_the_step_model() -> None:
    """Doubling batch norm's passes doubles the memory part of a batch-norm-only workload (no kernels: no floors)."""
    c = dict(STEP_DEFAULTS, memory_efficiency=0.8)
    base = _batch_norm_ms(c)
    assert _batch_norm_ms({**c, "passes_batch_norm_fp32": 6.0}) == pytest.approx(2 * base)
    # without a measured figure a kind keeps forward once and backward twice
    bw = gpu_table()["A100-SXM4-80GB"].mem_bandwidth_gbs * 1e9 * 0.8
    assert base == pytest.approx(4e7 * np.array([8.0, 64.0]) * 3 / bw * 1e3)


def test_each_precision_group_reads_its_own_passes() -> None:
    """fp16 reads passes_<kind>_fp16 (at autocast's halved bytes); bf16, given none, the uniform rule."""
    c = dict(STEP_DEFAULTS, memory_efficiency=0.8, passes_batch_norm_fp32=8.0, passes_batch_norm_fp16=8.0)
    fp32, fp16, bf16 = (_batch_norm_ms(c, p) for p in ("fp32", "amp_fp16", "amp_bf16"))
    assert fp16 == pytest.approx(fp32 / 2)
    assert bf16 == pytest.approx(fp32 / 2 * 3 / 8)

"""The agent times a 16-bit batch norm as autocast trains it: 16-bit input, fp32 weight, bias and statistics."""

import pytest
import torch

from gpu_agent import op_bench
from shared.cnn.op_signatures import OpSignature
from shared.training import Precision, TrainConfig


@pytest.mark.parametrize("precision", ["amp_bf16", "fp32"])
def test_batch_norm_keeps_fp32_parameters_under_a_16_bit_variant(precision: Precision) -> None:
    """The input takes the variant's dtype; weight, bias and running statistics are fp32, as a module's are."""
    config = TrainConfig(precision=precision)
    sig = OpSignature.of("batch_norm", (8, 6, 6))
    dtype = op_bench._dtype(sig, config)
    fn, inputs = op_bench._op(sig, op_bench._Make(4, dtype, torch.device("cpu"), False, True))
    leaf, weight, bias = inputs
    assert leaf.dtype == (torch.bfloat16 if precision == "amp_bf16" else torch.float32)
    assert weight.dtype == bias.dtype == torch.float32
    out = fn()
    assert out.dtype == leaf.dtype and out.shape == (4, 8, 6, 6)
    grads = torch.autograd.grad(out, inputs, torch.ones_like(out))
    assert [g.dtype for g in grads] == [leaf.dtype, torch.float32, torch.float32]


def test_prepared_phases_of_a_bf16_batch_norm_run_on_the_cpu() -> None:
    """prepare() builds and warms both phases of the mixed-dtype op (a CPU agent times bf16 too)."""
    prepared = op_bench.prepare(OpSignature.of("batch_norm", (8, 6, 6)), 4, TrainConfig(precision="amp_bf16"),
                                torch.device("cpu"))  # fmt: skip
    assert set(prepared.phases) == {"forward", "backward"}

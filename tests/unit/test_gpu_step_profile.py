"""bench/gpu_step_profile.py, the GPU host's step profiler: its kernel classes and arithmetic, and its CPU dry run."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from torch.autograd import DeviceType

from bench import gpu_step_profile as gp


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nchw_tilesize128x128x64", "conv"),
        ("void cudnn::cnn::wgrad_alg0_engine<float, 128, 5, 5, 3, 3, 3, false, 512>", "conv"),
        ("void nchwToNhwcKernel<__half, __half, float, true, false, (cudnnKernelDataType_t)0>", "transpose"),
        ("ampere_fp16_s1688gemm_fp16_256x128_ldg8_f2f_tn", "gemm"),
        ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<__half, float, 512, true, 1>", "batch_norm"),
        ("void at::native::batch_norm_collect_statistics_kernel<at::native::InvStd, c10::BFloat16>", "batch_norm"),
        (
            "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::FusedAdamMathFunctor>",
            "optimizer",
        ),
        ("void at::native::_amp_non_finite_check_and_unscale_cuda_", "optimizer"),
        ("void at::native::(anonymous namespace)::max_pool_forward_nchw<c10::Half>", "pool"),
        ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>", "copy_cast"),
        ("Memcpy DtoH (Device -> Pinned)", "copy_cast"),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar>",
            "elementwise",
        ),
        ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>", "reduction"),
        ("some_kernel_nobody_named", "other"),
    ],
)
def test_kernels_fall_in_the_class_their_name_says(name: str, expected: str) -> None:
    """cuDNN's, cuBLAS's and PyTorch's own kernel names, each in its class; a layout transpose cuDNN names after the
    conv is a transpose, an implicit-GEMM conv a conv, a cast kernel a copy."""
    assert gp.kernel_class(name) == expected


def test_busy_time_counts_overlapping_kernels_once() -> None:
    """Two kernels overlapping on two streams and one after a gap: 20 us busy, not 25."""
    assert gp.busy_us([(20.0, 25.0), (0.0, 10.0), (5.0, 15.0)]) == 20.0
    assert gp.busy_us([(0.0, 10.0), (2.0, 3.0)]) == 10.0
    assert gp.busy_us([]) == 0.0


def _event(name: str, start: float, end: float, cuda: bool) -> SimpleNamespace:
    return SimpleNamespace(
        name=name, device_type=DeviceType.CUDA if cuda else DeviceType.CPU,
        time_range=SimpleNamespace(start=start, end=end),
    )  # fmt: skip


def test_a_profile_is_summarised_per_step() -> None:
    """Two steps of 1 ms each: device busy from the union of its kernels, idle the rest, classes and syncs per step."""
    events = [
        _event("sm90_xmma_fprop_implicit_gemm", 0, 300, cuda=True),
        _event("void cudnn::bn_fw_tr_1C11_kernel_NCHW", 250, 400, cuda=True),  # overlaps the conv by 50 us
        _event("sm90_xmma_fprop_implicit_gemm", 1000, 1300, cuda=True),
        _event("cudaLaunchKernel", 0, 5, cuda=False),
        _event("cudaLaunchKernel", 10, 15, cuda=False),
        _event("cudaStreamSynchronize", 500, 900, cuda=False),
        _event("aten::convolution", 0, 20, cuda=False),
    ]
    out = gp.summarise(events, steps=2, wall_ms=2.0)
    assert out["profiled_step_ms"] == 1.0
    assert out["device_busy_ms"] == pytest.approx(0.35)  # (400 + 300) us over 2 steps
    assert out["device_idle_ms"] == pytest.approx(0.65)
    assert out["kernels"] == 1.5 and out["launches"] == 1.0 and out["aten_ops"] == 0.5
    assert out["classes"]["conv"] == {"ms": pytest.approx(0.3), "count": 1.0}
    assert out["classes"]["batch_norm"]["ms"] == pytest.approx(0.075)
    assert out["sync_ms"] == {"cudaStreamSynchronize": pytest.approx(0.2)}
    assert out["top"][0] == {"name": "sm90_xmma_fprop_implicit_gemm", "ms": pytest.approx(0.3)}


def test_the_dry_run_times_and_profiles_a_step_in_each_configuration(tmp_path: Path) -> None:
    """On the CPU: the environment's line, then one row per configuration with a timed step and the host's calls
    counted (no device, so no kernels)."""
    out = tmp_path / "profile.jsonl"
    configs = "sgd+momentum/amp_bf16,sgd+momentum/amp_fp16"
    assert gp.main(["--dry-run", "--configs", configs, "--out", str(out)]) == 0
    meta, *rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert "torch" in meta["meta"] and meta["meta"]["cpu_cores"] >= 1
    assert [r["config"] for r in rows] == configs.split(","), rows
    for r in rows:
        assert "error" not in r, r
        assert r["ms"] > 0 and r["profiled_step_ms"] > 0 and r["aten_ops"] > 10, r
        assert r["device_busy_ms"] == 0 and r["kernels"] == 0, r


def test_an_unknown_configuration_stops_before_anything_runs(tmp_path: Path) -> None:
    """A misspelt configuration is refused at once and nothing is written."""
    out = tmp_path / "none.jsonl"
    with pytest.raises(SystemExit):
        gp.main(["--dry-run", "--configs", "adamw/amp_fp8", "--out", str(out)])
    assert not out.exists()

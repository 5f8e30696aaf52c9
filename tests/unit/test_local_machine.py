"""`local` described by its device: a known GPU by data/gpus.csv, an unknown one by CUDA's report alone, a CPU."""

import csv
from types import SimpleNamespace

import pytest
import torch

from calibration import run as calibrate
from gpu_agent import environment
from shared import local_machine
from shared.machine_types import GPUS_CSV
from tests.support.standin_gpu import STANDIN_H100

FIGURES = {  # machine_types column → data/gpus.csv column
    "gpu_fp32_tflops": "fp32_tflops", "gpu_tf32_tflops": "tf32_tflops", "gpu_fp16_tflops": "fp16_tflops",
    "gpu_mem_bandwidth_gbs": "mem_bandwidth_gbs", "gpu_l2_mib": "l2_mib", "gpu_tdp_watts": "tdp_watts",
}  # fmt: skip


def csv_row(alias: str) -> dict[str, str]:
    """The data/gpus.csv row listing this alias, read here with the csv module alone."""
    with GPUS_CSV.open(newline="") as f:
        (row,) = [r for r in csv.DictReader(f) if alias in r["aliases"].split(";")]
    return row


def cuda_props(dev: torch.device) -> SimpleNamespace:
    """What torch.cuda.get_device_properties gives for the stand-in H100 (no CUDA here)."""
    assert dev == torch.device("cuda:0")
    return SimpleNamespace(**STANDIN_H100.__dict__)


def test_a_cuda_device_is_described_by_its_gpus_csv_row_and_cudas_report(monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent's CUDA path (properties patched in): gpus.csv's name and figures, CUDA's memory, SMs and capability."""
    monkeypatch.setattr(torch.cuda, "get_device_properties", cuda_props)
    described = environment.local_device(torch.device("cuda:0"))
    row = csv_row("NVIDIA H100 80GB HBM3")
    assert described.gpu == row["gpu"] == "H100-SXM5-80GB"
    assert described.gpu_memory_gib == round(81559 / 1024, 2)  # what CUDA reports, not the datasheet's 80
    assert (described.gpu_sm_count, described.gpu_compute_capability) == (132, "9.0")
    for column, key in FIGURES.items():
        assert getattr(described, column) == float(row[key]), column
    assert described.gpu_bf16 is True and row["source"] in (described.specs_source or "")
    assert described.device == "cuda:0 'NVIDIA H100 80GB HBM3'"


def test_names_match_whatever_their_case_spaces_or_underscores() -> None:
    """CUDA's name, any alias, or the catalog's own name, in any case, finds the same row; a MIG slice does not."""
    for name in ("NVIDIA H100 80GB HBM3", "nvidia_h100_80gb_hbm3", "H100-SXM5-80GB", " nvidia h100 80gb hbm3 "):
        assert (local_machine.gpu_row(name) or {}).get("gpu") == "H100-SXM5-80GB", name
    assert (local_machine.gpu_row("Tesla T4") or {}).get("gpu") == "T4"
    assert local_machine.gpu_row("NVIDIA H100 80GB HBM3 MIG 1g.10gb") is None


def test_a_geforce_board_brings_its_fp16_accumulate_rate() -> None:
    """An RTX 3090 under the local agent carries both FP16 tensor figures, so the reference costs it at full rate."""
    described = local_machine.gpu(
        device="cuda:0", cuda_name="NVIDIA GeForce RTX 3090", memory_bytes=24 * 2**30, sm_count=82,
        compute_capability="8.6",
    )  # fmt: skip
    assert described.gpu == "RTX-3090"
    assert (described.gpu_fp16_tflops, described.gpu_fp16_acc16_tflops) == (71, 142)


def test_an_unknown_gpu_keeps_only_what_cuda_reports() -> None:
    """No figures are made up: throughput, bandwidth, L2, power and bf16 stay empty."""
    described = local_machine.gpu(
        device="cuda:1", cuda_name="NVIDIA H100 80GB HBM3 MIG 3g.40gb", memory_bytes=40 * 2**30, sm_count=60,
        compute_capability="9.0",
    )  # fmt: skip
    assert described.gpu == "NVIDIA H100 80GB HBM3 MIG 3g.40gb" and described.gpu_memory_gib == 40
    assert (described.gpu_sm_count, described.gpu_compute_capability) == (60, "9.0")
    assert all(getattr(described, column) is None for column in FIGURES) and described.gpu_bf16 is None
    assert "not in data/gpus.csv" in (described.specs_source or "")


def test_a_cpu_is_described_without_a_gpu() -> None:
    """The agent on a CPU describes `local` as a CPU: no GPU, no figures."""
    described = environment.local_device(torch.device("cpu"))
    assert described.gpu is None and described.gpu_memory_gib is None and described.device.startswith("cpu ")


def test_a_plan_says_which_spread_it_spans() -> None:
    """The plan's description (the calibrate command's first line) names the GPU or CPU spread."""
    gpu = calibrate.Plan(machine_type="local", settings=calibrate.GPU_SETTINGS)
    cpu = calibrate.Plan(machine_type="local", settings=calibrate.CPU_SETTINGS)
    assert gpu.describe().endswith("224 px batch 8,32,128 (the GPU spread); sgd/fp32")
    assert "(the CPU spread)" in cpu.describe() and "spread" not in calibrate.Plan(machine_type="local").describe()

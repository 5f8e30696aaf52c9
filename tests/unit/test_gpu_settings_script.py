"""bench/gpu_settings.py, the GPU host's whole-step timer, run as its CPU dry run so it cannot rot before a GPU run."""

import json
from pathlib import Path

import pytest

from bench import gpu_settings


def test_the_crossed_configurations_time_a_step_each_in_the_default_setting(tmp_path: Path) -> None:
    """SGD with momentum under fp16 autocast (with its GradScaler) and AdamW under bf16: one row each, timed, in
    NCHW with cudnn.benchmark off only, after the environment's line."""
    out = tmp_path / "crossed.jsonl"
    configs = ",".join(gpu_settings.CROSSED)
    assert gpu_settings.main(["--dry-run", "--configs", configs, "--default-only", "--out", str(out)]) == 0
    meta, *rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert "torch" in meta["meta"] and meta["date"] and meta["meta"]["cpu_cores"] >= 1
    assert [r["config"] for r in rows] == list(gpu_settings.CROSSED)
    assert all(r["ms"] > 0 and not r["channels_last"] and not r["cudnn_benchmark"] for r in rows), rows


def test_an_unknown_configuration_stops_before_anything_runs(tmp_path: Path) -> None:
    """A misspelt configuration is refused at once, naming the known ones, and nothing is written."""
    out = tmp_path / "none.jsonl"
    with pytest.raises(SystemExit):
        gpu_settings.main(["--dry-run", "--configs", "adamw/amp_fp8", "--out", str(out)])
    assert not out.exists()

"""Bundles committed under data/measured/ join the reference's fit: their GPU steps, under the GPU's catalog name."""

import gzip
import json
from pathlib import Path

import pytest

from prediction.reference import fit, measured, step_rows, wholestep
from shared.measurements import bundle, environments

H100_STEPS = Path(__file__).resolve().parents[2] / "data" / "reference" / "h100" / "steps.jsonl"
GPU_ENV: dict[str, object] = {"device_type": "cuda", "gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11.0", "cudnn": 91900}
CPU_ENV: dict[str, object] = {"device_type": "cpu", "cpu": "x86", "torch": "2.14.1"}


def write_bundle(
    path: Path, steps: list[dict[str, object]], envs: tuple[dict[str, object], ...] = (GPU_ENV, CPU_ENV)
) -> None:
    """A bundle of whole steps as an export writes it (two environments: a GPU's and a CPU's)."""
    lines: list[dict[str, object]] = [
        {"kind": "header", "format": bundle.FORMAT, "version": bundle.VERSION, "source": "h100-host",
         "exported_at": "2026-11-27T09:00:00+00:00", "machine_types": []}
    ]  # fmt: skip
    body: list[dict[str, object]] = [
        {"kind": "environment", "hash": environments.digest(d), "details": d} for d in envs
    ]
    body += steps
    lines += [*body, {"kind": "end", "lines": len(body)}]
    path.write_bytes(gzip.compress(b"".join(json.dumps(x).encode() + b"\n" for x in lines)))


def step(cnn: str, batch: int, ms: float | None, env: dict[str, object], **extra: object) -> dict[str, object]:
    """One `step` line in sgd/fp32 at 224 px."""
    return {"kind": "step", "cnn_name": cnn, "machine_type": "local", "batch_size": batch, "image_size": 224,
            "optimizer": "sgd", "momentum": 0.0, "weight_decay": 0.0, "precision": "fp32", "channels_last": False,
            "cudnn_benchmark": False, "environment": environments.digest(env), "oom": ms is None, "step_ms": ms,
            "peak_memory_bytes": None, "stats": {}, "measured_at": "2026-11-25T10:00:00+00:00", **extra}  # fmt: skip


def test_gpu_steps_of_a_committed_bundle_join_the_fit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA steps become rows of the GPU data/gpus.csv names; CPU and out-of-memory steps stay out."""
    real = [json.loads(x) for x in H100_STEPS.read_text().splitlines()]
    real = [r for r in real if r["config"] == "sgd/fp32" and r["cnn"] == "resnet50" and "ms" in r][:3]
    steps = [step("resnet50", r["batch"], r["ms"], GPU_ENV) for r in real]
    steps += [step("resnet50", 512, None, GPU_ENV), step("resnet18", 16, 900.0, CPU_ENV)]
    write_bundle(tmp_path / "lab-h100.jsonl.gz", steps)
    monkeypatch.setattr(measured, "MEASURED", tmp_path)
    rows = measured.load_rows()
    assert [(r.gpu, r.cnn, r.batch, r.step_ms) for r in rows] == [
        ("H100-SXM5-80GB", "resnet50", r["batch"], r["ms"]) for r in real
    ]
    assert {r.set for r in rows} == {"measured:lab-h100"} and all(r.category == "headline" for r in rows)
    assert rows[0].training is not None and rows[0].training.cost_key() == "sgd/fp32" and not rows[0].autotuned
    gpus = fit.gpu_table()
    fitted = wholestep.fit_rows(gpus, [], lambda r: False)
    assert sum(r.set == "measured:lab-h100" for r in fitted) == len(real)
    assert tmp_path / "lab-h100.jsonl.gz" in fit.inputs()


def test_no_bundle_committed_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With data/measured/ empty, the fit reads no bundle."""
    monkeypatch.setattr(measured, "MEASURED", tmp_path)
    assert measured.load_rows() == [] and measured.files() == []


def test_a_family_s_own_constants_never_learn_another_gpu_s_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each GPU with steps of its own is a family of its own, fitted on the public rows and its own steps alone."""
    gpu_env = {**GPU_ENV, "gpu": "NVIDIA H200"}
    write_bundle(tmp_path / "lab-h200.jsonl.gz", [step("resnet50", 64, 30.0, gpu_env)], envs=(gpu_env,))
    monkeypatch.setattr(measured, "MEASURED", tmp_path)
    [h200] = measured.load_rows()
    h100 = next(r for r in step_rows.load_h100() if r.training is not None)
    public = next(r for r in wholestep.load_rows())
    assert h200.gpu == "H200-SXM-141GB" and h100.gpu == "H100-SXM5-80GB"
    assert wholestep.own_families([]) == ["H100", "H200"]
    ours = (*step_rows.H200_FILES, measured.SET_PREFIX)  # our H200 steps: bundles and data/reference/h200/
    assert wholestep.own_families([], leave_out=lambda r: r.set.startswith(ours)) == ["H100"]
    another = wholestep.of_another_gpu("H100")
    assert another(h200) and not another(h100) and not another(public)


def test_the_committed_bundles_conv_layers_join_the_conv_fit() -> None:
    """The H200's NCHW layers, fp32 and autocast (as amp_fp16), all three phases, in the conv model's table."""
    rows = measured.layer_rows()
    assert {(gpu, precision) for gpu, precision, *_ in rows} == {
        ("H200-SXM-141GB", "fp32"),
        ("H200-SXM-141GB", "amp_fp16"),
    }
    assert all(len(ms) == 3 and min(ms) > 0 for *_, ms in rows)
    table = fit.layer_table()
    ours = [i for i, s in enumerate(table.source) if s == "measured"]
    assert len(ours) == len(rows) and {table.gpu[i] for i in ours} == {"H200-SXM-141GB"}


def test_a_cnn_held_out_leaves_our_layers_of_its_shapes_out_of_the_conv_fit() -> None:
    """conv_without: only our own rows of a shape the CNN has (at any input size) are dropped; none, no refit."""
    import numpy as np

    from prediction.reference import layerfit

    spec = {"in_channels": 64, "out_channels": 64, "kernel": [3, 3], "stride": [1, 1], "groups": 1}
    other = {**spec, "out_channels": 128}
    shape = layerfit.layer_shape(spec)
    assert shape == layerfit.layer_shape({**spec, "in_h": 7, "in_w": 7}) != layerfit.layer_shape(other)
    matrix = layerfit.LayerMatrix(
        x=np.zeros((3, 3, 1)), roof=np.ones((3, 3)), ms=np.ones((3, 3)), gpu=np.array(["H200-SXM-141GB"] * 3),
        source=np.array(["measured", "measured", "deepbench"]), precision=np.array(["fp32"] * 3),
        shape=np.array([shape, layerfit.layer_shape(other), shape]),
    )  # fmt: skip
    assert matrix.ours_shaped_as({shape}).tolist() == [True, False, False]
    params = {"conv": {"forward": "kept"}, "depthwise": {"fp32": "kept"}}
    resnet18_has_none = layerfit.LayerMatrix(**{**matrix.__dict__, "shape": np.array(["1x1 k9x9 s9x9 g1"] * 3)})
    kept = fit.conv_without(resnet18_has_none, params, fit.gpu_table())("resnet18")
    assert kept["conv"] is params["conv"] and kept["depthwise"] is params["depthwise"]

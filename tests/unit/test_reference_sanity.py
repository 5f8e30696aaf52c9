"""Orderings every reference answer must keep, on the shipped model and every catalog GPU
(prediction/reference/sanity.py): autocast not slower than fp32 on tensor-core GPUs; a variant of a GPU model with at
least as much of every figure not slower; and the two settings people train with change the answer."""

from prediction.reference import load, sanity, step_rows
from prediction.reference.specs import GpuSpecs


def test_the_shipped_model_keeps_every_ordering_on_every_catalog_gpu() -> None:
    rows = sanity.table(load(), sanity.catalog_gpus())
    assert len(rows) >= 10 and sanity.violations(rows) == []


def test_an_ordering_that_breaks_is_named() -> None:
    """A table where the better-endowed variant is slower, or autocast loses to fp32, is caught."""
    good = {label: 1000.0 for label in sanity.SETTINGS}
    slow_amp = {**good, "amp_fp16 NCHW": 500.0}
    rows = [sanity.Row("A100-SXM4-80GB", {**good, "fp32 NHWC": 900.0}), sanity.Row("A100-SXM4-40GB", good),
            sanity.Row("T4", slow_amp)]  # fmt: skip
    found = sanity.violations(rows)
    assert any(v.startswith("A100-SXM4-80GB (fp32 NHWC)") for v in found), found
    assert any(v.startswith("T4: amp_fp16 NCHW") for v in found), found
    assert sanity.dominates(sanity.gpu_rows()["A100-SXM4-80GB"], sanity.gpu_rows()["A100-SXM4-40GB"])
    # More bandwidth but less power and tensor peak: no order between an H100 NVL and an H100 SXM.
    specs = sanity.gpu_rows()
    assert not sanity.dominates(specs["H100-NVL-94GB"], specs["H100-SXM5-80GB"])
    assert not sanity.dominates(specs["H100-SXM5-80GB"], specs["H100-NVL-94GB"])


def test_channels_last_and_cudnn_benchmark_change_the_answer_as_our_h100_measured() -> None:
    """On the H100 the settings were measured on (data/reference/h100/steps_settings.jsonl): ResNet-50 at batch 256 in
    each configuration, the predicted NHWC / NCHW and benchmark-on / off step ratios against the measured ones."""
    from prediction.reference.wholestep import network

    convs, work = network("resnet50", 224)
    gpu = GpuSpecs.from_row(sanity.gpu_rows()["H100-SXM5-80GB"])
    model = load()
    settings = [r for r in step_rows.load_h100() if r.set == step_rows.SETTINGS_SET]
    rows = [r for r in settings if r.cnn == "resnet50" and r.batch == 256]
    assert rows, "the settings run measured resnet50 at batch 256"
    default = {r.training.precision: r for r in rows if r.training and not r.training.channels_last
               and not r.training.cudnn_benchmark}  # fmt: skip
    checked = 0
    for r in rows:
        assert r.training is not None
        base = default[r.training.precision]
        if r is base:
            continue
        [tuned] = model.predict_steps(convs=convs, workload=work, batch_sizes=[256], gpu=gpu, training=r.training)
        [plain] = model.predict_steps(convs=convs, workload=work, batch_sizes=[256], gpu=gpu, training=base.training)
        measured, predicted = r.step_ms / base.step_ms, tuned.step_ms / plain.step_ms
        # NHWC: 0.56-0.73x measured; within 20% of it. cudnn.benchmark alone: 0.99-1.00x; within 5%.
        assert abs(predicted / measured - 1) < (0.2 if r.training.channels_last else 0.05), (r.training, predicted)
        if r.training.channels_last:
            assert predicted < 0.85  # the setting changes the answer, in the measured direction
        checked += 1
    assert checked == 9  # 3 configurations x (NHWC, benchmark, both)

"""Orderings every reference answer must keep, on the shipped model and every catalog GPU
(prediction/reference/sanity.py): autocast not slower than fp32 on tensor-core GPUs; a variant of a GPU model with at
least as much of every figure not slower; and the two settings people train with change the answer."""

from prediction.reference import load, sanity, step_rows
from prediction.reference.specs import GpuSpecs


def test_the_shipped_model_keeps_every_ordering_on_every_gpu_it_knows() -> None:
    """Every GPU of data/gpus.csv, the catalog's and those only a user's own machine type names (an H200, an RTX
    5090): each is answered by the constants its family gets, its own where our steps of it were fitted."""
    known = sorted(sanity.gpu_rows())
    assert set(sanity.catalog_gpus()) <= set(known)
    rows = sanity.table(load(), known)
    assert len(rows) >= 40 and sanity.violations(rows) == []


def test_a_gpu_with_constants_of_its_own_still_gets_the_settings_effect() -> None:
    """Our H200's constants are its own, fitted on its steps in the default setting alone: channels_last and
    cudnn.benchmark change its answers by the multipliers the shared constants learnt (what every GPU without
    steps in those settings gets), not by nothing."""
    from prediction.reference.stepfit import SETTINGS_NAMES
    from prediction.reference.wholestep import network

    model = load()
    h200, a100 = (GpuSpecs.from_row(sanity.gpu_rows()[g]) for g in ("H200-SXM-141GB", "A100-SXM4-80GB"))
    own, shared = model.constants(h200), model.constants(a100)
    assert own != shared, "the H200 has constants of its own"
    assert {k: own[k] for k in SETTINGS_NAMES} == {k: shared[k] for k in SETTINGS_NAMES}
    convs, work = network("resnet50", 224)
    for config in sanity.SETTINGS.values():
        if config.channels_last:
            continue
        [plain], [nhwc], [tuned] = (
            model.predict_steps(convs=convs, workload=work, batch_sizes=[256], gpu=h200, training=t)
            for t in (config, *(config.model_copy(update={k: True}) for k in ("channels_last", "cudnn_benchmark")))
        )
        assert nhwc.step_ms < 0.9 * plain.step_ms, (config, nhwc.step_ms, plain.step_ms)
        if config.precision == "fp32":  # the only precision whose benchmark-on steps searched (0.97-1.00x)
            assert tuned.step_ms < plain.step_ms, (config, tuned.step_ms, plain.step_ms)


def test_an_ordering_that_breaks_is_named() -> None:
    """A table where the better-endowed variant is slower, or autocast loses to fp32, is caught."""
    good: dict[str, float | None] = {label: 1000.0 for label in sanity.SETTINGS}
    slow_amp: dict[str, float | None] = {**good, "amp_fp16 NCHW": 500.0}
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
    """The predicted step ratio of a setting to the default against the measured one on the H100: NHWC from the
    settings run (ResNet-50 at batch 256, each configuration), cudnn.benchmark from the team's steps with a real
    search (steps_cudnn_benchmark_on.jsonl at batch 128, where the device sets the step, over steps.jsonl's). The
    settings run's benchmark-on rows are not evidence of the setting: they reused the plans of the benchmark-off
    step before them (data/reference/h100/README.md)."""
    from prediction.reference.wholestep import network

    gpu = GpuSpecs.from_row(sanity.gpu_rows()["H100-SXM5-80GB"])
    model = load()
    rows = step_rows.load_h100()

    def ratio(r: step_rows.StepRow, base: step_rows.StepRow) -> tuple[float, float]:
        """(predicted, measured) step of r over base."""
        convs, work = network(r.cnn, r.image_size)
        assert r.training is not None and base.training is not None
        [tuned], [plain] = (
            model.predict_steps(convs=convs, workload=work, batch_sizes=[r.batch], gpu=gpu, training=t.training)
            for t in (r, base)
        )
        return tuned.step_ms / plain.step_ms, r.step_ms / base.step_ms

    settings = [r for r in rows if r.set == step_rows.SETTINGS_SET and r.cnn == "resnet50" and r.batch == 256]
    # The loader keeps none of this run's benchmark-on rows: every row here is NCHW or NHWC with it off.
    default = {r.precision: r for r in settings if r.training and not r.training.channels_last}
    nhwc = [r for r in settings if r.training and r.training.channels_last]
    assert len(nhwc) == 3, "the settings run measured resnet50 at batch 256 in NHWC in each configuration"
    for r in nhwc:
        predicted, measured = ratio(r, default[r.precision])
        # 0.56-0.73x measured; within 20% of it, and in the measured direction.
        assert abs(predicted / measured - 1) < 0.2 and predicted < 0.85, (r.training, predicted, measured)
    plain = {(r.cnn, r.batch): r for r in rows if r.set == step_rows.SET and r.precision == "fp32"}
    searched = [r for r in rows if r.set == step_rows.CUDNN_SET and r.batch == 128]
    assert len(searched) == 5, "the team's benchmark-on steps: 5 CNNs at batch 128"
    for r in searched:
        predicted, measured = ratio(r, plain[(r.cnn, r.batch)])
        # 0.97-1.00x measured; within 5%.
        assert abs(predicted / measured - 1) < 0.05, (r.cnn, predicted, measured)

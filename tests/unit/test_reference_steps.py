"""The reference's whole-step model: host dispatch against device work, its fit, and each point's error figures."""

import json

import numpy as np
import pytest

from prediction.reference import load, point_errors, step_rows, stepfit, wholestep
from prediction.reference.steps import (
    DEVICE_PARTS,
    StepParts,
    linear_ms,
    linear_weights,
    overlap,
    parameter_tensors,
    smooth_max,
    step_parts,
)
from prediction.reference.wholestep import network
from shared.cnn.workload import OpTotalsJson, WorkloadJson
from shared.training import TrainConfig


def test_overlap_without_sync_is_the_smooth_max_of_host_and_device() -> None:
    """No GradScaler: the host runs ahead of the whole step, so the step is about max(host, device)."""
    device, opt, host_pass, host_opt = np.array([10.0, 1.0]), np.array([1.0, 1.0]), np.array([2.0, 30.0]), np.ones(2)
    step, dev, host = overlap(device, opt, host_pass, host_opt, np.zeros(2, dtype=bool), 8.0)
    assert dev.tolist() == [11.0, 2.0] and host.tolist() == [3.0, 31.0]
    expected = [(a**8 + b**8) ** (1 / 8) for a, b in zip(host, dev, strict=True)]
    assert step == pytest.approx(expected)
    assert (step >= np.maximum(host, dev)).all() and (step <= np.maximum(host, dev) * 1.01).all()


def test_gradscaler_sync_adds_the_optimizer_after_the_overlap() -> None:
    """GradScaler reads its inf check back: the optimizer's host and device work come after the overlapped passes."""
    args = (np.array([10.0]), np.array([4.0]), np.array([2.0]), np.array([3.0]))
    free, _, _ = overlap(*args, np.array([False]), 8.0)
    synced, _, _ = overlap(*args, np.array([True]), 8.0)
    assert synced[0] == pytest.approx(float(smooth_max(np.array([2.0]), np.array([10.0]), 8.0)[0]) + 3.0 + 4.0)
    assert synced[0] > free[0]


def test_fit_recovers_the_constants_that_made_the_rows() -> None:
    """Rows made from known constants (host- and device-bound, every group and optimizer) are fitted back closely."""
    rng = np.random.default_rng(3)
    truth = dict(stepfit.PRIORS)
    truth.update(host_kernel_ms=0.09, host_cast_factor=1.8, smooth_max_q=6.0)
    truth.update({f"dev_conv_tensor_{g}": s for g, s in (("fp32", 1.4), ("bf16", 1.1), ("fp16", 1.3))})
    n = 240
    # device work from far below the host's dispatch time to far above it
    work = rng.uniform(0.05, 10, (n, 5)) * rng.choice([0.2, 1, 6], (n, 1))
    rows = stepfit.Rows(
        device=np.column_stack([work, rng.integers(5, 120, n)]),
        optimizer_ms=rng.uniform(0.05, 3, n), kernels=rng.integers(20, 700, n).astype(float),
        casts=rng.integers(0, 130, n).astype(float), tensors=rng.integers(10, 400, n).astype(float),
        group=rng.integers(0, 3, n), passes=rng.choice([1.0, 3.0, 8.0, 10.0], n), synced=rng.random(n) < 0.3,
        autotuned=np.zeros(n, dtype=bool), nhwc=np.zeros(n, dtype=bool), measured=np.ones(n), weight=np.ones(n),
    )  # fmt: skip
    made, _, host = stepfit.predict(rows, truth)
    rows = stepfit.Rows(**{**vars(rows), "measured": made})
    fitted = stepfit.fit(rows)
    again, _, _ = stepfit.predict(rows, fitted)
    assert np.mean(np.abs(again - made) / made) < 0.02
    assert 20 < (host > made * 0.9).sum() < n - 20  # host-bound and device-bound rows were part of it
    assert fitted["host_kernel_ms"] == pytest.approx(0.09, rel=0.15)


def test_settings_multipliers_are_learnt_from_ratios_to_the_same_run() -> None:
    """channels_last and cudnn.benchmark multipliers come back from steps in those settings over the same steps in
    the default setting, even where the base constants are off by a per-row factor the ratios cancel."""
    rng = np.random.default_rng(5)
    n = 150
    work = rng.uniform(0.5, 10, (n, 5)) * rng.choice([0.5, 4], (n, 1))  # host-bound and device-bound rows
    common = dict(
        device=np.column_stack([work, rng.integers(5, 120, n)]), optimizer_ms=rng.uniform(0.05, 3, n),
        kernels=rng.integers(20, 700, n).astype(float), casts=np.zeros(n), tensors=rng.integers(10, 400, n) * 1.0,
        group=rng.integers(0, 3, n), passes=np.full(n, 1.0), synced=np.zeros(n, dtype=bool),
        measured=np.ones(n), weight=np.ones(n),
    )  # fmt: skip
    tuned = rng.random(n) < 0.5
    nhwc = ~tuned | (rng.random(n) < 0.5)
    base = stepfit.Rows(**common, autotuned=np.zeros(n, dtype=bool), nhwc=np.zeros(n, dtype=bool))
    setting = stepfit.Rows(**common, autotuned=tuned, nhwc=nhwc)
    p = dict(stepfit.PRIORS)
    truth = {**p, "nhwc_conv_tensor_fp32": 0.7, "nhwc_conv_tensor_bf16": 0.6, "nhwc_conv_tensor_fp16": 0.6,
             "nhwc_other_fp32": 0.8, "nhwc_other_bf16": 0.7, "nhwc_other_fp16": 0.7}  # fmt: skip
    truth.update({f"dev_conv_autotuned_{g}": 0.9 for g in ("fp32", "bf16", "fp16")})
    drift = rng.uniform(0.8, 1.25, n)  # what the base model gets wrong per row, the same in both settings
    base = stepfit.Rows(**{**vars(base), "measured": stepfit.predict(base, p)[0] * drift})
    setting = stepfit.Rows(**{**vars(setting), "measured": stepfit.predict(setting, truth)[0] * drift})
    fitted = stepfit.fit_settings(setting, base, p)
    assert fitted["nhwc_conv_tensor_fp32"] == pytest.approx(0.7, rel=0.1)
    assert fitted["nhwc_other_fp16"] == pytest.approx(0.7, rel=0.15)
    assert fitted["dev_conv_autotuned_bf16"] == pytest.approx(0.9, rel=0.08)
    assert set(fitted) == set(stepfit.SETTINGS_NAMES)  # the rest keep NCHW's cost (1x)


def test_a_layer_list_workload_without_counts_still_gets_host_terms() -> None:
    """Workloads that count no kernels or parameter tensors (JSON layer lists) fall back to their operators."""
    ops: dict[str, OpTotalsJson] = {
        "conv": {"count": 3, "flops": 1e8, "bytes": 1e6},
        "batch_norm": {"count": 2, "flops": 1, "bytes": 1e5},
    }
    work: WorkloadJson = {"ops": ops, "parameters": 1000, "parameter_tensors": None}
    assert parameter_tensors(work) == 2 * (3 + 2)
    model = load()
    from prediction.reference.fit import gpu_table

    gpu = gpu_table()["T4"]
    spec = {"in_channels": 3, "out_channels": 8, "in_h": 32, "in_w": 32, "kernel": [3, 3], "stride": [1, 1],
            "padding": [1, 1], "dilation": [1, 1], "groups": 1, "bias": False}  # fmt: skip
    for training in (TrainConfig(), TrainConfig(optimizer="adamw", precision="amp_fp16")):
        est = model.predict_steps(convs=[(spec, 3)], workload=work, batch_sizes=[1, 64], gpu=gpu, training=training)
        assert all(np.isfinite(e.step_ms) and e.host_ms > 0 for e in est)


def test_step_parts_count_the_kernels_the_extractor_saw() -> None:
    """The host term reads the kernels traced at extraction (clones of in-place activations included)."""
    convs, work = network("mobilenet_v2", 224)
    parts: StepParts = step_parts(
        np.zeros((1, 3, 3)), work, np.array([8.0]), load_gpu(), TrainConfig(), load().params["step"]
    )
    assert parts.kernels == work["kernels"] > sum(v["count"] for v in work["ops"].values())
    assert parts.device.shape == (1, len(DEVICE_PARTS)) and parts.casts == 0 and not parts.synced
    amp = step_parts(np.zeros((1, 3, 3)), work, np.array([8.0]), load_gpu(), TrainConfig(precision="amp_fp16"), {
        **load().params["step"]})  # fmt: skip
    assert amp.casts == work["ops"]["conv"]["count"] + work["ops"]["linear"]["count"] and amp.synced


def load_gpu():  # type: ignore[no-untyped-def]
    """The H100 SXM's figures."""
    from prediction.reference.fit import gpu_table

    return gpu_table()[step_rows.GPU]


ACCURACY = {
    "whole_step_mape": 20.0, "whole_step_log_ratio_p10": -0.2, "whole_step_log_ratio_p90": 0.5,
    "h100": {"family": "H100", "by_group_regime": {
        "bf16": {"host": {"mape": 11.0, "band_low": -0.1, "band_high": 0.3},
                 "device": {"mape": 9.0, "band_low": -0.15, "band_high": 0.2}},
    }},
}  # fmt: skip


def test_each_point_quotes_its_kind_and_other_gpus_no_better_than_the_public_figure() -> None:
    """H100 points quote their precision group's and regime's held-out figures; other GPUs the worse of the two."""
    bound = np.array([True, False])
    on_h100 = point_errors(ACCURACY, precision="amp_bf16", launch_bound=bound, gpu="H100-SXM5-80GB")
    assert on_h100.mape.tolist() == [11.0, 9.0] and on_h100.low.tolist() == [-0.1, -0.15]
    assert on_h100.high.tolist() == [0.3, 0.2]
    on_h200 = point_errors(ACCURACY, precision="amp_bf16", launch_bound=bound, gpu="H200-SXM-141GB")
    assert on_h200.mape.tolist() == [11.0, 9.0]  # same chip
    on_t4 = point_errors(ACCURACY, precision="amp_bf16", launch_bound=bound, gpu="T4")
    assert on_t4.mape.tolist() == [20.0, 20.0] and on_t4.low.tolist() == [-0.2, -0.2]
    assert on_t4.high.tolist() == [0.5, 0.5]
    unmeasured_group = point_errors(ACCURACY, precision="fp32", launch_bound=bound, gpu="H100-SXM5-80GB")
    assert unmeasured_group.mape.tolist() == [20.0, 20.0]
    # With held-out bands per precision, another GPU's autocast point quotes the autocast band, fp32 the fp32 one.
    bands = {"fp32": {"mape": 8.0, "band_low": -0.1, "band_high": 0.12},
             "amp": {"mape": 14.0, "band_low": -0.2, "band_high": 0.25}}  # fmt: skip
    with_bands = {**ACCURACY, "whole_step_bands": bands}
    amp = point_errors(with_bands, precision="amp_bf16", launch_bound=bound, gpu="T4")
    assert amp.mape.tolist() == [14.0, 14.0] and amp.low.tolist() == [-0.2, -0.2]
    assert amp.high.tolist() == [0.3, 0.25]  # the H100's host-bound band is wider on the high side
    fp32 = point_errors(with_bands, precision="fp32", launch_bound=bound, gpu="T4")
    assert fp32.mape.tolist() == [8.0, 8.0] and fp32.high.tolist() == [0.12, 0.12]


def test_the_committed_model_was_scored_on_the_h100_steps_per_configuration() -> None:
    """model.json holds the leave-one-CNN-out figures of every configuration of data/reference/h100/."""
    own = load().accuracy["h100"]
    configs = {json.loads(line)["config"] for line in step_rows.STEPS.read_text().splitlines()}
    assert set(own["by_config"]) == configs and configs < set(step_rows.CONFIGS)
    rows = len([r for r in step_rows.load_h100(settings=False) if r.batch in step_rows.GRID])
    assert sum(v["rows"] for v in own["by_config"].values()) == rows
    # Every step in another setting is scored too, as the setting's effect on the same run's default step.
    pairs = wholestep.setting_pairs(step_rows.load_h100(), fallback=step_rows.SET)
    assert pairs and sum(v["rows"] for v in own["settings"].values()) == len(pairs)
    # cudnn.benchmark is scored on the team's steps that searched (SGD fp32), not on the settings run's repeats.
    assert set(own["settings"]) == {f"channels_last {c}" for c in configs} | {"nchw+cudnn_benchmark sgd/fp32"}
    for kinds in own["by_group_regime"].values():
        for kind in kinds.values():
            assert kind["band_low"] < kind["band_high"] and kind["rows"] >= 3 and kind["mape"] > 0


def test_benchmark_on_steps_that_reused_the_default_plans_are_left_out() -> None:
    """The settings run's cudnn.benchmark rows did not search: none reaches the fit; its other rows and the team's
    benchmark-on steps (a process of their own) do."""
    rows = step_rows.load_h100()
    settings = [r for r in rows if r.set == step_rows.SETTINGS_SET]
    lines = [json.loads(line) for line in step_rows.SETTINGS_FILES[step_rows.SETTINGS_SET].read_text().splitlines()]
    kept = [r for r in lines if "ms" in r and not r["cudnn_benchmark"]]
    assert len(kept) < len([r for r in lines if "ms" in r]) and len(settings) == len(kept)
    assert not any(r.autotuned for r in settings) and any(r.training and r.training.channels_last for r in settings)
    searched = [r for r in rows if r.set == step_rows.CUDNN_SET]
    assert searched and all(r.autotuned and r.training and r.training.cudnn_benchmark for r in searched)


def test_repeatability_pairs_the_same_default_step_of_two_runs_and_nothing_else() -> None:
    """A step measured in both runs gives |a - b| over each run; a setting's step, or one in a single run, none."""
    from prediction.reference.h100 import repeatability
    from prediction.reference.step_rows import CONFIGS, GPU, SET, SETTINGS_SET, StepRow

    fp32 = CONFIGS["sgd/fp32"]
    nhwc = fp32.model_copy(update={"channels_last": True})

    def row(run: str, cnn: str, batch: int, ms: float, config: TrainConfig = fp32) -> StepRow:
        return StepRow(run, GPU, cnn, 224, batch, config.precision, "pytorch", config.optimizer, "fwd+bwd+opt", ms,
                       False, config, autotuned=False)  # fmt: skip

    rows = [
        row(SET, "resnet18", 32, 10.0), row(SETTINGS_SET, "resnet18", 32, 12.5),
        row(SET, "vgg11", 32, 20.0), row(SETTINGS_SET, "vgg11", 32, 20.0),
        row(SETTINGS_SET, "resnet18", 32, 7.0, nhwc),  # a setting's step: no pair
        row(SET, "alexnet", 128, 5.0),  # one run only
    ]  # fmt: skip
    got = repeatability(rows)
    assert list(got) == ["sgd/fp32"] and list(got["sgd/fp32"]) == [32]
    entry = got["sgd/fp32"][32]
    assert sorted(entry["pairs"]) == [["resnet18", 10.0, 12.5], ["vgg11", 20.0, 20.0]]
    assert entry["mape"] == pytest.approx((25.0 + 20.0 + 0.0 + 0.0) / 4)
    assert entry["largest"] == pytest.approx(25.0)


def test_ratios_of_another_machine_teach_what_these_rows_never_swap() -> None:
    """Rows with no fp16 step learn fp16's costs from another machine's fp16 / bf16 ratios alone: its absolute times
    (a host twice as fast) are not fitted, the ratios are."""
    rng = np.random.default_rng(5)
    truth = dict(stepfit.PRIORS)
    truth.update({"dev_conv_tensor_fp16": 0.5, "dev_other_fp16": 0.7, "dev_conv_calls_fp16": 0.01})

    def rows_of(group: np.ndarray, work: np.ndarray, scale: float = 1.0) -> stepfit.Rows:
        n = len(group)
        rows = stepfit.Rows(
            device=np.column_stack([work, np.full(n, 50.0)]), optimizer_ms=np.full(n, 0.5),
            kernels=np.full(n, 300.0), casts=np.full(n, 40.0), tensors=np.full(n, 160.0), group=group,
            passes=np.full(n, 3.0), synced=np.zeros(n, dtype=bool), autotuned=np.zeros(n, dtype=bool),
            nhwc=np.zeros(n, dtype=bool), measured=np.ones(n), weight=np.ones(n),
        )  # fmt: skip
        made, _, _ = stepfit.predict(rows, truth)
        return stepfit.Rows(**{**vars(rows), "measured": made * scale})

    n = 40
    work = rng.uniform(0.5, 40, (n, 5))
    own = rows_of(rng.integers(0, 2, n), work)  # fp32 and bf16 only
    pair_work = rng.uniform(0.5, 40, (20, 5))
    changed = rows_of(np.full(20, 2), pair_work, scale=0.5)  # fp16, on a machine whose steps all take half as long
    reference = rows_of(np.full(20, 1), pair_work, scale=0.5)

    def ratio_error(p: dict[str, float]) -> float:
        a, _, _ = stepfit.predict(changed, p)
        b, _, _ = stepfit.predict(reference, p)
        return float(np.mean(np.abs(np.log(a / b) - np.log(changed.measured / reference.measured))))

    without = stepfit.fit(own)
    taught = stepfit.fit(own, ratios=(changed, reference))
    assert ratio_error(taught) < 0.02 < ratio_error(without)
    assert taught["dev_conv_tensor_fp16"] < 0.75 < without["dev_conv_tensor_fp16"]
    # the own rows are still fitted as well as without the ratios
    for p in (without, taught):
        got, _, _ = stepfit.predict(own, p)
        assert np.mean(np.abs(got / own.measured - 1)) < 0.02


def test_a_linear_at_every_position_reads_its_weights_once_not_its_flops() -> None:
    """ConvNeXt's MLPs run a linear at each of 56 x 56 positions: their FLOPs per sample are 2 x weights x positions,
    so taking weights as FLOPs / 2 (right for a classifier's one vector per sample) read ~4e9 weights a pass and made
    the 16-bit linear time the same 14 ms at every batch size. Now its weights are at most the network's parameters,
    its time grows with the batch, and a classifier's linear (VGG's, ResNet's) is costed as before."""
    from prediction.reference.fit import gpu_table

    gpu = gpu_table()[step_rows.GPU].filled()
    c = load().constants(gpu)
    batch = np.array([16.0, 256.0])
    _, convnext = network("convnext_tiny", 224)
    weights = linear_weights(convnext)
    assert convnext["parameters"] is not None
    assert weights == convnext["parameters"] < convnext["ops"]["linear"]["flops"] / 2 / 100
    small, large = linear_ms(convnext, batch, gpu, "amp_bf16", c)
    assert large > 8 * small  # activations and FLOPs, which grow with the batch, set it: not the weights
    # at batch 16 no more than its FLOPs at the fitted peak and its bytes at the fitted bandwidth, together
    assert gpu.fp16_tflops is not None
    flops = convnext["ops"]["linear"]["flops"] * 16 * 3 / (gpu.fp16_tflops * 1e12 * c["linear_efficiency"])
    nbytes = (convnext["ops"]["linear"]["bytes"] * 16 / 2 + 4 * weights) * 3
    assert small <= (flops + nbytes / (gpu.mem_bandwidth_gbs * 1e9 * c["memory_efficiency"])) * 1e3 + 1.0
    for name in ("vgg16", "resnet50", "alexnet"):  # one vector per sample: weights = FLOPs / 2, as always
        _, work = network(name, 224)
        assert linear_weights(work) == work["ops"]["linear"]["flops"] / 2


def test_bf16_and_fp16_linears_share_what_either_group_s_steps_show() -> None:
    """Linear work in bf16 steps only, made 1.6x its uncalibrated time: fp16's linear multiplier follows bf16's
    (the same cuBLAS rate over the same bytes) instead of staying near its prior for want of rows."""
    rng = np.random.default_rng(5)
    truth = {**stepfit.PRIORS, "dev_linear_bf16": 1.6, "dev_linear_fp16": 1.6}
    n = 180
    group = rng.integers(0, 3, n)
    work = rng.uniform(0.5, 10, (n, 5)) * 4
    work[:, 4] = np.where(group == 1, rng.uniform(5, 40, n), 0.0)  # only bf16 rows have linear work
    rows = stepfit.Rows(
        device=np.column_stack([work, rng.integers(5, 60, n)]), optimizer_ms=rng.uniform(0.05, 1, n),
        kernels=rng.integers(20, 200, n).astype(float), casts=np.zeros(n), tensors=rng.integers(10, 100, n) * 1.0,
        group=group, passes=np.full(n, 3.0), synced=np.zeros(n, dtype=bool), autotuned=np.zeros(n, dtype=bool),
        nhwc=np.zeros(n, dtype=bool), measured=np.ones(n), weight=np.ones(n),
    )  # fmt: skip
    made, _, _ = stepfit.predict(rows, truth)
    fitted = stepfit.fit(stepfit.Rows(**{**vars(rows), "measured": made}))
    assert fitted["dev_linear_bf16"] == pytest.approx(1.6, rel=0.1)
    assert fitted["dev_linear_fp16"] == pytest.approx(fitted["dev_linear_bf16"], rel=0.1)

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


def test_a_timing_counts_by_the_bytes_it_really_moves() -> None:
    """A bf16 tensor is half the bytes of its fp32 count: one whose real bytes are under MIN_BYTES is left out (its
    launch and timing floor would read as passes), one over it counts, as an fp32 tensor of the same real bytes."""
    count = 1.5 * op_passes.MIN_BYTES  # fp32 bytes: 0.75x MIN_BYTES really moved in bf16
    relu = [("relu", 4 * count, 1.0, 1.5)] * 5
    floored = [("relu", count, 0.25, 1.0)] * 20  # the backward's floor: 5 passes where the large ones take 2.5
    assert op_passes.passes(relu + floored) == {"activation": pytest.approx(5.0)}
    assert op_passes.passes(relu + floored, scale=0.5) == {"activation": pytest.approx(2.5)}
    got = op_passes.by_variant(measured.files(), gpu_table())
    # the H200's largest bf16 activations pass over their bytes about as often as fp32's
    assert got["bf16"]["activation"] < 1.25 * got["fp32"]["activation"]


def test_the_committed_bundles_measure_batch_norm_and_pooling_above_activations() -> None:
    """The H200's operators: batch norm's and max pooling's kernels pass over memory far more than a ReLU's, in fp32
    and in autocast's bf16; without the GPUs' figures the model's constants are fp32's, for the fp32 and fp16 groups
    only."""
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


def test_the_bundles_name_the_bandwidth_per_sm_cycle_of_the_gpu_they_timed() -> None:
    """Given the GPUs' figures, the constants say the H200's memory bandwidth per SM cycle (4.8 TB/s over 132 SMs at
    1.98 GHz: about 18 bytes), which scales the passes on every other GPU."""
    gpus = gpu_table()
    constants = op_passes.from_bundles(measured.files(), gpus)
    h200 = gpus["H200-SXM-141GB"]
    assert constants["passes_bytes_per_cycle"] == pytest.approx(op_passes.bytes_per_cycle(h200))
    assert constants["passes_bytes_per_cycle"] == pytest.approx(4800e9 / (132 * 1.98e9), rel=0.02)


def test_effective_passes_keep_the_reference_scale_the_excess_and_never_fall_below_the_ideal() -> None:
    """On the GPU they were timed on the passes are as measured; where memory is slower per SM cycle the part beyond
    the ideal shrinks in proportion, down to the ideal; a kind without an ideal keeps its measured passes."""
    gpus = gpu_table()
    ref = op_passes.bytes_per_cycle(gpus["H200-SXM-141GB"])
    assert op_passes.effective_passes("batch_norm", 8.0, gpus["H200-SXM-141GB"], ref) == pytest.approx(8.0)
    a100 = gpus["A100-SXM4-40GB"]
    share = op_passes.bytes_per_cycle(a100) / ref
    assert 0.4 < share < 0.7
    assert op_passes.effective_passes("batch_norm", 8.0, a100, ref) == pytest.approx(max(4.0, 8.0 * share))
    l4 = gpus["L4"]  # 300 GB/s for 58 SMs at 2 GHz: the ideal
    assert op_passes.effective_passes("batch_norm", 8.0, l4, ref) == op_passes.IDEAL_PASSES["batch_norm"]
    assert op_passes.effective_passes("softmax_loss", 5.0, l4, ref) == 5.0
    assert op_passes.effective_passes("batch_norm", 8.0, l4, None) == 8.0


def test_more_bandwidth_on_the_same_sms_does_not_speed_up_work_the_sms_bound() -> None:
    """An A100 80GB has 31% more bandwidth than the 40GB on the same SMs and clock: batch norm (SM-bound on both at
    the H200's passes) takes as long on either, the uniform rule's bytes-bound cost would be 24% shorter; never
    longer with more bandwidth."""
    gpus = gpu_table()
    work = {"ops": {"batch_norm": {"count": 0, "bytes": 4e7, "flops": 0.0}}}
    batch = np.array([64.0])
    c = dict(STEP_DEFAULTS, memory_efficiency=0.8, passes_batch_norm_fp32=8.0)
    ref = {**c, "passes_bytes_per_cycle": op_passes.bytes_per_cycle(gpus["H200-SXM-141GB"])}

    def ms(gpu: str, constants: dict) -> float:
        return float(steps.other_ms(work, batch, gpus[gpu], "fp32", constants)[0])  # type: ignore[arg-type]

    assert ms("A100-SXM4-80GB", ref) == pytest.approx(ms("A100-SXM4-40GB", ref), rel=1e-9)
    assert ms("A100-SXM4-80GB", c) == pytest.approx(ms("A100-SXM4-40GB", c) * 1555 / 2039)
    for slow, fast in (("V100-PCIE-16GB", "V100-SXM2-16GB"), ("H100-PCIE-80GB", "H100-SXM5-80GB")):
        assert ms(fast, ref) <= ms(slow, ref)


def test_bf16_takes_its_own_timings_only_where_they_are_scaled() -> None:
    """bf16's kernels are not fp32's: with the GPUs' figures (and so the scaling) bf16 gets the passes its own
    operators were timed to, without them it keeps the uniform rule; fp32's never stand in for bf16."""
    got = op_passes.by_variant(measured.files(), gpu_table())
    scaled = op_passes.from_bundles(measured.files(), gpu_table())
    assert {k: v for k, v in scaled.items() if k.startswith("passes_") and k.endswith("_bf16")} == {
        f"passes_{k}_bf16": v for k, v in got["bf16"].items()
    }
    assert not any(k.endswith("_bf16") for k in op_passes.from_bundles(measured.files()))


def test_fp16_takes_bf16s_timings_for_every_kind_but_batch_norm() -> None:
    """PyTorch runs fp16 and bf16 through one elementwise, pooling and concat template, but fp16 batch norm (fp32
    weights, autocast's case) through cuDNN as fp32, bf16's through its own kernels: fp16 reads bf16's passes for
    every kind bf16 timed but batch norm, fp32's for batch norm, and nothing where bf16 has nothing (both groups
    then keep the uniform rule)."""
    got = op_passes.by_variant(measured.files(), gpu_table())
    scaled = op_passes.from_bundles(measured.files(), gpu_table())
    fp16 = {k.removeprefix("passes_").removesuffix("_fp16"): v for k, v in scaled.items() if k.endswith("_fp16")}
    assert fp16["batch_norm"] == got["fp32"]["batch_norm"] != got["bf16"]["batch_norm"]
    assert {k: v for k, v in fp16.items() if k != "batch_norm"} == {
        k: v for k, v in got["bf16"].items() if k != "batch_norm"
    }
    assert set(fp16) == set(got["bf16"]) | {"batch_norm"}


def test_fp16_and_bf16_cost_alike_but_batch_norm() -> None:
    """In the step model an fp16 ReLU, max pool or concat costs what a bf16 one does; an fp16 batch norm less (the
    H200's crossed steps: fp16 took what bf16 did in CNNs without batch norm, 0.7-0.9x in those with it)."""
    constants = {**STEP_DEFAULTS, "memory_efficiency": 0.8, **op_passes.from_bundles(measured.files(), gpu_table())}
    gpu = gpu_table()["H200-SXM-141GB"]
    batch = np.array([64.0])

    def ms(kind: str, precision: str) -> float:
        work = {"ops": {kind: {"count": 0, "bytes": 4e7, "flops": 0.0}}}
        return float(steps.other_ms(work, batch, gpu, precision, constants)[0])  # type: ignore[arg-type]

    for kind in ("activation", "pooling", "concat", "elementwise"):
        assert ms(kind, "amp_fp16") == pytest.approx(ms(kind, "amp_bf16"))
    assert ms("batch_norm", "amp_fp16") < 0.6 * ms("batch_norm", "amp_bf16")


def test_autocast_runs_layer_norms_in_fp32_batch_norms_in_16_bits() -> None:
    """A layer norm (a normalisation the workload does not list as a batch norm over 4-d maps) costs the same under
    either 16-bit autocast: its fp32 time plus the casts of its input and output (torch.amp's fp32 list), more than
    in fp32 alone; a batch norm keeps its 16-bit bytes and each group's own passes."""
    constants = {**STEP_DEFAULTS, "memory_efficiency": 0.8, **op_passes.from_bundles(measured.files(), gpu_table())}
    gpu = gpu_table()["H200-SXM-141GB"].filled()
    batch = np.array([64.0])
    layer = {"ops": {"batch_norm": {"count": 4, "bytes": 4e7, "flops": 0.0}}, "batch_norm_channels": []}
    batch_norm = {**layer, "batch_norm_channels": [[200, 6_250, 4]]}  # 4 x 2 x 200 x 6,250 x 4 bytes = 4e7

    def ms(work: dict, precision: str) -> float:
        return float(steps.other_ms(work, batch, gpu, precision, constants)[0])  # type: ignore[arg-type]

    fp32 = ms(layer, "fp32")
    assert ms(layer, "amp_bf16") == pytest.approx(ms(layer, "amp_fp16"))
    bw = gpu.mem_bandwidth_gbs * 1e9 * 0.8
    casts = 4e7 * 64 * steps.AMP_NORM_CAST_PASSES / bw * 1e3 + 4 * steps.AMP_NORM_CASTS * constants["kernel_floor_ms"]
    assert ms(layer, "amp_bf16") == pytest.approx(fp32 + casts)
    assert ms(batch_norm, "fp32") == pytest.approx(fp32)  # fp32: a norm is a norm
    assert ms(batch_norm, "amp_fp16") < 0.6 * fp32 < ms(batch_norm, "amp_bf16")
    # a workload that lists no batch norms at all (a layer list) keeps every norm a batch norm
    assert ms({"ops": layer["ops"]}, "amp_fp16") == pytest.approx(ms(batch_norm, "amp_fp16"))


def _norms_ms(channels: int, spatial: int, gpu_name: str = "H200-SXM-141GB", nhwc: bool = False) -> float:
    """other_ms of one training batch norm (channels x spatial per sample) at batch 256, the committed constants."""
    gpu = gpu_table()[gpu_name].filled()
    c = {**STEP_DEFAULTS, "memory_efficiency": 0.75, **op_passes.from_bundles(measured.files(), gpu_table())}
    work = {
        "ops": {"batch_norm": {"count": 1, "bytes": 2.0 * channels * spatial * 4, "flops": 0.0}},
        "batch_norm_channels": [[channels, spatial, 1]],
    }
    return float(steps.other_ms(work, np.array([256.0]), gpu, "fp32", c, nhwc)[0])  # type: ignore[arg-type]


def test_the_bundles_time_a_channels_reduction_in_sm_cycles_per_element() -> None:
    """The H200's batch norms over few channels: a few SM cycles per element of one channel, forward and backward."""
    cycles = op_passes.channel_cycles(measured.files(), gpu_table())
    assert cycles is not None and 2.0 < cycles < 8.0
    assert op_passes.channel_cycles(measured.files(), {}) is None  # no GPU's figures: no clock to count cycles by


def test_a_batch_norm_over_fewer_channels_than_sms_takes_as_long_as_its_elements_per_channel() -> None:
    """As the H200 timed them: 16 and 64 channels of 112x112 take about the same (not a quarter); past the SMs,
    bytes set the time again; NHWC kernels, which reduce many channels per block, pay bytes only."""
    few, more = _norms_ms(16, 112 * 112), _norms_ms(64, 112 * 112)
    assert more == pytest.approx(few, rel=0.1)
    assert _norms_ms(1024, 14 * 14) < _norms_ms(16, 112 * 112)  # 4x the bytes of 16 channels at 112x112
    assert _norms_ms(16, 112 * 112, nhwc=True) < few / 3
    # a GPU with fewer SMs fills them with fewer channels: the T4's 40 SMs bring 64 channels to their bytes' time
    assert _norms_ms(64, 56 * 56, "T4") / _norms_ms(16, 56 * 56, "T4") > 1.5


def test_past_the_sms_a_batch_norm_costs_its_bytes_not_whole_waves_of_channels() -> None:
    """With every SM busy the H200 took 1.1-1.6x less than whole waves of channels one after another: 140 and 264
    channels (both two waves on its 132 SMs) cost in proportion to their bytes."""
    assert _norms_ms(264, 56 * 56) / _norms_ms(140, 56 * 56) == pytest.approx(264 / 140, rel=0.01)  # + launch floors


def test_batch_norms_bytes_law_is_read_where_the_sms_are_all_busy() -> None:
    """Batch norm's passes come from the timings over as many channels as SMs or more (fewer: the channels' law);
    without the GPUs' figures (no SM count, no channels' law) from them all."""
    gpus = gpu_table()
    everything = op_passes.by_variant(measured.files())["fp32"]["batch_norm"]
    busy = op_passes.by_variant(measured.files(), gpus)["fp32"]["batch_norm"]
    assert busy < 0.9 * everything
    assert op_passes.from_bundles(measured.files(), gpus)["passes_batch_norm_fp32"] == busy
    kept = [row for path in measured.files() for _g, _v, row in op_passes.op_rows(path, gpus)]
    assert kept and len(kept) < len([row for path in measured.files() for _g, _v, row in op_passes.op_rows(path)])


def test_the_batch_norm_law_follows_the_bundles_own_timings() -> None:
    """The H200's fp32 batch norms (large tensors, 16 to 2048 channels) against the law with the committed
    constants, one common scale taken out (memory efficiency is the public operators'): within 20% on average (28%
    when whole waves of channels were costed one after another and the bytes' passes read from every timing)."""
    gpus = gpu_table()
    gpu = gpus["H200-SXM-141GB"].filled()
    c = {**STEP_DEFAULTS, "memory_efficiency": 0.75, **op_passes.from_bundles(measured.files(), gpus)}
    ratios = []
    for _gpu, row, spec, forward_ms in op_passes._timed_ops(measured.files()[0]):
        shape = spec.get("shape") or []
        training = spec.get("args", {}).get("grad") is not False
        if row.variant != "fp32" or spec["op"] != "batch_norm" or len(shape) != 3 or not training:
            continue
        channels, spatial = int(shape[0]), int(shape[1]) * int(shape[2])
        if 8.0 * channels * spatial * row.batch_size < op_passes.MIN_BYTES:
            continue
        work = {
            "ops": {"batch_norm": {"count": 0, "bytes": 8.0 * channels * spatial, "flops": 0.0}},
            "batch_norm_channels": [[channels, spatial, 1]],
        }
        law = float(steps.other_ms(work, np.array([float(row.batch_size)]), gpu, "fp32", c)[0])  # type: ignore[arg-type]
        ratios.append(law / (forward_ms + (row.backward_ms or 0.0)))
    assert len(ratios) > 50
    scaled = np.array(ratios) / np.median(ratios)
    assert np.mean(np.abs(scaled - 1)) < 0.2


def test_a_workload_counts_its_training_batch_norms_channels_and_map_sizes() -> None:
    """resnet18 at 224 px: the stem's 64 channels at 112x112 once, layer1's four at 56x56, ... 20 in all."""
    from shared.cnn import zoo

    norms = zoo.conv_layers("resnet18", 224).workload["batch_norm_channels"]
    assert [64, 112 * 112, 1] in norms and [64, 56 * 56, 4] in norms and [512, 7 * 7, 5] in norms
    assert sum(n for _, _, n in norms) == 20


def test_bf16_batch_norms_over_few_channels_take_their_own_cycles_fp16_takes_fp32s() -> None:
    """bf16's batch norms are PyTorch's kernels: over few channels the H200 took about 1.3x fp32's time for the same
    batch norm, so bf16's channels' law runs at fp32's cycles times that; fp16's (cuDNN's, as fp32's) at fp32's."""
    gpus = gpu_table()
    c = op_passes.from_bundles(measured.files(), gpus)
    ratio = op_passes.channel_ratio(measured.files(), gpus)
    assert ratio is not None and 1.1 < ratio < 1.6
    assert c["batch_norm_channel_cycles_bf16"] == pytest.approx(c["batch_norm_channel_cycles"] * ratio)
    assert op_passes.channel_ratio(measured.files(), {}) is None  # no SM count: no pair is known to be channel-bound
    gpu = gpus["H200-SXM-141GB"].filled()
    work = {"batch_norm_channels": [[32, 112 * 112, 1]]}
    batch = np.array([128.0])

    def law(group: str) -> float:
        return float(steps.channel_bound_ms(work, batch, gpu, 0.0, c, group)[0])  # type: ignore[arg-type]

    assert law("bf16") == pytest.approx(law("fp32") * ratio)
    assert law("fp16") == law("fp32")

"""Our H200 steps: the optimizer and precision crossed, loaded beside the H100's and scored as pairs of one run."""

import json

import pytest

from prediction.reference import step_rows
from prediction.reference.h200 import PAIRS, summarise
from prediction.reference.step_rows import CONFIGS, H200_FILES, H200_GPU, StepRow


def test_the_h200_steps_load_in_five_configurations_each_cnn_in_every_one() -> None:
    """Every measured line of the H200 files is a row of the H200 in a known configuration, none dropped."""
    rows = [r for r in step_rows.load_own() if r.set in H200_FILES]
    lines = [json.loads(line) for path in H200_FILES.values() for line in path.read_text().splitlines()]
    assert len(rows) == len([x for x in lines if "ms" in x]) > 300
    assert {r.gpu for r in rows} == {H200_GPU}
    assert {x["config"] for x in lines if "config" in x} == set(CONFIGS)
    for r in rows:
        assert r.training == CONFIGS[next(k for k, v in CONFIGS.items() if v == r.training)]
    # each (run, CNN, batch) was timed in all five, so every pair is measured in one run
    seen: dict[tuple[str, str, int], int] = {}
    for r in rows:
        seen[(r.set, r.cnn, r.batch)] = seen.get((r.set, r.cnn, r.batch), 0) + 1
    assert set(seen.values()) == {len(CONFIGS)}
    assert not [r for r in step_rows.load_h100() if r.gpu != step_rows.GPU]


def _row(run: str, cnn: str, batch: int, config: str, ms: float) -> StepRow:
    c = CONFIGS[config]
    return StepRow(run, H200_GPU, cnn, 224, batch, c.precision, "pytorch", c.optimizer, "fwd+bwd+opt", ms, False, c,
                   autotuned=False)  # fmt: skip


def test_pairs_compare_the_ratio_within_one_run_and_configurations_by_batch_regime() -> None:
    """A pair's error is that of the predicted ratio against the measured one; rows of two runs never pair."""
    sgd_bf16, sgd_fp16 = "sgd+momentum/amp_bf16", "sgd+momentum/amp_fp16"
    rows = [
        _row("a", "resnet18", 16, sgd_bf16, 10.0), _row("a", "resnet18", 16, sgd_fp16, 12.0),
        _row("a", "resnet18", 256, sgd_bf16, 40.0), _row("a", "resnet18", 256, sgd_fp16, 30.0),
        _row("b", "vgg11", 16, sgd_fp16, 9.0),  # its bf16 step is in run "a": no pair
        _row("a", "vgg11", 16, sgd_bf16, 8.0),
    ]  # fmt: skip
    predicted = {id(rows[0]): 10.0, id(rows[1]): 10.0, id(rows[2]): 44.0, id(rows[3]): 33.0,
                 id(rows[4]): 9.0, id(rows[5]): 8.0}  # fmt: skip
    got = summarise(rows, predicted)
    pair = got["pairs"][f"{sgd_fp16} / {sgd_bf16}"]
    assert pair["rows"] == 2
    # measured 1.2 and 0.75, predicted 1.0 and 0.75
    assert pair["ratio_mape"] == pytest.approx((abs(1.0 / 1.2 - 1) * 100 + 0.0) / 2)
    assert pair["measured_mean"] == pytest.approx((1.2 + 0.75) / 2)
    assert got["by_config"][sgd_bf16] == {"mape_small": pytest.approx(0.0), "mape_large": pytest.approx(10.0)}
    assert got["by_config"][sgd_fp16]["mape_small"] == pytest.approx((abs(10 / 12 - 1) * 100 + 0.0) / 2)
    assert all(got["pairs"][f"{a} / {b}"]["rows"] == 0 for a, b in PAIRS[1:])
    # signed, per CNN and configuration: resnet18's bf16 steps 0% and +10% too slow, its fp16 ones -16.7% and +10%
    assert got["by_cnn"]["resnet18"][sgd_bf16] == pytest.approx(5.0)
    assert got["by_cnn"]["resnet18"][sgd_fp16] == pytest.approx((10 / 12 - 1 + 0.1) * 50)
    assert got["by_cnn"]["vgg11"] == {sgd_bf16: pytest.approx(0.0), sgd_fp16: pytest.approx(0.0)}


def test_the_committed_model_was_scored_on_the_h200_steps_in_every_configuration() -> None:
    """model.json holds the H200's leave-one-CNN-out figures for all five configurations and the three pairs."""
    from prediction.reference import load

    own = load().accuracy["h200"]
    rows = [r for r in step_rows.load_own() if r.set in H200_FILES]
    assert own["rows"] == len(rows) and set(own["by_config"]) == set(CONFIGS)
    assert all(own["pairs"][f"{a} / {b}"]["rows"] > 50 for a, b in PAIRS)
    assert set(own["by_cnn"]) == {r.cnn for r in rows}


def test_the_h100_as_a_gpu_nobody_measured_and_what_our_h200_steps_add() -> None:
    """The H100 as a GPU nobody measured: constants fitted on the public rows alone predict its steps within 7.5%
    where the device sets the step (batch 128-256; 8.3% before operators' passes were read by the bytes really
    moved), what public rows, timed at large batches, can teach; where the host sets it they teach no host cost (24%
    off at batch 16-64). Fitted on them and our H200's steps (optimizer and precision crossed): closer overall, closer
    where the host sets the step, in fp32 too, and where the device sets it nowhere more than a point worse."""
    from prediction.reference import load
    from prediction.reference.fit import gpu_table
    from prediction.reference.h200 import transfer

    model, gpus = load(), gpu_table()
    alone = transfer(model, gpus, step_rows.GPU, other_too=False)
    taught = transfer(model, gpus, step_rows.GPU, other_too=True)
    assert set(alone) == set(taught) == {(g, small) for g in ("fp32", "bf16", "fp16") for small in (True, False)}

    def mape(errs: dict[tuple[str, bool], list[float]], small: bool | None = None, group: str | None = None) -> float:
        got = [e for (g, s), v in errs.items() if small in (None, s) and group in (None, g) for e in v]
        return sum(got) / len(got)

    assert mape(alone, False) < 7.5
    assert mape(taught) < mape(alone)
    assert mape(taught, True) < mape(alone, True)
    assert mape(taught, True, "fp32") < mape(alone, True, "fp32")
    for group in ("fp32", "bf16", "fp16"):
        assert mape(taught, False, group) < mape(alone, False, group) + 1.0, group


def test_the_h100_answers_the_swapped_configurations_as_the_h200_measured_them() -> None:
    """Our H100 never ran SGD in fp16 nor AdamW in bf16; its own constants learnt what swapping one of them does from
    the H200's same-run ratios, so its answers at batch 16-64 swap as those steps did (geometric mean within 3.5%;
    constants fitted on its own steps alone were 4.6-5.5% off, fp16 taken for slower than bf16)."""
    import numpy as np

    from prediction.reference import load
    from prediction.reference.fit import gpu_table
    from prediction.reference.step_rows import config_name, crossed_pairs
    from prediction.reference.wholestep import network

    model, gpu = load(), gpu_table()[step_rows.GPU]
    pairs = [
        (r, d) for r, d in crossed_pairs([r for r in step_rows.load_own() if r.set in H200_FILES]) if r.batch <= 64
    ]
    for changed, reference in PAIRS:
        logs = []
        for r, d in ((r, d) for r, d in pairs if (config_name(r), config_name(d)) == (changed, reference)):
            convs, work = network(r.cnn, r.image_size)
            a, b = (
                model.predict_steps(convs=convs, workload=work, batch_sizes=[r.batch], gpu=gpu, training=x.training)[0]
                for x in (r, d)
            )
            logs.append(np.log(a.step_ms / b.step_ms) - np.log(r.step_ms / d.step_ms))
        assert len(logs) > 40 and abs(np.exp(np.mean(logs)) - 1) < 0.035, (changed, np.exp(np.mean(logs)))

"""Calibration: the CNN sets and image sizes, completeness within one environment, infeasible steps."""

import pytest
import torchvision

from calibration import run as calibrate
from cli.admin import calibration_plan
from cli.main import build_parser
from cli.main import main as traincast
from shared.cnn import zoo as cnn_zoo
from shared.core.db import one, transaction
from shared.core.errors import TraincastError
from shared.core.settings import get_settings
from shared.training import TrainConfig
from tests.support.agentkit import rows
from tests.support.jobflow import drain_agent_queue

FAMILIES = {
    "plain": {"alexnet", "vgg"},
    "residual": {"resnet"},
    "dense": {"densenet"},
    "depthwise": {"mobilenetv3", "shufflenetv2", "efficientnet", "mnasnet"},
    "inverted residual": {"mobilenetv2"},
}


def family_modules(names: tuple[str, ...]) -> set[str]:
    """The torchvision module each CNN is defined in: its architecture family."""
    return {torchvision.models.get_model_builder(n).__module__.rsplit(".", 1)[-1] for n in names}


def test_cnn_sets_cover_the_families_and_cpus_get_a_smaller_image() -> None:
    """The default set spans the families; the full set has 15+ CNNs; a CPU machine type calibrates at 112 px."""
    default = family_modules(calibrate.DEFAULT_CNNS)
    assert {f: bool(default & modules) for f, modules in FAMILIES.items()} == dict.fromkeys(FAMILIES, True)
    assert len(set(calibrate.FULL_CNNS)) >= 15 and len(family_modules(calibrate.FULL_CNNS)) >= 10
    assert calibrate.default_image_size("local") == calibrate.CPU_IMAGE_SIZE < calibrate.GPU_IMAGE_SIZE
    assert calibrate.default_image_size("g5.xlarge") == calibrate.GPU_IMAGE_SIZE
    for name in calibrate.DEFAULT_CNNS:
        assert cnn_zoo.conv_layers(name, calibrate.CPU_IMAGE_SIZE).total > 0
        for size, _ in calibrate.CPU_SETTINGS:  # every CNN of the default set runs at every default size
            assert cnn_zoo.conv_layers(name, size).total > 0


def test_calibration_is_complete_in_one_environment_and_reports_infeasible_steps(
    clean_db: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Infeasible steps count as done and are reported; rows of another environment do not complete a plan."""
    # What is stored matters here, not how quiet the machine was while timing it.
    monkeypatch.setenv("BENCH_QUIET_WAIT", "inf")
    get_settings.cache_clear()
    with transaction() as cur:
        cur.execute("TRUNCATE step_failures")
    plan = calibrate.Plan(machine_type="local", cnns=("resnet18", "squeezenet1_1"), batch_sizes=(1, 2), image_size=32)
    sig_ids, steps = calibrate.send(plan)
    drain_agent_queue()
    done, needed = calibrate.progress(plan, sig_ids)
    # Conv layers and whole steps at both batch sizes; each op too, and each CNN's optimizer step once.
    read = [cnn_zoo.conv_layers(cnn, 32).ops for cnn in plan.cnns]
    op_points = sum(2 - (op.op == "optimizer") for op in {op for ops in read for op in ops})
    assert done == needed == (len(sig_ids) + 2) * 2 + op_points and steps == 4
    (failure,) = calibrate.failures(plan)
    assert (failure["cnn_name"], failure["batch_size"]) == ("resnet18", 1)

    # One layer row moved to another environment leaves the agent's environment one short.
    with transaction() as cur:
        cur.execute("INSERT INTO environments (hash, details) VALUES ('other', '{}') RETURNING id")
        other = one(cur)["id"]
        cur.execute(
            "UPDATE layer_benchmarks SET environment_id = %s WHERE id = (SELECT min(id) FROM layer_benchmarks)",
            (other,),
        )
    assert calibrate.progress(plan, sig_ids) == (needed - 1, needed)
    calibrate.send(plan)
    assert drain_agent_queue() > 0
    assert calibrate.progress(plan, sig_ids) == (needed, needed)
    assert len(rows("SELECT id FROM layer_benchmarks")) == len(sig_ids) * 2 + 1

    args = ["calibrate", "--machine", "local", "--cnns", "resnet18,squeezenet1_1", "--batch-sizes", "1,2"]
    assert traincast([*args, "--image-size", "32", "--timeout", "5"]) == 0
    out = capsys.readouterr().out
    assert "model local v" in out
    assert "not measurable: resnet18 at batch size 1: Expected more than 1 value per channel" in out
    monkeypatch.undo()
    get_settings.cache_clear()


def test_calibration_without_an_agent_says_so(clean_db: None) -> None:
    """A calibration that cannot progress names the missing agent instead of just timing out."""
    plan = calibrate.Plan(machine_type="g4dn.xlarge", cnns=("squeezenet1_1",), batch_sizes=(1,), image_size=32)
    with pytest.raises(TraincastError, match="no agent for g4dn.xlarge is alive"):
        calibrate.run(plan, timeout_s=0)


def test_calibrate_flags_name_the_plan(clean_db: None, capsys: pytest.CaptureFixture[str]) -> None:
    """No size flags: the machine type's spread; --image-size/--batch-sizes: their grid; --configs: several."""
    args = build_parser().parse_args(["calibrate", "--machine", "local"])
    assert calibration_plan(args).grid() == calibrate.CPU_SETTINGS
    assert calibration_plan(args).every_config() == (TrainConfig(),)
    args = build_parser().parse_args(
        ["calibrate", "--machine", "local", "--image-size", "32,48", "--batch-sizes", "2,4", "--precision", "amp_bf16",
         "--configs", "sgd,adamw", "--configs", "sgd+momentum/fp32"]
    )  # fmt: skip
    plan = calibration_plan(args)
    assert plan.grid() == ((32, (2, 4)), (48, (2, 4)))
    assert [c.cost_key() for c in plan.every_config()] == ["sgd/amp_bf16", "adamw+wd/amp_bf16", "sgd+momentum/fp32"]
    assert traincast(["calibrate", "--machine", "local", "--configs", "lion"]) == 1
    assert traincast(["calibrate", "--machine", "local", "--image-size", "big"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "lion" in err[0] and "--image-size 'big'" in err[1]


def test_one_calibration_measures_every_setting_and_configuration(
    clean_db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two image sizes × two configurations: every unit's steps are stored, a model per configuration learns
    from both sizes and is scored with an image size held out."""
    monkeypatch.setenv("BENCH_QUIET_WAIT", "inf")
    get_settings.cache_clear()
    configs = (TrainConfig(), calibrate.config_from_key("adamw"))
    plan = calibrate.Plan(
        machine_type="local", cnns=("resnet18", "squeezenet1_1"), settings=((32, (2,)), (48, (2, 4))), configs=configs
    )
    sent = calibrate.send_units(plan)
    assert len(sent) == 4
    drain_agent_queue()
    done, needed = calibrate.progress_of(sent)
    assert done == needed > 0
    stored = rows("SELECT image_size, batch_size, optimizer FROM step_measurements")
    assert {(r["image_size"], r["batch_size"], r["optimizer"]) for r in stored} == {
        (s, b, o) for s, bs in plan.grid() for b in bs for o in ("sgd", "adamw")
    }
    models = calibrate.run(plan, timeout_s=5)
    assert [m["cost_key"] for m in models] == ["sgd/fp32", "adamw+wd/fp32"]
    for model in models:
        ev = model["evaluation"]
        assert ev["image_sizes"] == [32, 48] and ev["rows"] == 6
        assert set(ev["sizes"]["model"]["groups"]) == {f"{c} @ {s} px" for c in plan.cnns for s in (32, 48)}
        assert model["params"]["interval"]["image_sizes"] == [32, 48]
    monkeypatch.undo()
    get_settings.cache_clear()

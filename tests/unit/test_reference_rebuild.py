"""The shipped reference model is what its data and command give: the inputs it records are the files in the repo,
and refitting its whole-step constants from them gives the committed ones (the conv models are refitted by the
documented command, python -m prediction.reference.fit, which rewrites model.json byte for byte)."""

import json

import pytest

from prediction.reference import fit
from prediction.reference.model import MODEL_JSON, ReferenceModel

# The step fit is a nonlinear least squares that is flat along a few constants: on another CPU (other vector units,
# so other summation orders in numpy and OpenBLAS) the same data and code land up to 0.07% apart (seen between two
# x86 machines); 0.2% allows for that.
REL = 2e-3


def committed() -> dict:
    return json.loads(MODEL_JSON.read_text())


def test_model_json_records_the_inputs_libraries_and_command_it_was_fitted_with() -> None:
    """Its input digest is that of today's data files: a data change without a refit fails here."""
    shipped = committed()["provenance"]
    now = fit.provenance()
    assert shipped["command"] == fit.COMMAND == "python -m prediction.reference.fit"
    assert shipped["inputs"] == now["inputs"], "data/ changed since model.json was fitted: run " + fit.COMMAND
    assert shipped["inputs_sha256"] == now["inputs_sha256"]
    assert {"numpy", "scipy", "lightgbm", "python"} <= set(shipped["libraries"])
    assert any(name.endswith("steps_settings.jsonl") for name in shipped["inputs"])  # our H100 settings run


def test_refitting_the_whole_step_constants_gives_the_committed_ones() -> None:
    """From the committed conv model and the data files, the step fit (both stages) lands on model.json's constants."""
    params = committed()
    gpus = fit.gpu_table()
    step = fit.base_step(gpus)
    model = ReferenceModel({**params, "step": step, "step_families": {}})
    shared, families = fit.fit_steps(model, gpus)
    step.update(shared)
    rounded = fit._round(step)
    for name, value in params["step"].items():
        assert rounded[name] == pytest.approx(value, rel=REL), name
    assert set(rounded) == set(params["step"])
    # The families with steps of our own: our H100's, and the H200 of data/measured/.
    assert set(families) == set(params["step_families"]) == {"H100", "H200"}
    for family, constants in fit._round(families).items():
        assert constants == pytest.approx(params["step_families"][family], rel=REL), family

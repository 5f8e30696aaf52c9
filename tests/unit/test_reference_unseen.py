"""data/reference/unseen_steps.csv stays what bench/unseen_gpus.py says it is: public steps of GPUs that no fit of
the reference reads, so scoring the shipped model on them is scoring it on GPUs it never saw."""

from prediction.reference import fit, measured, step_rows, wholestep
from prediction.reference.data import gpu_rows
from prediction.reference.specs import family_of


def test_unseen_steps_are_of_known_gpus_none_of_which_any_fit_reads() -> None:
    unseen = wholestep.load_rows(wholestep.UNSEEN_STEPS)
    gpus = {r.gpu for r in unseen}
    assert len(unseen) >= 20 and len(gpus) >= 7, "the file holds the Lambda runs of seven GPUs"
    assert gpus <= {r["gpu"] for r in gpu_rows()}, "each is a GPU of data/gpus.csv, answered from its figures"
    fitted = [*wholestep.load_rows(), *step_rows.load_own(), *measured.load_rows()]
    seen = {family_of(r.gpu) for r in fitted}
    assert not {family_of(g) for g in gpus} & seen, "no family of theirs has a row any fit reads"
    assert wholestep.UNSEEN_STEPS not in fit.inputs(), "the fit does not read the file"
    assert not any(r.input_bound for r in unseen), "step-only timings (the loader's wait outside them)"

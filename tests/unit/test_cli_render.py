"""The CLI's result table: a point that does not fit shows no time or cost; the network between machines
is named."""

from typing import Any

from cli import render


def point(batch: int, *, fits: bool, seconds: float) -> dict[str, Any]:
    """A one-GPU point with times and a cost."""
    return {
        "cnn": "resnet50", "machine": "g4dn.xlarge", "batch_size": batch, "source": "benchmarked",
        "fits_in_memory": fits, "iteration_seconds": seconds, "epoch_seconds": seconds * 5000,
        "total_seconds": seconds * 450_000, "cost_usd": seconds * 66.0, "energy_kwh": 1.5, "gpus_used": 1,
        "nodes": 1, "peak_memory_gib": 20.0 if not fits else 9.0, "layer_environments": [1], "measured_on": [],
    }  # fmt: skip


def test_out_of_memory_rows_have_no_time_cost_or_energy() -> None:
    """resnet50 at 256 on a T4: "out of memory" and dashes, not a cheaper-looking cost than the batch that fits."""
    job = {"result": {"predictions": [point(128, fits=True, seconds=0.8), point(256, fits=False, seconds=1.2)],
                      "best": [], "models": {}}}  # fmt: skip
    lines = render.result(job).splitlines()
    [fits] = [line for line in lines if line.startswith("resnet50") and " 128 " in line]
    [oom] = [line for line in lines if line.startswith("resnet50") and " 256 " in line]
    assert "$" in fits and "kWh" in fits
    assert oom.split("out of memory")[1].split()[:4] == ["-", "-", "-", "-"], oom  # epoch, total, cost, energy


def test_the_network_between_machines_is_named_with_where_it_comes_from() -> None:
    """Two-machine points: one line per machine type with the Gbit/s used, the job's flag or the catalog's."""
    two = point(64, fits=True, seconds=0.5) | {"nodes": 2, "global_batch_size": 128, "internode_gbps": 5.0}
    one = point(64, fits=True, seconds=0.4)
    result = {"predictions": [one, two], "best": [], "models": {}}
    flagged = render.result({"request": {"internode_gbps": 5.0}, "result": result}).splitlines()
    assert "between machines on g4dn.xlarge: 5 Gbit/s (--internode-gbps)" in flagged
    catalog = render.result({"request": {}, "result": result}).splitlines()
    assert "between machines on g4dn.xlarge: 5 Gbit/s (the catalog's network)" in catalog
    alone = render.result({"result": {"predictions": [one], "best": [], "models": {}}})
    assert "between machines" not in alone


def test_ddps_losses_are_said_and_whether_replicas_wait() -> None:
    """Multi-GPU points: a line says what the scaling counts besides the all-reduce; stragglers only when decoded."""
    losses = {"bucket_copies": 0.4, "contention": 0.1, "stragglers": 0.0}
    eight = point(64, fits=True, seconds=0.5) | {"gpus_used": 8, "global_batch_size": 512, "ddp_losses_ms": losses}
    memory = render.result({"result": {"predictions": [eight], "best": [], "models": {}}})
    assert "bucket copies" in memory and "counted only where images are decoded (--input)" in memory
    decoded = eight | {"ddp_losses_ms": losses | {"stragglers": 12.0}}
    said = render.result({"result": {"predictions": [decoded], "best": [], "models": {}}})
    assert "wait for the slowest replica (images decoded)" in said and "--input" not in said
    alone = render.result({"result": {"predictions": [point(64, fits=True, seconds=0.5)], "best": [], "models": {}}})
    assert "bucket copies" not in alone


def test_the_all_reduce_line_names_only_what_several_gpus_assume() -> None:
    """A job with one-GPU points ("none") and 8-GPU ring points says "ring"; a one-GPU job says nothing of it."""
    one = point(64, fits=True, seconds=0.4) | {"allreduce_algorithm": "none"}
    eight = point(64, fits=True, seconds=0.5) | {"gpus_used": 8, "global_batch_size": 512}
    eight["allreduce_algorithm"] = "ring"
    lines = render.result({"result": {"predictions": [one, eight], "best": [], "models": {}}}).splitlines()
    assert "all-reduce assumed: ring" in lines
    alone = render.result({"result": {"predictions": [one], "best": [], "models": {}}})
    assert "all-reduce assumed" not in alone


def test_a_best_choice_says_its_layout_in_words() -> None:
    """Where layouts differ, a best choice names its GPUs and nodes: one GPU, 8 GPUs of one node, 8 GPUs x 2 nodes."""
    choice = {"batch_size": 256, "total_seconds": 3600.0, "cost_usd": 10.0, "source": "reference"}
    assert render._on(choice | {"gpus": 1, "nodes": 1}, True) == " on one GPU"
    assert render._on(choice | {"gpus": 8, "nodes": 1}, True) == " on 8 GPUs of one node"
    assert render._on(choice | {"gpus": 8, "nodes": 2}, True) == " on 8 GPUs x 2 nodes"
    assert render._on(choice | {"gpus": 1, "nodes": 4}, True) == " on one GPU x 4 nodes"
    assert render._on(choice | {"gpus": 8, "nodes": 2}, False) == ""


def test_a_type_with_fewer_gpus_than_asked_says_which_counts_it_was_not_answered_for() -> None:
    """gpus 1 and 8 over a 1-GPU and an 8-GPU type: one line for the 1-GPU type, none for the other."""
    small = point(64, fits=True, seconds=0.4)
    big = [point(64, fits=True, seconds=0.4) | {"machine": "p4d.24xlarge", "gpus_used": g} for g in (1, 8)]
    job = {"request": {"gpus": [1, 8]}, "result": {"predictions": [small, *big], "best": [], "models": {}}}
    lines = render.result(job).splitlines()
    assert "g4dn.xlarge: not answered for gpus 8 (it has fewer GPUs)" in lines
    assert not any(line.startswith("p4d.24xlarge: not answered") for line in lines)
    assert "not answered" not in render.result(job | {"request": {"gpus": 8}})


def test_the_stored_model_says_its_choice_and_band_as_factors_of_the_answer() -> None:
    """A stored interval's log bounds read as x factors; the wider bounds elsewhere, and their widening, are named."""
    params = {
        "choice": "base_only",
        "selection": {"inner_mape": {"base_only": 9.94, "base_shrunk": 10.8, "lightgbm": None}},
        "interval": {"seen": [-0.1625, 0.157], "unseen": [-0.1625, 0.2469], "image_sizes": [64, 112],
                     "batch_range": [2, 32], "scale": 0.25},
    }  # fmt: skip
    assert render.stored(params) == (
        "stored: base_only (inner folds: base_only 9.9%, base_shrunk 10.8%); P10-P90 x0.85-x1.17 of the answer at "
        "64/112 px and batch 2-32, x0.85-x1.28 elsewhere, wider per doubling beyond batch 2-32"
    )
    # A bound on the wrong side of the answer is clamped as predictions clamp it: the band always holds the answer.
    params["interval"] = {"seen": [0.05, 0.2], "unseen": [-0.3, -0.1], "image_sizes": [64], "batch_range": [4, 8]}
    assert render.stored(params).endswith(
        "P10-P90 x1.00-x1.22 of the answer at 64 px and batch 4-8, x0.74-x1.00 elsewhere"
    )

"""The measured path's models on what agents measured on GPUs, refitted here from the bundles with this code.

Run: .venv/bin/python bench/gpu_path_models.py [BUNDLE ...]   (default: every data/measured bundle with a summary)
Each bundle is imported into a scratch database (BENCH_DATABASE_URL, default database traincast_gpu_paths on the
configured server, dropped and made anew) as a machine type of its own; each training configuration with whole steps
gets the model `traincast train` would fit (worker/predictor.py: the candidates chosen on inner folds), scored
leaving each calibration CNN out, and on the run's held-out CNNs: their layers and ops are in the bundle, their whole
steps in the run's summary.json (timed after the calibration, never seen by the fit). Beside the model, the additive
base alone (the baseline). Into docs/PERFORMANCE.md: what the stored models would answer with today's code.
"""

import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

if TYPE_CHECKING:
    from shared.measurements.steps import MeasuredStep

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SCRATCH = "traincast_gpu_paths"
COMMAND = ".venv/bin/python bench/gpu_path_models.py"
# What was looked at before the overlap became a candidate (kept with the figures, written by hand).
NOTES = """What was looked at: the overlap's form came from the 2026-11-30 bundles' calibration steps (the parts timed
alone against each step, docs/GPU.md), and its smoothness (q = 4) and pull (1 step's worth per measured part)
from their leave-one-CNN-out over q in 1, 2, 4, 8 and pulls 0.1-10 (q 2 and 4 tied); those runs' held-out CNNs
were seen too, for every setting tried, so they are not a clean test of that choice. The clean test is
h200-sxm-2026-11-30-fp32-new-cnns: measured after the choice was committed, by a stack running it (its stored
model chose the overlap on its inner folds), on four CNNs no model had been looked at on (vgg16, resnet101,
regnet_y_400mf, convnext_tiny): 12.8% against 21.5% for the procedure without it (vgg16 and regnet_y_400mf
within 0.1-7.6%, resnet101 8-39%, convnext_tiny 22-27% too fast: its layer norms, GELUs and MLP matmuls, which
no calibration CNN has). On this host's CPU calibration of the same day (35 steps) the overlap lost its inner
folds and the stored model stayed base_shrunk; leave-one-CNN-out with it among the candidates 16.0% against
19.9% without (docs/PERFORMANCE.md, "Outside the calibration set", run 12). The base alone is closer than
either procedure on bf16's held-out CNNs (21.7%): bf16's seven calibration CNNs disagree most (alexnet, vgg11
and squeezenet1_1 flat at 5-14 ms, the host's, at every batch).

Paired steps (the last column, read from the bundles, no model): the calibration times every CNN at 160 px (batch
16, 64), then every CNN at 224 px (8, 32, 128), each CNN's steps a window of a second or two; batch b at 224 px and
2b at 160 px carry the same pixels (401,408 against 409,600 a step), and where the device sets the step they agree
within 1-7% (vgg11 0.93-0.99). Where the host does, a CNN's two pairs move together by up to 1.7x: densenet121
1.70 and 1.62 in one run, 1.03 and 0.99 in another; shufflenet_v2_x1_0 1.68 and 1.69, then 1.00 and 0.98. A state of
the host that lasts one CNN's window (another process on its core, its clock) is in the steps every model here learns
from and is scored on, so no model gets below that floor on these rows; timing the steps twice, minutes apart, is
the next GPU run's measurement change (docs/GPU.md). The stored models' P10-P90 held 52 of the 60 held-out steps
(87%; median P90/P10 1.6-3.1): as wide as the steps' own disagreement, which their inner folds saw."""
CONFIGS = ("sgd/fp32", "sgd+momentum/amp_bf16", "adamw+wd/amp_fp16")
# The calibration's two settings time the same pixels per step: batch b at 224 px and 2b at 160 px (401,408 and 409,600
# pixels a sample pair): their steps should take about the same time, so how far apart they are bounds what any model
# of these steps can reach.
PAIRED_SIZES = (224, 160)


def paired_steps(steps: "list[MeasuredStep]", config: str) -> list[tuple[str, int, float]]:
    """(CNN, batch at 224 px, its step over the step at twice the batch at 160 px) for a configuration's stored steps
    (shared.measurements.steps.measured: those that ran)."""
    from calibration import run as calibration
    from worker import predictor

    key = calibration.config_from_key(config).cost_key()
    timed = {
        (s["cnn_name"], s["image_size"], s["batch_size"]): float(s["step_ms"])
        for s in steps
        if predictor.step_config(s).cost_key() == key
    }
    large, small = PAIRED_SIZES
    return sorted(
        (cnn, batch, ms / timed[(cnn, small, 2 * batch)])
        for (cnn, size, batch), ms in timed.items()
        if size == large and (cnn, small, 2 * batch) in timed
    )


def pair_floor(pairs: list[tuple[str, int, float]]) -> tuple[float, float] | None:
    """Mean and median of |ratio - 1| in % over paired steps (None without pairs)."""
    if not pairs:
        return None
    apart = [abs(ratio - 1) * 100 for _cnn, _batch, ratio in pairs]
    return statistics.fmean(apart), statistics.median(apart)


def scratch_url() -> str:
    """The scratch database's URL: BENCH_DATABASE_URL, else the configured server with its own database name."""
    if url := os.environ.get("BENCH_DATABASE_URL"):
        return url
    base = urlsplit(os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/traincast"))
    return urlunsplit(base._replace(path="/" + SCRATCH))


def fresh_database(url: str) -> None:
    """Drop the scratch database (it holds nothing but a run's imports; migrate creates it anew)."""
    import psycopg2
    from psycopg2 import sql

    name = urlsplit(url).path.lstrip("/")
    admin = psycopg2.connect(urlunsplit(urlsplit(url)._replace(path="/postgres")))
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    admin.close()


def import_bundle(path: Path, name: str) -> str:
    """Import a bundle's `local` rows as machine type `name`, typed by the GPU its header names; the GPU's name."""
    from shared import machine_types
    from shared.machine_request import MachineCreate
    from shared.measurements import layers, transfer
    from shared.measurements import steps as whole_steps

    with path.open("rb") as raw:
        bundle = transfer.read(raw)
    gpu = bundle.header.machine_types[0].figures["gpu"]
    machine_types.create(figures=MachineCreate(name=name, gpu=gpu, gpu_count=1, price_usd_per_hour=0.0))
    transfer.load(bundle=bundle, rename={"local": name})
    for key in sorted({(s["cnn_name"], s["image_size"]) for s in whole_steps.measured(machine_type=name)}):
        layers.register_builtin(name=key[0], image_size=key[1])
    return str(gpu)


def held_out_points(name: str, summary: dict[str, Any], config: str) -> list[Any]:
    """The run's held-out CNNs as points of the model (features from the bundle's rows, steps from the summary)."""
    from calibration import run as calibration
    from shared import machine_types
    from shared.measurements import layers
    from shared.measurements import steps as whole_steps
    from worker import predictor

    env = whole_steps.measured(machine_type=name)[0]["environment_id"]
    info = machine_types.get_by_name(name=name)
    held = summary.get("held_out") or {}
    wanted = [(i, p) for i, p in enumerate(held.get("points", []))
              if p["config"] == config and p["measured_ms"] is not None]  # fmt: skip
    for cnn in sorted({p["cnn"] for _, p in wanted}):
        layers.register_builtin(name=cnn, image_size=held["image_size"])
    found = (
        predictor.point(machine_type=name, info=info, cnn=p["cnn"], image_size=held["image_size"],
                        batch_size=p["batch_size"], config=calibration.config_from_key(config), environment_id=env,
                        step_ms=p["measured_ms"], step_id=-1 - i)
        for i, p in wanted
    )  # fmt: skip
    return [p for p in found if p is not None]


@contextmanager
def candidates_without(name: str) -> Iterator[None]:
    """The model procedure with one candidate left out (the procedure before it existed), restored after."""
    from prediction import validation

    saved = dict(validation.CANDIDATES)
    validation.CANDIDATES.pop(name)
    try:
        yield
    finally:
        validation.CANDIDATES.clear()
        validation.CANDIDATES.update(saved)


def score(name: str, summary: dict[str, Any], config: str) -> dict[str, Any] | None:
    """The configuration's model: leave-one-CNN-out, its choice, and its error on the run's held-out CNNs."""
    from calibration import run as calibration
    from prediction import step_model, validation
    from worker import predictor

    train = predictor.dataset(name, calibration.config_from_key(config).cost_key())
    if len({p.cnn for p in train}) < 2:
        return None
    test = held_out_points(name, summary, config)

    def ape(predicted: list[float]) -> float | None:
        found = [abs(m / p.step_ms - 1) * 100 for m, p in zip(predicted, test, strict=True)]
        return statistics.fmean(found) if found else None

    def procedure() -> tuple[str, float, float | None, int]:
        """The model's choice, leave-one-CNN-out MAPE, held-out MAPE, and how many held-out steps its P10-P90 holds."""
        params = validation.fit_model(train)
        bands = step_model.predict_many(step_model.load(params), [(p.x, p.conv_ms) for p in test])
        inside = sum(lo <= p.step_ms <= hi for (lo, _mid, hi), p in zip(bands, test, strict=True))
        loco = validation.evaluate(train)["loco"]["model"]["mape"]
        return params["choice"], loco, ape([mid for _lo, mid, _hi in bands]), inside

    choice, loco, held, inside = procedure()
    with candidates_without("overlap"):
        before_choice, before_loco, before_held, _inside = procedure()
    base = step_model.base_predictor(train)
    return {"steps": len(train), "cnns": len({p.cnn for p in train}), "choice": choice, "loco": loco, "held": held,
            "before_choice": before_choice, "loco_before": before_loco, "held_before": before_held,
            "held_base": ape([base(p) for p in test]), "held_points": len(test), "inside": inside}  # fmt: skip


def main(argv: list[str]) -> None:
    """Import, fit, score, print and write the section."""
    started = time.time()
    paths = [Path(a) for a in argv] or sorted(
        p for p in (ROOT / "data" / "measured").rglob("*.jsonl.gz") if p.with_name(summary_name(p)).exists()
    )
    url = scratch_url()
    os.environ["DATABASE_URL"] = url
    fresh_database(url)
    from shared.core.migrate import migrate
    from shared.measurements import steps as whole_steps

    migrate(url)
    lines = ["| bundle | configuration | steps (CNNs) | chosen (without the overlap) | leave-one-CNN-out: model, "
             "without the overlap, ratio | held-out CNNs: model, without the overlap, ratio; the base alone (points); "
             "inside the model's P10-P90 "
             "| paired steps apart: mean, median (pairs) |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for i, path in enumerate(paths):
        name = f"gpu-{i}"
        summary = json.loads(path.with_name(summary_name(path)).read_text())
        import_bundle(path, name)
        steps = whole_steps.measured(machine_type=name)
        for config in CONFIGS:
            s = score(name, summary, config)
            if s is None:
                continue
            held = "–"
            if s["held"] is not None:
                held = (f"{s['held']:.1f}%, {s['held_before']:.1f}%, {s['held'] / s['held_before']:.2f}×; "
                        f"{s['held_base']:.1f}% ({s['held_points']}); P10-P90 held {s['inside']}")  # fmt: skip
            pairs = paired_steps(steps, config)
            floor = pair_floor(pairs)
            apart = f"{floor[0]:.1f}%, {floor[1]:.1f}% ({len(pairs)})" if floor else "–"
            lines.append(f"| {path.name.removesuffix('.jsonl.gz')} | {config} | {s['steps']} ({s['cnns']}) "
                         f"| {s['choice']} ({s['before_choice']}) | {s['loco']:.1f}%, {s['loco_before']:.1f}%, "
                         f"{s['loco'] / s['loco_before']:.2f}× | {held} | {apart} |")  # fmt: skip
            print(lines[-1], flush=True)
    text = "\n".join([
        f"Command: `{COMMAND}` ({time.time() - started:.0f} s). Each bundle under data/measured/ "
        "(outside_the_fit/ too) with a run summary, imported into a scratch database, its models fitted with this "
        "code as `traincast train` fits them, and "
        "again without the overlap candidate (the procedure before it: the baseline, same run); the base alone "
        "(fit_base) beside them. Held-out CNNs: the run's four CNNs outside the calibration, whose whole steps the "
        "fit never saw.", "", *lines, "", NOTES,
    ])  # fmt: skip
    from bench.perf_doc import write_section

    write_section("The measured path's models on GPU bundles (bench/gpu_path_models.py)", text)


def summary_name(path: Path) -> str:
    """The run summary committed beside a bundle."""
    return path.name.removesuffix(".jsonl.gz") + ".summary.json"


if __name__ == "__main__":
    main(sys.argv[1:])

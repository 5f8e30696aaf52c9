"""The measured path on a GPU in one call: calibrate, score on CNNs left out, and keep what was measured.

Run by scripts/gpu_run.sh (docs/GPU.md), which installs, starts a private stack (API, worker, and an agent serving
`local`, typed by its GPU) and stops it afterwards. Stages, each timed, each written to OUT as it ends, so a run cut
short keeps what it reached:

1. calibrate `local` at the GPU spread (calibration/run.py GPU_SETTINGS) in the three configurations of
   data/reference/h100 (the team's H100 steps): the model's leave-one-CNN-out error per configuration, calibration
   wall time, and measurements stored per second;
2. a new CNN's missing layers and ops at 5 batch sizes, asked as a user asks (a job that waits for them);
3. CNNs the calibration never saw, at 224 px and batch 16-256 in the three configurations: the benchmarked answers
   (jobs through the API) against whole steps timed here by the agent's own code, and where the GPU is an H100,
   against data/reference/h100/steps.jsonl;
4. the bundle of every row measured (traincast measurements export), to import elsewhere.

A lent GPU is a one-shot affair (a command may run ten minutes), so `--budget-s` bounds the whole run: each
configuration's calibration gets what the later stages do not need, a calibration cut short drops its waiting work
(its rows so far are kept and exported), configurations without a model are not scored, a job still waiting at the
deadline is cancelled, a stage that fails is recorded and the next one runs, and the bundle is written after the
calibration and again at the end.

`--dry-run` (and any host without CUDA) does the same on the CPU with a small spread, a few small CNNs and one
configuration: tests/integration/test_gpu_run.py runs it, so the script cannot rot.

    scripts/gpu_run.sh OUT            # on the GPU host
    TRAINCAST_DRY_RUN=1 scripts/gpu_run.sh OUT
    .venv/bin/python bench/gpu_run.py --report data/measured/NAME.summary.json   # its section of PERFORMANCE.md
"""

import argparse
import json
import math
import os
import statistics
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import outside  # noqa: E402

CONFIGS = ("sgd/fp32", "sgd+momentum/amp_bf16", "adamw+wd/amp_fp16")
HELD_OUT = ("resnet50", "googlenet", "mnasnet1_0", "efficientnet_b0")
HELD_OUT_BATCHES = (16, 64, 256)
NEW_CNN, NEW_BATCHES = "regnet_x_400mf", (16, 32, 64, 128, 256)
# Seconds a budgeted run keeps for what follows the calibration (a new CNN, the held-out CNNs of one configuration,
# the bundle), and the least a configuration's calibration is started with.
AFTER_CALIBRATION_S = 150
MIN_CALIBRATION_S = 30
H100_STEPS = ROOT / "data" / "reference" / "h100" / "steps.jsonl"


@dataclass(frozen=True)
class DryRun:
    """The dry run: what a 2-core CPU measures in a minute or two (small CNNs, images and batch sizes)."""

    cnns: tuple[str, ...] = ("resnet18", "squeezenet1_1", "mobilenet_v2")
    settings: tuple[tuple[int, tuple[int, ...]], ...] = ((32, (2, 4)),)
    configs: tuple[str, ...] = ("sgd/fp32",)
    held_out: tuple[str, ...] = ("mnasnet0_5",)
    held_out_batches: tuple[int, ...] = (2, 4)
    image: int = 32
    new_cnn: str = "shufflenet_v2_x0_5"
    new_batches: tuple[int, ...] = (1, 2, 3, 4, 5)


DRY = DryRun()


class Run:
    """The figures of one run, written to OUT/summary.json after every stage, and the time it has left."""

    def __init__(self, out: Path, budget_s: float | None = None) -> None:
        self.out = out
        self.deadline = time.monotonic() + budget_s if budget_s else math.inf
        self.summary: dict[str, Any] = {"stages_s": {}, "budget_s": budget_s}
        out.mkdir(parents=True, exist_ok=True)

    def left(self) -> float:
        """Seconds to the deadline (inf without a budget)."""
        return self.deadline - time.monotonic()

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time a stage and save the summary when it ends; a failure is recorded and the next stage runs."""
        started = time.monotonic()
        print(f"== {name}", file=sys.stderr, flush=True)
        try:
            yield
        except Exception as e:  # noqa: BLE001 - one failed stage must not cost the rows the others measured
            traceback.print_exc()
            self.summary.setdefault("errors", {})[name] = f"{type(e).__name__}: {e}"
        finally:
            self.summary["stages_s"][name] = round(time.monotonic() - started, 1)
            self.save()

    def save(self) -> None:
        """The summary so far, as JSON."""
        (self.out / "summary.json").write_text(json.dumps(self.summary, indent=2, sort_keys=True, default=str))


def measured_rows() -> dict[str, int]:
    """Rows of `local` stored so far, by kind (what an export of it would carry)."""
    import io

    from shared.measurements import transfer

    return transfer.export(machine_types=["local"], out=io.BytesIO())


def calibrate(run: Run, cnns: tuple[str, ...], settings: Any, configs: tuple[str, ...], timeout_s: float) -> None:
    """Stage 1: each configuration's calibration in turn, within the budget, and its model's held-out figures."""
    from calibration import run as calibration

    entry: dict[str, Any] = {"wall_s": 0.0, "rows": 0, "loco_mape": {}, "interval_coverage": {}, "configs": {}}
    run.summary["calibration"] = entry
    for key in configs:
        seconds_for = min(timeout_s, run.left() - AFTER_CALIBRATION_S)
        if run.left() - AFTER_CALIBRATION_S < MIN_CALIBRATION_S:
            entry["configs"][key] = {"skipped": f"{max(run.left(), 0):.0f} s left in the budget"}
            continue
        plan = calibration.Plan(machine_type="local", cnns=cnns, settings=settings,
                                configs=(calibration.config_from_key(key),))  # fmt: skip
        before, started = measured_rows(), time.monotonic()
        models, outcome = calibrate_one(plan, seconds_for)
        seconds = time.monotonic() - started
        after = measured_rows()
        new = {k: after[k] - before[k] for k in ("layer", "op", "step")}
        entry["configs"][key] = {
            "plan": plan.describe(), "wall_s": round(seconds, 1), "rows": new,
            "measurements_per_s": round(sum(new.values()) / seconds, 2) if seconds else None, **outcome,
        }  # fmt: skip
        entry["wall_s"] = round(entry["wall_s"] + seconds, 1)
        entry["rows"] += sum(new.values())
        entry["measurements_per_s"] = round(entry["rows"] / entry["wall_s"], 2) if entry["wall_s"] else None
        for m in models:
            entry["loco_mape"][m["evaluation"]["training"]] = m["evaluation"]["loco_mape"]
            entry["interval_coverage"][m["evaluation"]["training"]] = m["evaluation"]["interval_coverage"]
        run.save()


def calibrate_one(plan: Any, timeout_s: float) -> tuple[list[Any], dict[str, Any]]:
    """One configuration's calibration: its models, and whether it completed (how far it got, what it dropped)."""
    from calibration import run as calibration
    from shared.core.errors import TraincastError

    reached = {"done": 0, "needed": 0}

    def progress(done: int, needed: int) -> None:
        reached.update(done=done, needed=needed)

    try:
        return calibration.run(plan, timeout_s=timeout_s, on_progress=progress), {"completed": True, **reached}
    except TraincastError as e:  # timed out: what it measured stays, what waits would delay every later stage
        return [], {"completed": False, **reached, "stopped": str(e), "dropped_messages": drop_waiting_work()}


def drop_waiting_work() -> int:
    """Remove the messages still queued for `local`'s agent (a calibration cut short); how many there were."""
    from shared.core import tasks

    client = tasks.redis_client()
    keys = tasks.queue_keys(tasks.bench_queue("local"))
    waiting = sum(int(client.llen(k)) for k in keys)
    client.delete(*keys)
    return waiting


def new_cnn(run: Run, cnn: str, image_size: int, batch_sizes: tuple[int, ...]) -> None:
    """Stage 2: a job for a CNN nothing measured yet, waiting for its layers and ops at 5 batch sizes."""
    from shared.training import TrainConfig

    started = time.monotonic()
    deadline = started + max(min(90, run.left() - 100), 20)  # leave the held-out stage its time
    jobs = outside.predict([cnn], image_size, list(batch_sizes), TrainConfig(), wait=True, deadline=deadline)
    wall = round(time.monotonic() - started, 1)
    run.summary["new_cnn"] = {"cnn": cnn, "image_size": image_size, "batch_sizes": list(batch_sizes),
                              "wall_s": wall, "status": jobs[cnn]["status"]}  # fmt: skip


def held_out(run: Run, cnns: tuple[str, ...], image_size: int, batches: tuple[int, ...], configs: tuple[str, ...],
             gpu: str) -> None:  # fmt: skip
    """Stage 3: the benchmarked answers for CNNs the calibration never saw against steps timed here (and the H100's)."""
    from calibration import run as calibration

    team = _team_steps() if "H100" in gpu else {}
    rows: list[dict[str, Any]] = []
    errors: dict[str, dict[str, float | None]] = {"ape": {}, "ape_h100": {}}
    entry = run.summary["held_out"] = {
        "cnns": list(cnns),
        "image_size": image_size,
        "batch_sizes": list(batches),
        "mean_ape_vs_steps_here": errors["ape"],
        "mean_ape_vs_h100_data": errors["ape_h100"],
        "skipped": {},
        "points": rows,
    }
    modelled = run.summary.get("calibration", {}).get("loco_mape", {})
    for key in configs:
        if key not in modelled:  # no model of this configuration: its jobs could not be answered from measurements
            entry["skipped"][key] = "not calibrated"
            continue
        if run.left() < 20:
            entry["skipped"][key] = "no time left"
            continue
        config = calibration.config_from_key(key)
        jobs = outside.predict(list(cnns), image_size, list(batches), config, wait=True,
                               deadline=time.monotonic() + min(run.left() - 10, 300))  # fmt: skip
        for cnn in cnns:
            if run.left() < 5:
                entry["skipped"][f"{key} {cnn}"] = "no time left for its steps"
                continue
            steps = outside.measure_steps(cnn, image_size, list(batches), config)
            answers = {p["batch_size"]: p for p in (jobs[cnn].get("result") or {}).get("predictions", [])}
            for bs in batches:
                seconds = (answers.get(bs) or {}).get("iteration_seconds")
                model = seconds * 1000 if seconds is not None else None
                theirs = team.get((cnn, key, image_size, bs))
                rows.append({"cnn": cnn, "config": key, "batch_size": bs, "model_ms": model,
                             "measured_ms": steps.get(bs), "h100_ms": theirs, "ape": outside.ape(model, steps.get(bs)),
                             "ape_h100": outside.ape(model, theirs), "job": jobs[cnn]["status"]})  # fmt: skip
        for field in ("ape", "ape_h100"):
            found = [r[field] for r in rows if r["config"] == key and r[field] is not None]
            errors[field][key] = round(statistics.fmean(found), 1) if found else None
        run.save()


def whole_steps(run: Run, cnns: tuple[str, ...], image_size: int, batches: tuple[int, ...],
                configs: tuple[str, ...]) -> None:  # fmt: skip
    """Whole steps alone (no layers, no models): the agent times each CNN's steps in each configuration until done or
    the budget ends; what it measured goes into the bundle, for the reference to learn from."""
    from calibration import run as calibration
    from shared.core import tasks
    from shared.measurements import layers

    for cnn in cnns:  # a step row names a registered CNN
        layers.register_builtin(name=cnn, image_size=image_size)
    before, started = measured_rows()["step"], time.monotonic()
    for key in configs:
        config = calibration.config_from_key(key)
        for cnn in cnns:
            tasks.send(
                tasks.MEASURE_STEPS, queue=tasks.bench_queue("local"), machine_type="local", cnn=cnn,
                image_size=image_size, optimizer=config.optimizer, precision=config.precision,
                batch_sizes=list(batches), config=config.wire(),
            )  # fmt: skip
    wanted, stored = len(cnns) * len(batches) * len(configs), 0
    while stored < wanted and run.left() > 15:
        time.sleep(3)
        stored = measured_rows()["step"] - before
    seconds = time.monotonic() - started
    run.summary["whole_steps"] = {
        "cnns": list(cnns), "image_size": image_size, "batch_sizes": list(batches), "configs": list(configs),
        "wanted": wanted, "stored": stored, "wall_s": round(seconds, 1),
        "dropped_messages": drop_waiting_work() if stored < wanted else 0,
    }  # fmt: skip


def _team_steps() -> dict[tuple[str, str, int, int], float]:
    """The team's H100 steps (data/reference/h100/steps.jsonl): (cnn, config, image, batch) → ms."""
    out = {}
    for line in H100_STEPS.read_text().splitlines():
        r = json.loads(line)
        if "ms" in r:
            out[(r["cnn"], r["config"], r["image"], r["batch"])] = r["ms"]
    return out


def bundle(run: Run) -> None:
    """Stage 4: every row of `local` with its environment, as one bundle."""
    from shared.measurements import transfer

    with (run.out / "bundle.jsonl.gz").open("wb") as out:
        counts = transfer.export(machine_types=["local"], out=out, source=os.uname().nodename)
    run.summary["bundle"] = {"file": "bundle.jsonl.gz", "rows": counts}


REPORT_TITLE = "The measured path on a GPU (scripts/gpu_run.sh)"
# What the runs' logs and profiles showed, beside their figures (read off the files the runs brought back).
REPORT_NOTES = """Where the agent's time went (py-spy sampling the agent all through the first run, 10,586 samples):
81% in the first call of each conv phase at a new shape, which is cudnn.benchmark's algorithm search (the agent times
layers with it on, as a training run that turns it on would), 10% in the timing rounds, 6% in op benchmarks, 3% in
whole steps. The GPU calibration is bounded by that search, not by the timing. The held-out errors are largest at
batch 16-64, where the host's dispatch sets the step (efficientnet_b0 and googlenet answered 18-48% slow) and small
where the device sets it (batch 256: 3.6-12.5%). The same whole steps timed in two runs on two machines of the same
kind (googlenet and efficientnet_b0, fp32) agree within 0.2% at batch 256 and within 3-20% at batch 16-64 (googlenet
at 16: 22.0 and 17.9 ms): host-bound steps move with the host. In the calibration's leave-one-CNN-out (read from the
model after importing the bundle elsewhere: same model, same 12.2%), shufflenet_v2_x1_0 is the outlier, answered
47-66% slow at 224 px, where its steps take 16-22 ms at every batch (host-bound; no other CNN of the set is); without
it the mean is about 9%. densenet121's 224 px batch-32 step (59 ms, between 40 ms at batch 8 and 86 ms at 128, where
the second machine timed 37 ms at batch 16 and 49 ms at 64) looks like a disturbed measurement that the agent's
stability rule let through.

The 2026-11-30 runs (one H200, two commands a minute apart; the agent timing layers with cuDNN's heuristics,
`cudnn.benchmark` off): py-spy sampling the agent (5,394 and 1,788 samples) found 49% / 43% of its time in layer
benchmarks, 14% / 20% in operators, 29% / 20% in whole steps: no search dominates any more. The same sgd/fp32
calibration took 83.7 s against 199.6 s; regnet_x_400mf's layers 3.7 s against 30.2 s. The steps the two days timed
agree within 2% at batch 64-256 (resnet50 at 256: 116.4, 116.5 and 116.9 ms), but shufflenet_v2_x1_0's 224 px steps
took 27 ms at batch 8-32 here against 16 ms then. The answers got worse (fp32 22.3% against 15.8%): the layers timed
with heuristics add up to more (the forward convs' sum 1.21x the search's, backward 1.09x, the median layer 1.03x) and
the additive base's fit answered by scaling the convs by 0.68, 20-32% fast at batch 256. bench/gpu_path_models.py
refits these bundles with the overlap candidate (docs/MODELS.md)."""


def report(summary: dict[str, Any], name: str) -> str:
    """Markdown of one run's summary: the calibration per configuration, the new CNN, the held-out CNNs."""
    cal = summary.get("calibration", {})
    lines = [
        f"**{name}**: {summary['gpu']}, torch {summary['torch']}, catalog GPU {summary['local']}; budget "
        f"{summary.get('budget_s')} s. Stages (s): " + ", ".join(f"{k} {v}" for k, v in summary["stages_s"].items())
        + ".",
    ]  # fmt: skip
    if cal:
        lines += ["", "| configuration | calibration | wall s | rows (layer / op / step) | measurements/s "
                  "| leave-one-CNN-out MAPE | interval coverage |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for key, c in cal.get("configs", {}).items():
        if "skipped" in c:
            lines.append(f"| {key} | skipped: {c['skipped']} | | | | | |")
            continue
        rows = c["rows"]
        state = "complete" if c["completed"] else f"cut short at {c['done']}/{c['needed']}"
        loco, cover = cal["loco_mape"].get(key), cal["interval_coverage"].get(key)
        lines.append(
            f"| {key} | {state} | {c['wall_s']} | {rows['layer']} / {rows['op']} / {rows['step']} "
            f"| {c['measurements_per_s']} | {f'{loco:.1f}%' if loco is not None else '–'} "
            f"| {f'{cover:.2f}' if cover is not None else '–'} |"
        )
    if new := summary.get("new_cnn"):
        lines += ["", f"New CNN: {new['cnn']} at {new['image_size']} px, batch {new['batch_sizes']}: its missing "
                  f"layers and ops measured and answered in **{new['wall_s']} s** ({new['status']})."]  # fmt: skip
    if held := summary.get("held_out"):
        lines += [
            "",
            f"CNNs the calibration never saw ({', '.join(held['cnns'])}) at {held['image_size']} px: the "
            "benchmarked answer (a job through the API) against the whole step the agent's code timed right "
            "after, on the same GPU; skipped: "
            + (", ".join(f"{k} ({v})" for k, v in held["skipped"].items()) or "none")
            + ".",
            "",
            "| configuration | CNN | batch | answer ms | measured ms | error |",
            "|---|---|---|---|---|---|",
        ]
        for p in held["points"]:
            model, meas = p["model_ms"], p["measured_ms"]
            lines.append(
                f"| {p['config']} | {p['cnn']} | {p['batch_size']} | {model and round(model, 1)} "
                f"| {meas and round(meas, 1)} | {p['ape'] and round(p['ape'], 1)}% |"
            )
        lines += ["", "Mean error: " + ", ".join(f"{k} {v}%" for k, v in held["mean_ape_vs_steps_here"].items())
                  + "; against our H100 steps: " + (", ".join(f"{k} {v}%" for k, v in
                                                            held["mean_ape_vs_h100_data"].items() if v is not None)
                                                    or "not an H100") + "."]  # fmt: skip
    if steps := summary.get("whole_steps"):
        lines += ["", f"Whole steps alone: {steps['stored']} of {steps['wanted']} ({', '.join(steps['configs'])}; "
                  f"{len(steps['cnns'])} CNNs at {steps['image_size']} px, batch {steps['batch_sizes']}) in "
                  f"{steps['wall_s']} s."]  # fmt: skip
    return "\n".join(lines)


def main() -> int:
    """Run the stages against the stack scripts/gpu_run.sh started; 1 when a stage failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="where the figures and the bundle go (all but --report)")
    parser.add_argument("--dry-run", action="store_true", help="the CPU's small spread (also where CUDA is absent)")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--calibration-timeout-s", type=float, default=240, help="per configuration")
    parser.add_argument("--budget-s", type=float, help="the whole run's seconds (stages fit themselves in)")
    parser.add_argument("--whole-steps", metavar="CNNS",
                        help="only time these CNNs' whole steps (comma-separated; --configs, --steps-batches) and "
                             "export them: no calibration, no scoring")  # fmt: skip
    parser.add_argument("--steps-batches", default="16,64,256", help="batch sizes of --whole-steps")
    parser.add_argument(
        "--held-out",
        default=",".join(HELD_OUT),
        help="the CNNs scored in stage 3 (comma-separated; name none of the calibration set's: it is not "
        "checked, and they would not be held out)",
    )
    parser.add_argument("--report", metavar="SUMMARY", nargs="+", type=Path,
                        help="format these runs' summary.json files into docs/PERFORMANCE.md and stop")  # fmt: skip
    args = parser.parse_args()
    if args.report:
        from bench.perf_doc import write_section

        command = f"`.venv/bin/python bench/gpu_run.py --report {' '.join(map(str, args.report))}`"
        runs = [report(json.loads(p.read_text()), p.name.removesuffix(".summary.json")) for p in args.report]
        text = "\n\n".join(
            [
                f"{command} formats what `scripts/gpu_run.sh` wrote on GPU hosts (summary.json, "
                "committed beside each run's bundle in data/measured/).",
                *runs,
                REPORT_NOTES,
            ]
        )
        print(text)
        write_section(REPORT_TITLE, text)
        return 0
    if args.out is None:
        parser.error("--out is required (or --report)")
    outside.load_services()
    import torch

    from calibration import run as calibration
    from shared import machine_types

    dry = args.dry_run or not torch.cuda.is_available()
    gpu = torch.cuda.get_device_name(0) if not dry else "none (dry run on the CPU)"
    run = Run(args.out, args.budget_s)
    run.summary |= {"dry_run": dry, "gpu": gpu, "torch": torch.__version__,
                    "local": machine_types.get_by_name(name="local")["gpu"]}  # fmt: skip
    configs = DRY.configs if dry else tuple(args.configs.split(","))
    if args.whole_steps:
        try:
            with run.stage("whole steps"):
                whole_steps(run, tuple(args.whole_steps.split(",")), DRY.image if dry else 224,
                            tuple(int(b) for b in args.steps_batches.split(",")), configs)  # fmt: skip
        finally:
            with run.stage("bundle"):
                bundle(run)
        print(json.dumps(run.summary, indent=2, default=str))
        return 1 if run.summary.get("errors") else 0
    try:
        with run.stage("calibrate"):
            cnns, settings = (DRY.cnns, DRY.settings) if dry else (calibration.DEFAULT_CNNS,
                                                                           calibration.GPU_SETTINGS)  # fmt: skip
            calibrate(run, cnns, settings, configs, args.calibration_timeout_s)
        with run.stage("bundle"):  # the calibration's rows are safe even if a later stage outruns the machine
            bundle(run)
        with run.stage("new CNN"):
            new_cnn(run, DRY.new_cnn if dry else NEW_CNN, DRY.image if dry else 224,
                    DRY.new_batches if dry else NEW_BATCHES)  # fmt: skip
        with run.stage("held-out CNNs"):
            held_out(run, DRY.held_out if dry else tuple(args.held_out.split(",")), DRY.image if dry else 224,
                     DRY.held_out_batches if dry else HELD_OUT_BATCHES, configs, gpu)  # fmt: skip
    finally:
        with run.stage("bundle"):
            bundle(run)
    print(json.dumps({k: v for k, v in run.summary.items() if k != "held_out"}, indent=2, default=str))
    print(json.dumps({k: v for k, v in run.summary.get("held_out", {}).items() if k != "points"}, indent=2))
    return 1 if run.summary.get("errors") else 0


if __name__ == "__main__":
    sys.exit(main())

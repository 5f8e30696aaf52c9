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

`--dry-run` (and any host without CUDA) does the same on the CPU with a small spread, a few small CNNs and one
configuration: tests/integration/test_gpu_run.py runs it, so the script cannot rot.

    scripts/gpu_run.sh OUT            # on the GPU host
    TRAINCAST_DRY_RUN=1 scripts/gpu_run.sh OUT
"""

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import outside  # noqa: E402

CONFIGS = ("sgd/fp32", "sgd+momentum/amp_bf16", "adamw+wd/amp_fp16")
HELD_OUT = ("resnet50", "googlenet", "mnasnet1_0", "efficientnet_b0")
HELD_OUT_BATCHES = (16, 64, 256)
NEW_CNN, NEW_BATCHES = "regnet_x_400mf", (16, 32, 64, 128, 256)
H100_STEPS = ROOT / "data" / "reference" / "h100" / "steps.jsonl"
# The dry run: what a 2-core CPU measures in a minute or two.
DRY = {
    "cnns": ("resnet18", "squeezenet1_1", "mobilenet_v2"), "settings": ((32, (2, 4)),), "configs": ("sgd/fp32",),
    "held_out": ("mnasnet0_5",), "held_out_batches": (2, 4), "image": 32,
    "new_cnn": "shufflenet_v2_x0_5", "new_batches": (1, 2, 3, 4, 5),
}  # fmt: skip


class Run:
    """The figures of one run, written to OUT/summary.json after every stage."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.summary: dict[str, Any] = {"stages_s": {}}
        out.mkdir(parents=True, exist_ok=True)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time a stage and save the summary when it ends (or fails)."""
        started = time.monotonic()
        print(f"== {name}", file=sys.stderr, flush=True)
        try:
            yield
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
    """Stage 1: the calibration and its models' held-out figures."""
    from calibration import run as calibration

    plan = calibration.Plan(machine_type="local", cnns=cnns, settings=settings,
                            configs=tuple(calibration.config_from_key(c) for c in configs))  # fmt: skip
    before = measured_rows()
    started = time.monotonic()
    models = calibration.run(plan, timeout_s=timeout_s)
    seconds = time.monotonic() - started
    after = measured_rows()
    new = sum(after[k] - before[k] for k in ("layer", "op", "step"))
    run.summary["calibration"] = {
        "plan": plan.describe(), "wall_s": round(seconds, 1), "rows": new,
        "measurements_per_s": round(new / seconds, 2) if seconds else None,
        "loco_mape": {m["evaluation"]["training"]: m["evaluation"]["loco_mape"] for m in models},
        "interval_coverage": {m["evaluation"]["training"]: m["evaluation"]["interval_coverage"] for m in models},
    }  # fmt: skip


def new_cnn(run: Run, cnn: str, image_size: int, batch_sizes: tuple[int, ...]) -> None:
    """Stage 2: a job for a CNN nothing measured yet, waiting for its layers and ops at 5 batch sizes."""
    from shared.training import TrainConfig

    started = time.monotonic()
    jobs = outside.predict([cnn], image_size, list(batch_sizes), TrainConfig(), wait=True)
    wall = round(time.monotonic() - started, 1)
    run.summary["new_cnn"] = {"cnn": cnn, "image_size": image_size, "batch_sizes": list(batch_sizes),
                              "wall_s": wall, "status": jobs[cnn]["status"]}  # fmt: skip


def held_out(run: Run, cnns: tuple[str, ...], image_size: int, batches: tuple[int, ...], configs: tuple[str, ...],
             gpu: str) -> None:  # fmt: skip
    """Stage 3: the benchmarked answers for CNNs the calibration never saw against steps timed here (and the H100's)."""
    from calibration import run as calibration

    team = _team_steps() if "H100" in gpu else {}
    rows, errors = [], {}
    for key in configs:
        config = calibration.config_from_key(key)
        jobs = outside.predict(list(cnns), image_size, list(batches), config, wait=True)
        for cnn in cnns:
            steps = outside.measure_steps(cnn, image_size, list(batches), config)
            answers = {p["batch_size"]: p for p in (jobs[cnn].get("result") or {}).get("predictions", [])}
            for bs in batches:
                seconds = (answers.get(bs) or {}).get("iteration_seconds")
                model = seconds * 1000 if seconds is not None else None
                theirs = team.get((cnn, key, image_size, bs))
                rows.append({"cnn": cnn, "config": key, "batch_size": bs, "model_ms": model,
                             "measured_ms": steps.get(bs), "h100_ms": theirs, "ape": outside.ape(model, steps.get(bs)),
                             "ape_h100": outside.ape(model, theirs)})  # fmt: skip
        for field in ("ape", "ape_h100"):
            found = [r[field] for r in rows if r["config"] == key and r[field] is not None]
            errors.setdefault(field, {})[key] = round(statistics.fmean(found), 1) if found else None
        run.summary["held_out"] = {"cnns": list(cnns), "image_size": image_size, "batch_sizes": list(batches),
                                   "mean_ape_vs_steps_here": errors["ape"],
                                   "mean_ape_vs_h100_data": errors["ape_h100"], "points": rows}  # fmt: skip
        run.save()


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


def main() -> int:
    """Run the stages against the stack scripts/gpu_run.sh started."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--dry-run", action="store_true", help="the CPU's small spread (also where CUDA is absent)")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--calibration-timeout-s", type=float, default=240)
    args = parser.parse_args()
    outside.load_services()
    import torch

    from calibration import run as calibration
    from shared import machine_types

    dry = args.dry_run or not torch.cuda.is_available()
    gpu = torch.cuda.get_device_name(0) if not dry else "none (dry run on the CPU)"
    run = Run(args.out)
    run.summary |= {"dry_run": dry, "gpu": gpu, "torch": torch.__version__,
                    "local": machine_types.get_by_name(name="local")["gpu"]}  # fmt: skip
    configs = DRY["configs"] if dry else tuple(args.configs.split(","))
    with run.stage("calibrate"):
        cnns, settings = (DRY["cnns"], DRY["settings"]) if dry else (calibration.DEFAULT_CNNS, calibration.GPU_SETTINGS)
        calibrate(run, cnns, settings, configs, args.calibration_timeout_s)
    with run.stage("new CNN"):
        new_cnn(run, DRY["new_cnn"] if dry else NEW_CNN, DRY["image"] if dry else 224,
                DRY["new_batches"] if dry else NEW_BATCHES)  # fmt: skip
    with run.stage("held-out CNNs"):
        held_out(run, DRY["held_out"] if dry else HELD_OUT, DRY["image"] if dry else 224,
                 DRY["held_out_batches"] if dry else HELD_OUT_BATCHES, configs, gpu)  # fmt: skip
    with run.stage("bundle"):
        bundle(run)
    print(json.dumps({k: v for k, v in run.summary.items() if k != "held_out"}, indent=2, default=str))
    print(json.dumps({k: v for k, v in run.summary["held_out"].items() if k != "points"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Data-parallel losses term by term: what each of prediction/ddp_losses.py's terms adds, on every public set.

The rows are bench/scaling.py's (Pollux and Sia: real data, JPEGs decoded by loader workers) and
bench/scaling_lambda.py's (Lambda: synthetic data, one machine); each row's measured one-GPU step at the same per-GPU
batch is the compute. Columns add one term at a time to the all-reduce tail (today's model without the terms) and all
of them together; perfect scaling is the baseline, scored on the same rows in the same run. The stragglers'
coefficient of variation for decoded input is fitted here: each cluster's score comes from a fit on the other
clusters only (leave one cluster out), and the constant prediction/ddp_losses.py ships is the fit on all of them.

    .venv/bin/python bench/ddp_losses.py              # print and write docs/PERFORMANCE.md's section
    .venv/bin/python bench/ddp_losses.py --no-write   # print only
"""

import argparse
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import scaling, scaling_lambda  # noqa: E402
from bench.perf_doc import write_section  # noqa: E402
from prediction import ddp_losses, input_pipeline, parallel  # noqa: E402
from prediction.reference import data  # noqa: E402
from shared import machine_cpus  # noqa: E402
from shared.machine_cpus import HostCpu  # noqa: E402

COMMAND = ".venv/bin/python bench/ddp_losses.py"
# The GPU of each set, as data/gpus.csv names it (its SMs and memory bandwidth).
GPU = {
    "aws": "T4", "azure": "V100-SXM2-32GB", "dgx": "A100-SXM4-40GB", "dgx-ext": "A100-SXM4-40GB",
    "quad": "Quadro-RTX-6000", "rtx": "RTX-2080-Ti", "A100 80GB PCIe": "A100-PCIE-80GB",
    "A100 80GB SXM4": "A100-SXM4-80GB", "H100 PCIe": "H100-PCIE-80GB", "H100 SXM5": "H100-SXM5-80GB",
    "H200 SXM": "H200-SXM-141GB", "RTX 3090": "RTX-3090", "RTX 4090": "RTX-4090", "RTX 6000 Ada": "RTX-6000-Ada",
    "RTX A6000": "RTX-A6000", "V100 16GB": "V100-SXM2-16GB",
}  # fmt: skip
CVS = [i / 200 for i in range(41)]  # 0 .. 0.2
TERMS = ("bucket_copies_ms", "contention_ms", "stragglers_ms")


@dataclass(frozen=True)
class Case:
    """One multi-GPU step: its set, fold, the tail model's step, its terms' inputs and the measured step."""

    dataset: str  # "lambda" or the real-data set
    fold: str  # the cluster (real data) or "lambda"
    decoded: bool
    replicas: int
    compute_ms: float
    step: parallel.ParallelStep
    gradient_bytes: float
    intra_link: str
    gpu: str
    measured_ms: float

    def terms(self, cv: float, specs: dict[str, tuple[int, float]]) -> ddp_losses.Losses:
        """The loss terms at straggler cv (cv is only used on decoded input)."""
        sms, bandwidth = specs[self.gpu]
        return ddp_losses.losses(
            compute_ms=self.compute_ms, allreduce_ms=self.step.allreduce_ms, exposed_ms=self.step.exposed_ms,
            replicas=self.replicas, gradient_bytes=self.gradient_bytes, bus_gbs=self.step.bus_gbs,
            intra_link=self.intra_link, sm_count=sms, mem_bandwidth_gbs=bandwidth, cv=cv if self.decoded else 0.0,
        )  # fmt: skip

    def error(self, extra_ms: float) -> float:
        """|predicted - measured| scaling efficiency (points) with extra_ms added to the tail model's step."""
        return abs(self.compute_ms / (self.step.step_ms + extra_ms) - self.compute_ms / self.measured_ms) * 100


def gpu_specs() -> dict[str, tuple[int, float]]:
    """data/gpus.csv: GPU → (SMs, memory GB/s)."""
    return {r["gpu"]: (int(r["sm_count"]), float(r["mem_bandwidth_gbs"])) for r in data.gpu_rows()}


def mean_errors(cs: list[Case], cv: float, specs: dict[str, tuple[int, float]]) -> tuple[float, float, float]:
    """Mean efficiency error (points) of perfect scaling, the tail alone and the tail with every term at cv."""
    perfect = statistics.fmean(abs(1 - c.compute_ms / c.measured_ms) * 100 for c in cs)
    tail = statistics.fmean(c.error(0.0) for c in cs)
    both = statistics.fmean(c.error(c.terms(cv, specs).total_ms) for c in cs)
    return perfect, tail, both


def real_rows() -> list[scaling.Row]:
    """bench/scaling.py's multi-GPU rows: scalability and one-machine placements, each row once."""
    multi, _ = scaling.rows("scalability")
    single, _ = scaling.rows("placements")
    return list(dict.fromkeys(multi + single))


def cases(real: list[scaling.Row]) -> list[Case]:
    """Every multi-GPU row of both benches (real: bench/scaling.py's) with the tail model's step."""
    out = []
    for row in real:
        links = scaling.CLUSTERS[row.cluster].links
        out.append(Case(
            f"{row.dataset} {row.cluster}", scaling.FOLD[row.cluster], True, row.replicas, row.one_gpu_ms,
            scaling.predict(row), scaling.GRADIENT_BYTES[row.dataset], links.intra_link, GPU[row.cluster], row.step_ms,
        ))  # fmt: skip
    for pair in [p for prec in ("fp16", "fp32") for p in scaling_lambda._v1(prec) + scaling_lambda._v2(prec)]:
        found = scaling_lambda._links(pair.system, pair.gpus)
        family = scaling_lambda.family(pair.system)
        if found is None or family not in GPU:
            continue
        compute = pair.batch / pair.one_ips * 1000
        out.append(Case(
            f"lambda {family}", "lambda", False, pair.gpus, compute, scaling_lambda.predict(pair, found[0]),
            scaling_lambda.GRADIENT_BYTES, found[0].intra_link, GPU[family], compute / pair.measured,
        ))  # fmt: skip
    return out


def fit_cv(train: list[Case], specs: dict[str, tuple[int, float]]) -> float:
    """The decoded-input straggler cv minimising the mean over clusters of their mean efficiency error."""

    def score(cv: float) -> float:
        per: dict[str, list[float]] = defaultdict(list)
        for c in train:
            per[c.fold].append(c.error(c.terms(cv, specs).total_ms))
        return statistics.fmean(statistics.fmean(v) for v in per.values())

    return min(CVS, key=score)


def table(all_cases: list[Case], specs: dict[str, tuple[int, float]], held_cv: dict[str, float]) -> list[str]:
    """Markdown lines: per set, the efficiency error with each term alone, all, and perfect scaling."""
    lines = [
        "| set | rows | perfect scaling (pp) | tail only (pp) | + bucket copies | + contention | + stragglers (cv) | "
        "all terms (pp) | ratio to perfect | floor (pp) | mean ms: tail / copies / contention / stragglers |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    groups: dict[str, list[Case]] = defaultdict(list)
    for c in all_cases:
        groups[c.dataset].append(c)
    for name, cs in sorted(groups.items(), key=lambda kv: (kv[0].startswith("lambda"), kv[0])):
        cv = held_cv.get(cs[0].fold, 0.0) if cs[0].decoded else 0.0
        terms = [c.terms(cv, specs) for c in cs]
        perfect, tail, both = mean_errors(cs, cv, specs)
        alone = [statistics.fmean(c.error(getattr(t, term)) for c, t in zip(cs, terms, strict=True)) for term in TERMS]
        floor = statistics.fmean(max(0.0, c.compute_ms / c.measured_ms - 1) * 100 for c in cs)
        ms = [statistics.fmean(c.step.exposed_ms for c in cs)] + [
            statistics.fmean(getattr(t, term) for t in terms) for term in TERMS
        ]
        lines.append(
            f"| {name} | {len(cs)} | {perfect:.1f} | {tail:.1f} | {alone[0]:.1f} | {alone[1]:.1f} | "
            f"{alone[2]:.1f} ({cv:g}) | {both:.1f} | {both / perfect:.2f} | {floor:.1f} | "
            + " / ".join(f"{m:.2f}" for m in ms)
            + " |"
        )
    return lines


def summary(all_cases: list[Case], specs: dict[str, tuple[int, float]], held_cv: dict[str, float]) -> list[str]:
    """Per cluster (fold), the mean efficiency error: perfect scaling, the tail alone, all terms held out."""
    lines = []
    folds: dict[str, list[Case]] = defaultdict(list)
    for c in all_cases:
        folds[c.fold].append(c)
    for fold, cs in sorted(folds.items()):
        perfect, tail, both = mean_errors(cs, held_cv.get(fold, 0.0), specs)
        lines.append(
            f"- {fold}: {len(cs)} rows, efficiency error perfect scaling {perfect:.1f} pp, tail {tail:.1f}, all terms "
            f"{both:.1f} (ratio to perfect {both / perfect:.2f}; the goal is 0.50 or less)"
        )
    return lines


# The hosts of the real-data clusters whose CPUs are published, for the input pipeline's check: vCPUs per machine and
# what they are. ImageNet's jobs ran 4 DataLoader workers per replica (shared/data/public/README.md, sia).
HOSTS: dict[str, tuple[int, HostCpu | None, str]] = {
    "aws": (48, machine_cpus.of("g4dn.12xlarge"), "g4dn.12xlarge: 48 vCPUs (AWS EC2 G4 instance page)"),
    "azure": (40, machine_cpus.of("Standard_ND40rs_v2"), "Standard_ND40rs_v2: 40 vCPUs (data/cloud_gpu_machines.csv)"),
    "dgx": (256, HostCpu("2 x AMD EPYC 7742 (Zen 2)", 2, 2.25, "base", "NVIDIA DGX A100 datasheet"),
            "DGX A100: 2 x 64 cores, 256 threads (NVIDIA DGX A100 datasheet)"),
}  # fmt: skip
IMAGENET_WORKERS = 4


def input_lines(real: list[scaling.Row]) -> list[str]:
    """Markdown lines: one machine, ImageNet, by GPUs: measured efficiency beside what the product's input pipeline
    (prediction/input_pipeline.py, at the rate Traincast ships) says the host's vCPUs allow, and the rate per vCPU
    below which decoding would bind."""
    rate = input_pipeline.shipped_rate()
    lines = [
        "| cluster | host | GPUs | rows | vCPUs per GPU | measured efficiency | input-bound at the shipped rate "
        "(images/s per vCPU) | rate per vCPU at which decoding binds (median) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, (vcpus, cpu, host) in HOSTS.items():
        per_vcpu, _ = input_pipeline.scaled(rate, cpu)
        groups: dict[int, list[scaling.Row]] = defaultdict(list)
        for row in real:
            if scaling.FOLD[row.cluster] == name and row.dataset == "imagenet" and row.nodes == 1:
                groups[row.replicas].append(row)
        for gpus, rows in sorted(groups.items()):
            decoding = input_pipeline.decoding_vcpus(IMAGENET_WORKERS * gpus, vcpus, cpu)
            # images/s the GPUs take at their one-GPU speed, and the rate per vCPU that just keeps up with it
            binds = [gpus * r.local_bsz / (r.one_gpu_ms / 1000) / decoding for r in rows]
            bound = sum(b > per_vcpu for b in binds)
            eff = statistics.fmean(r.one_gpu_ms / r.step_ms for r in rows)
            lines.append(
                f"| {name} | {host} | {gpus} | {len(rows)} | {vcpus / gpus:.0f} | {eff:.2f} | {bound} of {len(rows)} "
                f"({per_vcpu:.0f}) | {statistics.median(binds):.0f} |"
            )
    return lines


def main() -> None:
    """Fit, score, print; write the section unless --no-write."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    specs = gpu_specs()
    real = real_rows()
    all_cases = cases(real)
    decoded = [c for c in all_cases if c.decoded]
    folds = sorted({c.fold for c in decoded})
    held_cv = {f: fit_cv([c for c in decoded if c.fold != f], specs) for f in folds}
    full_cv = fit_cv(decoded, specs)
    body = "\n".join(
        [
            f"`{COMMAND}` ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC). Terms: `prediction/ddp_losses.py`; tail: "
            "`prediction/parallel.py`'s exposed all-reduce (the model before these terms). Rows: bench/scaling.py's "
            "(Pollux, Sia: real data, decoded by loader workers; scalability and one-machine placement rows, each "
            "once) and bench/scaling_lambda.py's (Lambda: synthetic data, 1..8 GPUs of one machine), the same link "
            "figures; the GPUs' SMs and memory bandwidth from data/gpus.csv (Lambda's RTX 6000 Ada its own row). "
            "Efficiency error = |predicted - measured| scaling efficiency, percentage "
            "points; a term's column is the tail plus that term alone. Stragglers on decoded input: the cv shown "
            "was fitted on the OTHER clusters (dgx and dgx-ext one fold); synthetic input gets none (see "
            "prediction/ddp_losses.py). The shipped cv, fitted on every real-data cluster: "
            f"{full_cv:g} (prediction/ddp_losses.py: {ddp_losses.STRAGGLER_CV['decoded']:g}). Floor: what no loss "
            "term can remove, as in the sections above (rows measured faster than the one-GPU step).",
            "",
            *table(all_cases, specs, held_cv),
            "",
            *summary(all_cases, specs, held_cv),
            "",
            *FINDINGS,
            "",
            "The host's vCPUs shared by the GPUs' loaders, one machine, ImageNet (ResNet-50, 4 DataLoader workers a "
            "replica): the product's input pipeline (prediction/input_pipeline.py) at the rate Traincast ships "
            f"({input_pipeline.shipped_rate().per_cpu:.0f} images/s per vCPU on its host, moved to each cluster's "
            "vCPUs by threads per core where published), against these rows:",
            "",
            *input_lines(real),
            "",
            *INPUT_FINDINGS,
        ]
    )
    print(body)
    if not args.no_write:
        write_section("Data-parallel losses, term by term", body)


FINDINGS = [
    "What the tables say:",
    "",
    "- Bucket copies and contention are each about a millisecond or less on these steps (ResNet-50's 102 MB "
    "gradient at 320..4,800 GB/s of memory; all-reduces of a few ms overlapping a backward of hundreds): named, "
    "sourced, and too small to move any set's error by more than a few tenths of a point.",
    "- Stragglers carry the terms' effect where images are decoded: the wait for the slowest of N grows with N as "
    "the real-data losses do (Sia's RTX 2080 Ti: 2% at 2 GPUs, 20% at 8). Held out, they cut the error on the T4, "
    "V100, Quadro (CIFAR-10) and 2080 Ti clusters and more than double it on the DGX-A100s, where most multi-GPU "
    "steps are faster than the one-GPU step they are compared with (the floor column) and a DGX's 256 hardware "
    "threads leave its loaders idle time: nothing here knows a machine's loader headroom, so the spread is one "
    "figure for every machine. Over the five real-data clusters the terms are a wash (mean of the clusters' errors "
    "18.8 pp with the tail alone, 18.4 with the terms; by rows the DGX-A100s, half of them, tip it the other way).",
    "- On synthetic data (Lambda) the loss is the same at 2 as at 8 GPUs (1% on H100/H200 SXM, 3..7% on A100, V100 "
    "and GeForce/RTX boards): no maximum of N draws grows like that, so no straggler term is applied and the terms "
    "take a tenth of perfect scaling's error off, not half. What costs an A100 or V100 3..7% from the second GPU "
    "on, whatever the count, is not explained by any term here (the copies and contention these terms size are "
    "10 to 80 times too small); halving perfect scaling's error, as the goal asks, would need it. Nor is it the "
    "harness: DeepLearningExamples' ConvNets (image_classification/training.py, Trainer.train_step) synchronises "
    "the device at the end of every step with one GPU or many, so its one-GPU runs overlap no more across steps "
    "than its N-GPU runs; these add only one all-reduce of the scalar loss per step (microseconds over NVLink or "
    "PCIe). A machine-level cause (each step waits for the slowest board's clock under a shared power or thermal "
    "budget) would fit a loss that appears with the second GPU and stays flat, but no row here records clocks.",
    "- The data-parallel sections above score the tail alone (prediction/parallel.py); the answers add these terms.",
]
INPUT_FINDINGS = [
    "- Only the Azure V100 machines lose efficiency inside one machine as GPUs are added (0.84 at 2 GPUs, 0.49 at 8); "
    "the T4 and DGX-A100 machines hardly do. At the rate Traincast ships no row is input-bound. In the product's "
    "input model each loader worker decodes on a vCPU of its own until the workers outnumber the vCPUs (here at 11 "
    "GPUs), so the rate at which decoding binds is the same at every GPU count (the last column): a slower rate "
    "would cost every count alike, not more with more GPUs. What grows with the count on Azure is not modelled: "
    "the replicas' own processes, pinned-memory threads and the OS beside 4 workers a GPU on 5 vCPUs a GPU "
    "(hyper-threads, whose count per core Azure does not publish), one disk and page cache. No term is fitted to "
    "it: only these rows could set it, and none would be left to score it.",
]


if __name__ == "__main__":
    main()

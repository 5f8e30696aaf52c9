"""Data-parallel scaling: prediction/parallel.py's step model against Pollux's and Sia's public multi-GPU measurements.

Step and gradient-sync times of ResNet-50 (ImageNet) and ResNet-18 (CIFAR-10) under PyTorch DDP on 1..64 GPUs of six
clusters (/work/shared/data/public/README.md). The model gets each row's measured one-GPU step at the same per-GPU
batch as compute; a "perfect scaling" baseline (step = that one-GPU step) is scored on the same rows in the same run.

    .venv/bin/python bench/scaling.py              # print the tables and write docs/PERFORMANCE.md's section
    .venv/bin/python bench/scaling.py --no-write   # print only
"""

import argparse
import csv
import math
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.perf_doc import write_section  # noqa: E402
from prediction import parallel  # noqa: E402
from prediction.parallel import Links  # noqa: E402

COMMAND = ".venv/bin/python bench/scaling.py"
PUBLIC = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "public"
# Backward is about twice the forward's work (gradients of inputs and of weights), so 2/3 of a step's compute: the
# same constant prediction/layouts.py uses; not fitted here.
BACKWARD_FRACTION = 2 / 3
# fp32 gradients: apex AMP's default O1 (petuum/adaptdl benchmark/models/imagenet/main.py: amp.initialize(model,
# optimizer)) keeps fp32 parameters; CIFAR-10 trains in fp32. Parameter counts: torchvision resnet50, and the CIFAR
# ResNet-18 of the jobs' models/resnet.py (3x3 stem, no max-pool, 10 classes), both counted with torchvision.
GRADIENT_BYTES = {"imagenet": 25_557_032 * 4, "cifar10": 11_173_962 * 4}
# Sia's A100 cluster is an on-prem DGX-A100 (sia-simulator/simulator_config.py): 8 A100-40GB SXM4 on NVSwitch, like
# Azure's ND96asr_v4, whose row is used; its 8 x 200 Gb/s HDR InfiniBand is also the DGX-A100's own compute fabric
# (NVIDIA DGX A100 datasheet), but the artifact does not say how the two DGX were connected: ASSUMED.
DGX = "Standard_ND96asr_v4"
# On-prem PCIe machines: Quadro RTX 6000 and RTX 2080 Ti are PCIe 3.0 x16 cards (NVIDIA specifications), 12 GB/s in
# NCCL's model (src/graph/topo.h PCI_BW). The artifact publishes no network for them; the RTX 2080 Ti, a GeForce card,
# may also lack peer-to-peer over PCIe, making 12 GB/s an upper bound.
PCIE3 = Links(intra_gbs=12.0, network_gbps=None, intra_link="pcie", network_kind="unknown", source="PCIe 3.0 x16")


def catalog(name: str) -> Links:
    """A machine type's row of data/interconnect.csv (which must have it)."""
    links = parallel.links_for(name)
    if links is None:
        raise SystemExit(f"data/interconnect.csv has no row {name}")
    return links


@dataclass(frozen=True)
class Cluster:
    """One profiled cluster: where its files are, its GPUs per machine and the link figures used for it."""

    hardware: str
    files: str  # file name pattern, {ds} = dataset, {kind} = scalability or placements
    gpus_per_node: int
    links: Links
    figures: str


CLUSTERS = {
    "aws": Cluster(
        "T4, AWS g4dn.12xlarge", "pollux/{ds}_{kind}.csv", 4, catalog("g4dn.12xlarge"),
        "data/interconnect.csv g4dn.12xlarge: PCIe 3.0 12 GB/s; 50 Gbps Ethernet (ENA)",
    ),
    "azure": Cluster(
        "V100-32GB, Azure ND40rs_v2", "sia/{ds}_{kind}-azure.csv", 8, catalog("Standard_ND40rs_v2"),
        "data/interconnect.csv Standard_ND40rs_v2: NVLink cube-mesh 120 GB/s; 100 Gb/s EDR InfiniBand",
    ),
    "dgx": Cluster(
        "A100-40GB, DGX-A100 (on-prem)", "sia/{ds}_{kind}-dgx.csv", 8, catalog(DGX),
        "Standard_ND96asr_v4's row: NVSwitch 240 GB/s; 1600 Gb/s InfiniBand (assumed)",
    ),
    "dgx-ext": Cluster(
        "A100-40GB, DGX-A100 (on-prem)", "sia/{ds}_{kind}-dgx-ext.csv", 8, catalog(DGX),
        "as dgx (same machines, more batch sizes)",
    ),
    "quad": Cluster(
        "Quadro RTX 6000 (on-prem)", "sia/{ds}_{kind}-quad.csv", 4, PCIE3, "PCIe 3.0 12 GB/s; one machine only"
    ),
    "rtx": Cluster(
        "RTX 2080 Ti (on-prem)", "sia/{ds}_{kind}-rtx.csv", 8, PCIE3, "PCIe 3.0 12 GB/s; network not published"
    ),
}  # fmt: skip
# Leave-one-cluster-out folds: the two A100 profiles are one machine type, so one fold.
FOLD = {"aws": "aws", "azure": "azure", "dgx": "dgx", "dgx-ext": "dgx", "quad": "quad", "rtx": "rtx"}
ETAS = [10 ** (-3 + 3 * i / 60) for i in range(61)]  # 0.001 .. 1, the fitted fraction of every link's bandwidth


@dataclass(frozen=True)
class Row:
    """One measured multi-GPU step and what it is compared with."""

    dataset: str
    cluster: str
    gpus_per_node: int
    nodes: int
    replicas: int
    local_bsz: int
    one_gpu_ms: float
    step_ms: float
    sync_ms: float


def read(path: Path) -> list[dict[str, str]]:
    """A CSV's rows by header (the files order their columns differently)."""
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def one_gpu(cluster: Cluster, ds: str) -> dict[int, float]:
    """The measured one-GPU step (ms) per local batch: placement "1", else a 1-replica scalability row."""
    out: dict[int, float] = {}
    for kind in ("scalability", "placements"):
        path = PUBLIC / cluster.files.format(ds=ds, kind=kind)
        for r in read(path) if path.exists() else []:
            if r.get("placement") == "1" or (r.get("num_replicas") == "1" and r.get("num_nodes") == "1"):
                out[int(float(r["local_bsz"]))] = float(r["step_time"]) * 1000
    return out


def rows(kind: str) -> tuple[list[Row], dict[str, int]]:
    """Every multi-GPU row of the scalability files, or the one-machine rows of the placements files."""
    out: list[Row] = []
    skipped: defaultdict[str, int] = defaultdict(int)
    for name, cluster in CLUSTERS.items():
        for ds in GRADIENT_BYTES:
            path = PUBLIC / cluster.files.format(ds=ds, kind=kind)
            if not path.exists():
                continue
            single = one_gpu(cluster, ds)
            for r in read(path):
                if kind == "scalability":
                    nodes, replicas = int(r["num_nodes"]), int(r["num_replicas"])
                    gpus = math.ceil(replicas / nodes)  # spread as evenly as the replicas allow; the busiest machine
                else:
                    if len(r["placement"]) != 1:
                        continue  # several machines: the scalability files cover those
                    nodes, replicas = 1, int(r["placement"])
                    gpus = replicas
                if replicas < 2:
                    continue
                bsz = int(float(r["local_bsz"]))
                if bsz not in single:
                    skipped["no one-GPU step at that batch"] += 1
                    continue
                if nodes > 1 and not cluster.links.network_gbps:
                    skipped[f"{name}: network not published"] += 1
                    continue
                out.append(Row(ds, name, gpus, nodes, replicas, bsz, single[bsz], float(r["step_time"]) * 1000,
                               float(r["sync_time"]) * 1000))  # fmt: skip
    return out, dict(skipped)


def predict(row: Row, eta: float = 1.0, network_gbps: float | None = None) -> parallel.ParallelStep:
    """The model's step for a row, every link's bandwidth scaled by eta (network_gbps: in place of the catalog's)."""
    links = CLUSTERS[row.cluster].links
    if network_gbps is not None:
        links = replace(links, network_gbps=network_gbps)
    if eta != 1.0:
        scaled = [None if x is None else x * eta for x in (links.intra_gbs, links.network_gbps)]
        links = replace(links, intra_gbs=scaled[0], network_gbps=scaled[1])
    return parallel.data_parallel_step(
        compute_ms=row.one_gpu_ms, backward_fraction=BACKWARD_FRACTION, gradient_bytes=GRADIENT_BYTES[row.dataset],
        gpus_per_node=row.gpus_per_node, nodes=row.nodes, links=links,
    )  # fmt: skip


def ape(pred: float, real: float) -> float:
    """Absolute percentage error."""
    return abs(pred - real) / real * 100


def loco_etas(all_rows: list[Row]) -> dict[str, float]:
    """Per held-out fold, the eta that minimises the mean step APE on the other folds' rows (never its own)."""
    errors: dict[str, list[list[float]]] = defaultdict(lambda: [[] for _ in ETAS])
    for row in all_rows:
        for i, eta in enumerate(ETAS):
            errors[FOLD[row.cluster]][i].append(ape(predict(row, eta).step_ms, row.step_ms))
    out = {}
    for held in errors:
        totals = [sum(sum(errors[f][i]) for f in errors if f != held) for i in range(len(ETAS))]
        out[held] = ETAS[min(range(len(ETAS)), key=totals.__getitem__)]
    return out


def table(group_rows: list[Row], etas: dict[str, float]) -> list[str]:
    """Markdown lines: per data set x cluster, model vs perfect scaling (and the LOCO-fitted model)."""
    lines = [
        "| data set | cluster | rows | step MAPE model | perfect scaling | ratio | eff. error model (pp) | perfect "
        "scaling (pp) | ratio | floor (pp) | step MAPE, LOCO-fitted eta (held out) | exposed predicted / sync measured "
        "(mean ms) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for row in group_rows:
        groups[(row.dataset, row.cluster)].append(row)
    for (ds, name), rs in sorted(groups.items()):
        preds = [predict(r) for r in rs]
        eta = etas.get(FOLD[name], 1.0)
        fitted = [predict(r, eta) for r in rs]
        model = statistics.fmean(ape(p.step_ms, r.step_ms) for p, r in zip(preds, rs, strict=True))
        base = statistics.fmean(ape(r.one_gpu_ms, r.step_ms) for r in rs)
        eff_model = statistics.fmean(
            abs(p.scaling_efficiency - r.one_gpu_ms / r.step_ms) * 100 for p, r in zip(preds, rs, strict=True)
        )
        eff_base = statistics.fmean(abs(1 - r.one_gpu_ms / r.step_ms) * 100 for r in rs)
        # No step model can be faster than the one-GPU step it is given: rows measured faster are error it must keep.
        floor = statistics.fmean(max(0.0, r.one_gpu_ms / r.step_ms - 1) * 100 for r in rs)
        loco = statistics.fmean(ape(p.step_ms, r.step_ms) for p, r in zip(fitted, rs, strict=True))
        exposed = statistics.fmean(p.exposed_ms for p in preds)
        sync = statistics.fmean(r.sync_ms for r in rs)
        lines.append(
            f"| {ds} | {name} | {len(rs)} | {model:.1f}% | {base:.1f}% | {model / base:.2f} | {eff_model:.1f} | "
            f"{eff_base:.1f} | {eff_model / eff_base:.2f} | {floor:.1f} | {loco:.1f}% (eta {eta:.3g}) | "
            f"{exposed:.1f} / {sync:.1f} |"
        )
    return lines


def split(group_rows: list[Row], limit: int) -> list[str]:
    """ImageNet rows at small batches (input-bound on one GPU) against larger ones: step MAPE model / baseline."""
    lines = []
    for label, keep in ((f"local_bsz <= {limit}", lambda b: b <= limit), (f"local_bsz > {limit}", lambda b: b > limit)):
        rs = [r for r in group_rows if r.dataset == "imagenet" and keep(r.local_bsz)]
        if rs:
            model = statistics.fmean(ape(predict(r).step_ms, r.step_ms) for r in rs)
            base = statistics.fmean(ape(r.one_gpu_ms, r.step_ms) for r in rs)
            lines.append(
                f"- ImageNet, {label}: {len(rs)} rows, step MAPE model {model:.1f}%, perfect scaling {base:.1f}%"
            )
    return lines


# EC2 caps one TCP flow at 5 Gbit/s between instances outside a cluster placement group, 10 within one (EC2 User
# Guide, "Amazon EC2 instance network bandwidth"). NCCL's socket transport opens 2 threads x 8 sockets only where it
# sees an ENA NIC (src/transport/net_socket.cc, vendor 0x1d0f); a pod's virtual interface has no such vendor, so it
# keeps its default of one socket per connection.
SINGLE_FLOW_GBPS = (5.0, 10.0)


def single_flow(multi: list[Row]) -> list[str]:
    """Markdown lines: Pollux's several-machine rows at the catalog network and at EC2's single-flow limits."""
    rows_ = [r for r in multi if r.cluster == "aws" and r.nodes > 1]
    lines = [
        "| data set | rows | eff. error (pp) at 50 Gbit/s (catalog) | at 10 Gbit/s | at 5 Gbit/s | step MAPE at 50 / "
        "10 / 5 |",
        "|---|---|---|---|---|---|",
    ]
    for ds in GRADIENT_BYTES:
        rs = [r for r in rows_ if r.dataset == ds]
        if not rs:
            continue
        eff, mape = [], []
        for gbps in (None, *sorted(SINGLE_FLOW_GBPS, reverse=True)):
            preds = [predict(r, network_gbps=gbps) for r in rs]
            pairs = list(zip(preds, rs, strict=True))
            eff.append(statistics.fmean(abs(p.scaling_efficiency - r.one_gpu_ms / r.step_ms) * 100 for p, r in pairs))
            mape.append(statistics.fmean(ape(p.step_ms, r.step_ms) for p, r in pairs))
        lines.append(
            f"| {ds} | {len(rs)} | {eff[0]:.1f} | {eff[1]:.1f} | {eff[2]:.1f} | "
            + " / ".join(f"{m:.1f}%" for m in mape)
            + " |"
        )
    return lines


FINDINGS = [
    "What the tables say:",
    "",
    "- The model adds a few ms to the measured one-GPU step (mean exposed all-reduce: last column, first figure), so "
    "it tracks the perfect-scaling baseline: slightly better where replicas do slow down (T4, V100, Quadro, 2080 Ti; "
    "ratios below 1), slightly worse on the DGX-A100s, where most multi-GPU steps are FASTER than the one-GPU step at "
    "the same batch (shares above): there the one-GPU reference itself is off by about 10%, which bounds any model.",
    "- The large errors are not the all-reduce the model describes. The measured sync time (last gradient to end of "
    "synchronisation, AdaptDL's `_final_callback`) is about 2 to 300 times the modelled exposed all-reduce, and on "
    "the DGX-A100 ImageNet rows it grows with the per-GPU batch (placement 88: about 13 ms at batch 20, 330 ms at "
    "800) while the gradient keeps its size: replicas waiting for each other. Sia's ImageNet job decodes JPEGs with 4 "
    "loader workers per replica, up to 8 replicas per machine (its one-GPU step is flat near 150 ms up to batch 57: "
    "input-bound). The model has no term for stragglers or input pipelines slowed by co-located replicas.",
    "- Transport as deployed: AdaptDL starts each replica as its own Kubernetes pod with its own hostname and "
    "/dev/shm (petuum/adaptdl sched/adaptdl_sched/controller.py, `_create_pod`) and NCCL tells machines apart by "
    "hostname + boot id (src/misc/utils.cc `getHostHash`), so replicas on one machine may have used NCCL's network "
    "transport, not NVLink/PCIe peer-to-peer; no file records which. The V100 (azure) one-machine CIFAR-10 sync time "
    "(3 ms on 2 GPUs, 27 ms on 4, 68 ms on 8, against < 1 ms modelled over NVLink) is consistent with that, or with "
    "stragglers. Traincast predicts a normal launch (torchrun; NCCL on NVLink/PCIe inside a machine): these rows "
    "cannot confirm the link figures.",
    "- One derating of every link (LOCO-fitted eta) does not transfer between clusters: held out, it helps most aws, "
    "azure and rtx groups and hurts every dgx and quad group, so prediction/parallel.py applies none.",
    "- Pollux's several-machine T4 rows are the network the pods got: at EC2's 5 Gbit/s single-flow figure (table "
    "above, not fitted) the model's efficiency is within 10 points on both data sets (6.1 and 5.7), against 32 and 37 "
    "at the catalog's 50 Gbit/s; 10 Gbit/s (a cluster placement group) leaves 15 to 21. Which figure held is not "
    "recorded, so this explains the rows rather than scoring the model; it is why jobs can give `internode_gbps`.",
    "- Within one machine on synthetic data (Lambda's 1..8 GPU runs of V100, A100, H100, H200 and RTX cards) the "
    'model is within 10 points on 147 of 148 pairs: section "Data-parallel scaling, synthetic data (Lambda)".',
    "- Not checked: NVSwitch H100/A100 machines across machines over EFA, InfiniBand or GPUDirect-TCPX at "
    "data/interconnect.csv's bandwidths (no public multi-machine step times of them in /work/shared/data/public), "
    "and the RTX 2080 Ti multi-machine rows (no published network).",
]


def main() -> None:
    """Score the model and the baseline on every row; print; write the section unless --no-write."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    multi, skipped_multi = rows("scalability")
    single, skipped_single = rows("placements")
    etas = loco_etas(list(dict.fromkeys(multi + single)))  # quad's and dgx-ext's one-machine rows are in both
    figures = ["| cluster | GPUs | GPUs per machine | link figures used |", "|---|---|---|---|"] + [
        f"| {name} | {c.hardware} | {c.gpus_per_node} | {c.figures} |" for name, c in CLUSTERS.items()
    ]
    skipped = {**skipped_multi, **{f"one machine, {k}": v for k, v in skipped_single.items()}}
    body = "\n".join(
        [
            f"`{COMMAND}` ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC). Model: `prediction/parallel.py` (NCCL ring/tree "
            "cost model, DDP buckets overlapping backward). Inputs per row: the MEASURED one-GPU step at the same "
            "per-GPU batch (compute), backward = 2/3 of it, fp32 gradients (ResNet-50 25,557,032 parameters = "
            "102.2 MB; CIFAR ResNet-18 11,173,962 = 44.7 MB), 25 MiB buckets, and the link figures below. Modelled: "
            "only the all-reduce and its overlap; everything else is the measured one-GPU step. Baseline, same rows, "
            "same run: perfect scaling (step = one-GPU step, efficiency 1). Measured efficiency = one-GPU step / "
            "multi-GPU step at the same per-GPU batch. Data: Pollux (aws) and Sia (the rest), "
            "`/work/shared/data/public/{pollux,sia}`, not our measurements.",
            "",
            *figures,
            "",
            "Scalability files (every row with more than one replica; GPUs spread evenly over num_nodes machines):",
            "",
            *table(multi, etas),
            "",
            *split(multi, 57),
            "",
            "One machine, 2..8 GPUs (placements files, placement a single digit):",
            "",
            *table(single, etas),
            "",
            "Pollux's several-machine rows (aws) with the network a pod gets: AdaptDL runs each replica in its own "
            "Kubernetes pod, where NCCL's socket transport keeps one socket per connection (it opens 2 threads x 8 "
            "only on an ENA NIC it can see, src/transport/net_socket.cc), and EC2 caps one TCP flow at 5 Gbit/s "
            'outside a cluster placement group, 10 within one (EC2 User Guide, "Amazon EC2 instance network '
            'bandwidth"). Neither figure is fitted; the rows do not say which applied, nor how many connections '
            "NCCL's channels opened (two would double the figure). A job can say this with `internode_gbps`.",
            "",
            *single_flow(multi),
            "",
            "Multi-GPU rows faster than the one-GPU step at the same batch (both tables): "
            + ", ".join(
                f"{name} {100 * sum(r.step_ms < r.one_gpu_ms for r in rs) / len(rs):.0f}%"
                for name in CLUSTERS
                if (rs := [r for r in multi + single if r.cluster == name])
            )
            + ".",
            "",
            f"Rows left out: {', '.join(f'{k}: {v}' for k, v in sorted(skipped.items())) or 'none'}. "
            "LOCO-fitted eta: one fraction of every link's bandwidth, fitted (grid 0.001..1) on the other clusters' "
            "rows of both tables and scored on the held-out cluster (dgx and dgx-ext are one fold); the model "
            "columns use no fitted constant. Floor: the efficiency error no step model can avoid, since none is "
            "faster than the one-GPU step it is given: the mean of (measured efficiency - 1) where that is above 0.",
            "",
            *FINDINGS,
        ]
    )
    print(body)
    if not args.no_write:
        write_section("Data-parallel scaling", body)


if __name__ == "__main__":
    main()

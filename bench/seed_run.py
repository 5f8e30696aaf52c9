"""Two published record runs asked of Traincast as a user would ask them, predicted beside measured.

Mikami et al. 2018 (arXiv:1811.05233; figures as NVIDIA's news post of the paper reproduces them): ResNet-50 on
ImageNet, 90 epochs, in 224 s on 2,176 V100 (ABCI: nodes of 4 V100 SXM2 on NVLink, 2 x InfiniBand EDR each), global
batch 34K then 68K (batch-size control; 16 then 32 per GPU), 2D-Torus all-reduce, Neural Network Libraries; and
91.62% scaling efficiency on 1,088 GPUs. Cho et al. 2017 (PowerAI DDL, arXiv:1708.02188, abstract): ResNet-50, 90
epochs, 50 minutes on 64 IBM S822LC (4 P100 each), Torch with DDL's multi-ring all-reduce.

Each machine is registered as an own machine type with its links (figures ASSUMED where the papers do not give them:
see FIGURES), then jobs ask the runs over HTTP. Needs the stack (`make up`).

    .venv/bin/python bench/seed_run.py             # print, and write docs/PERFORMANCE.md's section
    .venv/bin/python bench/seed_run.py --no-write  # print only
"""

import argparse
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.perf_doc import write_section  # noqa: E402

TITLE = "Record runs asked of Traincast (bench/seed_run.py)"
COMMAND = ".venv/bin/python bench/seed_run.py"
# V100 SXM2 16GB and P100 SXM2 16GB: NVIDIA's datasheets. Links: ABCI's 2 x EDR per node (the paper's table, via
# NVIDIA's post); NVLink 2.0 between each pair of a 4-GPU node, two links a pair at NCCL's 20 GB/s each (ASSUMED:
# the paper does not give the node's wiring); the S822LC's P100 NVLink 1.0 and one 100 Gbit/s EDR port a server
# (ASSUMED: the abstract names neither).
FIGURES: dict[str, dict[str, Any]] = {
    "abci-node": {
        "gpu": "V100-SXM2-16GB", "gpu_count": 4, "gpu_memory_gib": 16, "gpu_fp32_tflops": 15.7,
        "gpu_fp16_tflops": 125, "gpu_mem_bandwidth_gbs": 900, "gpu_sm_count": 80, "gpu_l2_mib": 6,
        "gpu_tdp_watts": 300, "gpu_compute_capability": "7.0", "price_usd_per_hour": 1.0,
        "gpu_link": "nvlink", "gpu_link_gbs": 40, "nics": 2, "nic_gbps": 100, "network_rdma": True,
    },
    "ibm-s822lc": {
        "gpu": "P100-SXM2-16GB", "gpu_count": 4, "gpu_memory_gib": 16, "gpu_fp32_tflops": 10.6,
        "gpu_fp16_tflops": 21.2, "gpu_mem_bandwidth_gbs": 732, "gpu_sm_count": 56, "gpu_l2_mib": 4,
        "gpu_tdp_watts": 300, "gpu_compute_capability": "6.0", "price_usd_per_hour": 1.0,
        "gpu_link": "nvlink", "gpu_link_gbs": 40, "nics": 1, "nic_gbps": 100, "network_rdma": True,
    },
}  # fmt: skip
COMMON = {"cnns": ["resnet50"], "batch_sizes": [16, 32, 64], "gpus": 4, "image_size": 224, "epochs": 90,
          "optimizer": "sgd", "momentum": 0.9}  # fmt: skip
# (label, machine, request changes, measured seconds or None, what was measured)
RUNS: list[tuple[str, str, dict[str, Any], float | None, str]] = [
    ("Mikami: 2,176 V100, 34K->68K, 2D-Torus, mixed precision", "abci-node",
     {"nodes": 544, "precision": "amp_fp16", "allreduce": "torus_2d"}, 224.0, "224 s, 90 epochs"),
    ("same, NCCL's ring/tree instead of the 2D-Torus", "abci-node",
     {"nodes": 544, "precision": "amp_fp16", "allreduce": "nccl"}, 224.0, "224 s, 90 epochs"),
    ("Mikami: 1,088 V100 (scaling efficiency)", "abci-node",
     {"nodes": 272, "precision": "amp_fp16", "allreduce": "torus_2d"}, None, "91.62% scaling efficiency"),
    ("Cho: 256 P100, fp32, multi-ring (NCCL ring/tree here)", "ibm-s822lc",
     {"nodes": 64, "precision": "fp32", "allreduce": "nccl"}, 3000.0, "50 min, 90 epochs"),
]  # fmt: skip


def api() -> Any:
    """The CLI's HTTP client on the running stack, with the local admin key."""
    from cli.client import Api

    port = os.environ.get("API_PORT", "8000")
    return Api(os.environ.get("TRAINCAST_API_URL", f"http://127.0.0.1:{port}"), timeout=120)


def register(client: Any) -> None:
    """The record runs' machines as own machine types (kept when they exist)."""
    from cli.client import CliError

    for name, figures in FIGURES.items():
        try:
            client.call("GET", f"/v1/machines/{name}")
        except CliError:
            client.call("POST", "/v1/machines", json={"name": name, **figures})


def ask(client: Any, machine: str, changes: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """The job's points by per-GPU batch size, as the API answers them."""
    from cli.jobs import follow

    job = client.call("POST", "/v1/jobs", json=COMMON | {"machines": [machine]} | changes)
    done = follow(client, job["id"], show=False)
    if done["status"] != "succeeded":
        raise SystemExit(f"job {job['id']}: {done['status']} {done.get('error')}")
    return {p["batch_size"]: p for p in done["result"]["predictions"] if p["nodes"] == changes["nodes"]}


def report(rows: list[tuple[str, dict[int, dict[str, Any]], float | None, str]]) -> str:
    """The table: predicted at 16 and 32 per GPU (the phases' bounds), measured, and the scaling efficiency (also at
    64 per GPU: 68K over 1,088 GPUs)."""
    out = [
        "| run | all 90 epochs at 16 per GPU | all at 32 per GPU | measured | predicted / measured | "
        "scaling efficiency at 16 / 32 / 64 | exposed all-reduce ms at 32 | all-reduce assumed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, points, measured, what in rows:
        lo, hi, big = points[16], points[32], points[64]
        ratio = (
            "" if measured is None else f"{hi['total_seconds'] / measured:.2f} to {lo['total_seconds'] / measured:.2f}"
        )
        out.append(
            f"| {label} | {lo['total_seconds']:.0f} s | {hi['total_seconds']:.0f} s | {what} | {ratio} | "
            f"{lo['scaling_efficiency']:.3f} / {hi['scaling_efficiency']:.3f} / {big['scaling_efficiency']:.3f} | "
            f"{hi['exposed_allreduce_ms']:.2f} | "
            f"{hi.get('allreduce_algorithm') or ''} |"
        )
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    client = api()
    register(client)
    rows = [(label, ask(client, machine, changes), measured, what) for label, machine, changes, measured, what in RUNS]
    table = report(rows)
    print(table)
    if not args.no_write:
        when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        write_section(
            TITLE,
            f"`{COMMAND}` ({when}); the runs, their sources and what the model leaves out: "
            f"[SEED_RUN.md](SEED_RUN.md). Reference predictions (no agent on these machines).\n\n{table}\n",
        )


if __name__ == "__main__":
    main()

"""`traincast machines [list] | add`: the machine type catalog, and your own GPUs by their specs (over HTTP)."""

import argparse
import json
import re
from typing import Any

from cli import render
from cli.client import Api, CliError

# Words a person may use for a provider, as the page accepts them (api/static/app.js PROVIDER_WORDS).
PROVIDER_WORDS = {"aws": "aws amazon ec2", "gcp": "gcp google cloud gce", "azure": "azure microsoft",
                  "local": "local"}  # fmt: skip


def provider_of(word: str, present: set[str]) -> str:
    """The provider a word names ('google' → gcp, case aside); CliError for none of the listed machine types'."""
    folded = word.casefold()
    for provider in sorted(present):
        if folded == provider.casefold() or folded in PROVIDER_WORDS.get(provider, "").split():
            return provider
    raise CliError(f"--provider {word!r}: no machine type has that provider; known: {', '.join(sorted(present))}")


# `machines add` flags → POST /v1/machines fields; the API validates them (one place).
REQUIRED = {"gpu": str, "gpu_count": int, "price_usd_per_hour": float}
# Each left out is the figure of the GPU --gpu names where data/gpus.csv knows it (the API fills them in).
FIGURES = {
    "gpu_memory_gib": float, "gpu_fp32_tflops": float, "gpu_fp16_tflops": float, "gpu_mem_bandwidth_gbs": float,
    "gpu_sm_count": int, "gpu_l2_mib": float, "gpu_tdp_watts": float,
}  # fmt: skip
OPTIONAL = {"gpu_compute_capability": str, "gpu_tf32_tflops": float, "gpu_fp16_acc16_tflops": float,
            "vcpus": int, "memory_gib": float, "provider": str,
            "gpu_link": str, "gpu_link_gbs": float, "nics": int, "nic_gbps": float}  # fmt: skip
# What the flags mean, for --help (the API checks the values).
LINK_HELP = {
    "gpu": "the GPU model, e.g. RTX-4090 or 'GeForce RTX 4090'; one Traincast knows (data/gpus.csv) fills in every "
    "figure flag left out",
    "gpu_count": "GPUs in one machine",
    "price_usd_per_hour": "what one machine costs an hour (0 for your own)",
    "gpu_memory_gib": "memory of one GPU, GiB",
    "gpu_fp32_tflops": "FP32 TFLOPS of one GPU (CUDA cores)",
    "gpu_fp16_tflops": "dense FP16 tensor TFLOPS with FP32 accumulate, as on the datasheet",
    "gpu_mem_bandwidth_gbs": "memory bandwidth, GB/s",
    "gpu_sm_count": "streaming multiprocessors",
    "gpu_l2_mib": "L2 cache, MiB",
    "gpu_tdp_watts": "board power, W",
    "gpu_fp16_acc16_tflops": "dense FP16 tensor TFLOPS with FP16 accumulate, where the datasheet gives it apart "
    "(GeForce)",
    "gpu_link": "how its GPUs reach each other: nvswitch, nvlink, pcie (default with several GPUs) or none",
    "gpu_link_gbs": "GB/s an all-reduce within the machine gets per GPU, each way (NCCL bus bandwidth; "
    "pcie default 24)",
    "nics": "network interfaces to other machines (with --nic-gbps and --rdma or --tcp)",
    "nic_gbps": "Gbit/s of each network interface",
}


_FIELDS = re.compile(r"\b(" + "|".join(k for k in (*REQUIRED, *FIGURES, *OPTIONAL) if "_" in k) + r")\b")


def as_flags(message: str) -> str:
    """The API's refusal of `machines add` with its field names spelt as the flags a CLI user types."""
    return _FIELDS.sub(lambda m: "--" + m.group(1).replace("_", "-"), message)


def add_parser(sub: Any) -> None:
    """Add the `machines` command and its sub-commands."""
    ma = sub.add_parser("machines", help="machine types (aws, gcp, azure, your own): list, add")
    msub = ma.add_subparsers(dest="machines_command")
    ls = msub.add_parser("list", help="every machine type with its GPU and prices (the default)")
    ls.add_argument(
        "--provider",
        default=None,
        help="only this provider: aws (amazon), gcp (google), azure (microsoft), local, or your own",
    )
    ls.add_argument("--json", action="store_true")
    ad = msub.add_parser(
        "add", help="register a machine type by its GPU (a known one's figures, or yours); predicted at once",
        description="e.g. traincast machines add lab-4090x2 --gpu RTX-4090 --gpu-count 2 --price-usd-per-hour 0",
    )  # fmt: skip
    ad.add_argument("name")
    for flag, kind in {**REQUIRED, **FIGURES, **OPTIONAL}.items():
        ad.add_argument(
            f"--{flag.replace('_', '-')}", type=kind, required=flag in REQUIRED, dest=flag, help=LINK_HELP.get(flag)
        )
    transport = ad.add_mutually_exclusive_group()
    transport.add_argument("--rdma", action="store_true", default=None, dest="network_rdma",
                           help="the network is RDMA (InfiniBand, RoCE, EFA)")  # fmt: skip
    transport.add_argument("--tcp", action="store_false", dest="network_rdma", help="the network is TCP sockets")
    ad.add_argument(
        "--gpu-bf16", action=argparse.BooleanOptionalAction, default=None, dest="gpu_bf16",
        help="the GPU computes in bf16 (default: compute capability 8.0 or more)",
    )  # fmt: skip


def run(api: Api, args: argparse.Namespace) -> int:
    """Dispatch a `machines` sub-command."""
    if args.machines_command == "add":
        body = {
            "name": args.name,
            **{
                k: getattr(args, k)
                for k in (*REQUIRED, *FIGURES, *OPTIONAL, "gpu_bf16", "network_rdma")
                if getattr(args, k) is not None
            },
        }
        try:
            row = api.call("POST", "/v1/machines", json=body)
        except CliError as exc:
            raise CliError(as_flags(str(exc))) from None
        nics = row.get("nics")
        links = f", {nics} x {row['nic_gbps']:g} Gbit/s {'RDMA' if row['network_rdma'] else 'TCP'}" if nics else ""
        print(
            f"{row['name']}: registered ({row['gpu_count']} x {row['gpu']}, ${row['price_usd_per_hour']:.2f}/h{links})"
        )
        if "data/gpus.csv" in (row.get("specs_source") or ""):
            print(f"  GPU figures: {row['specs_source']}")
        return 0
    rows = api.call("GET", "/v1/machines")["machines"]
    if (word := getattr(args, "provider", None)) is not None:
        provider = provider_of(word, {r["provider"] for r in rows})
        rows = [r for r in rows if r["provider"] == provider]
    if getattr(args, "json", False):
        print(json.dumps(rows, indent=2))
        return 0
    print(render.table([_row(r) for r in rows], ["machine type", "provider", "gpus", "gpu", "$/h", "spot $/h"]))
    return 0


def _row(r: dict[str, Any]) -> list[str]:
    spot = r.get("spot_price_usd_per_hour")
    return [
        r["name"],
        r["provider"],
        str(r["gpu_count"]),
        r["gpu"] or "-",
        f"{r['price_usd_per_hour']:.3f}",
        "-" if spot is None else f"{spot:.3f}",
    ]

"""Every built-in CNN's step-time curve over batch 1-256, on eight GPUs in every setting: the shapes a curve must keep.

Run: .venv/bin/python bench/curves.py  (no database; about a minute; writes its section of docs/PERFORMANCE.md)
The shipped reference model answers each built-in CNN (224 px; inception_v3 at 299) on T4, A10G, L4, V100, A100,
H100, RTX 3090 and L40S, in fp32, amp_fp16 and amp_bf16 (where the GPU has bf16), NCHW and NHWC, cudnn.benchmark off
and on, SGD with momentum and AdamW, at batch 1, 8, 16, 32, 64, 128 and 256. Counted: curves whose step gets more
than 1% faster at a larger batch (physics says never), and, as information, where autocast answers slower than fp32
at batch 256 (on our H100 some depthwise-heavy CNNs measured so: data/reference/h100/steps.jsonl).
"""

import itertools
import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.perf_doc import write_section  # noqa: E402
from prediction.reference import load  # noqa: E402
from prediction.reference.sanity import gpu_rows  # noqa: E402
from prediction.reference.specs import GpuSpecs  # noqa: E402
from prediction.reference.wholestep import network  # noqa: E402
from shared.training import Precision, TrainConfig  # noqa: E402

COMMAND = ".venv/bin/python bench/curves.py"
ROOT = Path(__file__).resolve().parent.parent
GPUS = ("T4", "A10G", "L4", "V100-SXM2-16GB", "A100-SXM4-40GB", "H100-SXM5-80GB", "RTX-3090", "L40S")
BATCHES = (1, 8, 16, 32, 64, 128, 256)
# A step more than this much faster at a larger batch counts as a break.
TOLERANCE = 0.01
Key = tuple[str, str, str, bool, bool, str]


def builtin_cnns() -> list[str]:
    """The built-in CNNs' names (shared/cnn/builtin_cnns.json)."""
    doc = json.loads((ROOT / "shared" / "cnn" / "builtin_cnns.json").read_text())
    entries = next(iter(doc.values())) if isinstance(doc, dict) else doc
    return [e["name"] if isinstance(e, dict) else e for e in entries]


def config(precision: Precision, nhwc: bool, benchmark: bool, optimizer: str) -> TrainConfig:
    """One training setting."""
    if optimizer == "sgd":
        return TrainConfig(optimizer="sgd", momentum=0.9, precision=precision, channels_last=nhwc,
                           cudnn_benchmark=benchmark)  # fmt: skip
    return TrainConfig(optimizer="adam", weight_decay=0.05, precision=precision, channels_last=nhwc,
                       cudnn_benchmark=benchmark)  # fmt: skip


def curves() -> dict[Key, list[float]]:
    """Step ms at BATCHES for every CNN, GPU and setting."""
    model, specs = load(), gpu_rows()
    out: dict[Key, list[float]] = {}
    for cnn in builtin_cnns():
        convs, work = network(cnn, 299 if cnn == "inception_v3" else 224)
        for name in GPUS:
            gpu, bf16 = GpuSpecs.from_row(specs[name]), specs[name]["bf16"].strip().lower() == "true"
            precisions: tuple[Precision, ...] = ("fp32", "amp_fp16", "amp_bf16")
            for precision, nhwc, benchmark, optimizer in itertools.product(
                precisions, (False, True), (False, True), ("sgd", "adamw")
            ):
                if precision == "amp_bf16" and not bf16:
                    continue
                training = config(precision, nhwc, benchmark, optimizer)
                steps = model.predict_steps(convs=convs, workload=work, batch_sizes=list(BATCHES), gpu=gpu,
                                            training=training)  # fmt: skip
                out[(cnn, name, precision, nhwc, benchmark, optimizer)] = [e.step_ms for e in steps]
    return out


def falls(ms: list[float]) -> float:
    """The largest ratio by which a smaller batch's step exceeds a larger one's (1: none)."""
    return max([1.0] + [ms[i] / min(ms[i + 1 :]) for i in range(len(ms) - 1)])


def report(found: dict[Key, list[float]]) -> str:
    """The section's Markdown."""
    broken = {k: falls(ms) for k, ms in found.items() if falls(ms) > 1 + TOLERANCE}
    slower: Counter[tuple[str, str]] = Counter()
    names: dict[tuple[str, str], set[str]] = {}
    for (cnn, gpu, precision, nhwc, benchmark, optimizer), ms in found.items():
        fp32 = found[(cnn, gpu, "fp32", nhwc, benchmark, optimizer)]
        if precision != "fp32" and ms[-1] > fp32[-1] * (1 + TOLERANCE):
            slower[(gpu, precision)] += 1
            names.setdefault((gpu, precision), set()).add(cnn)
    cnns = len({k[0] for k in found})
    lines = [
        f"Command: `{COMMAND}` (no database). The shipped reference model: {cnns} built-in CNNs x {len(GPUS)} GPUs "
        f"({', '.join(GPUS)}) x fp32 / amp_fp16 / amp_bf16 (where the GPU has bf16) x NCHW / NHWC x cudnn.benchmark "
        f"off / on x SGD with momentum / AdamW: {len(found):,} curves over batch {', '.join(map(str, BATCHES))}.",
        "",
        f"Curves whose step is more than {TOLERANCE:.0%} faster at some larger batch: **{len(broken)}** of "
        f"{len(found):,}"
        + (f" (worst {max(broken.values()):.2f}x: {max(broken, key=broken.__getitem__)})" if broken else "")
        + ".",  # fmt: skip
        "",
        "Autocast answered slower than fp32 at batch 256 (same CNN, GPU and setting), by GPU and precision: counted, "
        "not a break: on our H100, efficientnet_b0, mnasnet1_0 and shufflenet_v2_x1_0 measured so in bf16 at batch "
        "256, and CNNs whose convs cannot use tensor cores (channel counts not multiples of 8, depthwise) gain little "
        "from 16-bit math while they pay autocast's casts.",
        "",
        "| GPU | precision | curves (of the CNNs x settings) | CNNs |",
        "|---|---|---:|---|",
    ]
    for (gpu, precision), n in sorted(slower.items()):
        listed = sorted(names[(gpu, precision)])
        lines.append(f"| {gpu} | {precision} | {n} | {', '.join(listed[:8])}{' …' if len(listed) > 8 else ''} |")
    return "\n".join(lines)


def main() -> int:
    """Print and record."""
    body = report(curves())
    print(body)
    if "--no-write" not in sys.argv:
        write_section("Step-time curves of every built-in CNN (bench/curves.py)", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())

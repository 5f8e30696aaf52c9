"""The memory model's error against the peaks the agent stored with its whole steps (run by bench/memory.py).

The agent records each step's allocator peak (gpu_agent/step_bench.py, migration 0022): on a GPU
torch.cuda.max_memory_allocated, on a CPU torch.profiler's allocation records, the quantity the model's
`tensors_only` peak predicts. Every stored peak of a torchvision CNN is compared with the model, per
device and training configuration; nothing is fitted here.
"""

import statistics
from collections import defaultdict
from typing import Any

from bench.memory_public import ape, workload
from shared.cnn import step_memory
from shared.cnn import zoo as cnn_zoo
from shared.core.db import transaction
from shared.training import TrainConfig

# Owner's read for a report; gpu_agent/store.py writes these rows.
SELECT_PEAKS = """
SELECT s.cnn_name, s.image_size, s.batch_size, s.optimizer, s.momentum, s.weight_decay, s.precision,
       s.channels_last, s.cudnn_benchmark, s.peak_memory_bytes, s.machine_type, e.details->>'device_type' AS device,
       e.details->>'threads' AS threads
FROM step_measurements s JOIN environments e ON e.id = s.environment_id
WHERE s.peak_memory_bytes IS NOT NULL
ORDER BY s.machine_type, s.cnn_name, s.image_size, s.batch_size"""


def stored_peaks(database_url: str | None = None) -> list[dict[str, Any]]:
    """Every stored step peak of a torchvision CNN (uploaded CNNs have no workload to read here)."""
    with transaction(database_url) as cur:
        cur.execute(SELECT_PEAKS)
        return [dict(r) for r in cur.fetchall() if r["cnn_name"] in cnn_zoo.builtin_names()]


def modelled(r: dict[str, Any]) -> float:
    """The model's allocator peak for a stored step."""
    peak = step_memory.step_peak(
        workload(r["cnn_name"], r["image_size"]), r["batch_size"], optimizer=r["optimizer"], momentum=r["momentum"],
        weight_decay=r["weight_decay"], precision=r["precision"], gpu=str(r["device"]).startswith("cuda"),
        tensors_only=True,
    )  # fmt: skip
    assert peak is not None
    return peak.total


def report(rows: list[dict[str, Any]]) -> tuple[list[str], dict[str, float]]:
    """Error per machine type and training configuration, and over all stored peaks."""
    groups: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    every: list[float] = []
    for r in rows:
        config = TrainConfig(
            optimizer=r["optimizer"], momentum=r["momentum"], weight_decay=r["weight_decay"],
            precision=r["precision"], channels_last=r["channels_last"], cudnn_benchmark=r["cudnn_benchmark"],
        )  # fmt: skip
        error = ape(modelled(r), r["peak_memory_bytes"])
        groups[(r["machine_type"], f"{r['device']}, {r['threads']} threads", config.cost_key())].append(error)
        every.append(error)
    lines = [
        "| machine type | device | training | steps | CNNs | MAPE | max error |",
        "|---|---|---|---|---|---|---|",
    ]
    for (machine_type, device, key), errors in sorted(groups.items()):
        cnns = len({r["cnn_name"] for r in rows if r["machine_type"] == machine_type})
        lines.append(
            f"| {machine_type} | {device} | {key} | {len(errors)} | {cnns} | {statistics.fmean(errors):.1f}% | "
            f"{max(errors):.1f}% |"
        )
    summary: dict[str, float] = (
        {"steps": len(every), "mape": statistics.fmean(every), "max": max(every)} if every else {"steps": 0}
    )
    return lines, summary

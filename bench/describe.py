"""Describing a built-in CNN at a size not seen before, as GET /v1/cnns/{name}?image_size=N does:
`python bench/describe.py`.

The baseline in the same run: a fresh interpreter per description (`python -m shared.cnn.zoo NAME SIZE CLASSES`,
what the API ran before the warm child). Then shared/cnn/describer.py's warm child, started cold once (its first
answer pays torch's import) and then asked the same CNNs at sizes it has not traced. Wall seconds per description.
"""

import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CASES = (("resnet18", 96), ("resnet50", 160), ("densenet201", 288), ("efficientnet_b0", 200), ("vgg16", 128))


def fresh(name: str, size: int) -> float:
    """One description by a new interpreter: seconds."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "shared.cnn.zoo", name, str(size), "1000"], check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> int:
    from shared.cnn.describer import Describer

    baseline = [fresh(name, size) for name, size in CASES]
    describer = Describer()
    try:
        started = time.perf_counter()
        describer.describe("resnet18", 64, 1000, timeout_s=120)
        cold = time.perf_counter() - started
        warm = []
        for name, size in CASES:
            started = time.perf_counter()
            out = describer.describe(name, size + 8, 1000, timeout_s=120)  # sizes neither run traced before
            warm.append(time.perf_counter() - started)
            assert "conv_count" in out, out
    finally:
        describer.close_if_idle()
    rows = [
        f"| {name} at {size} / {size + 8} px | {b:.2f} | {w:.2f} | {b / w:.0f}× |"
        for (name, size), b, w in zip(CASES, baseline, warm, strict=True)
    ]
    intro = (
        f"`.venv/bin/python bench/describe.py` on {platform.node()} ({platform.machine()}, 2 cores shared with other "
        "work). Wall seconds per description of a built-in CNN at a size not traced before (GET /v1/cnns/{name}"
        "?image_size=N): the baseline, a fresh interpreter per description (the API's way before), against the warm "
        f"child, which answered its first request cold in {cold:.2f} s (torch's import) and then:"
    )
    b, w = statistics.median(baseline), statistics.median(warm)
    table = ["| CNN | fresh interpreter s | warm child s | ratio |", "|---|---|---|---|", *rows]
    body = "\n".join([intro, "", *table, f"| median | {b:.2f} | {w:.2f} | {b / w:.0f}× |"])
    print(body)
    from bench.perf_doc import write_section

    write_section("Describing a built-in CNN at a new size (bench/describe.py)", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())

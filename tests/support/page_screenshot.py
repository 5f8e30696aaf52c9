"""Take the README's screenshot of the web page (docs/img/page.png) with less tiny settings than the test's.

    .venv/bin/python -m tests.support.page_screenshot [--out docs/img/page.png] [--decision]

Starts a private stack (its own database and Redis database, as the tests do), calibrates `local`,
then predicts ResNet-50 through the page on `local` (benchmarked) and on GPU machine types of three
clouds that have no agent (reference predictions, at once), hovers a GPU point and saves the
viewport at laptop size. Takes several minutes on a 2-core CPU; not part of the test run.
--decision (docs/img/page.png): no calibration; ResNet-50 with AMP on 8-GPU machine types of three clouds, 1 or 8
GPUs on 1 or 2 machines, with a deadline, down to the decision table with its reasons.
"""

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

from tests.support.browser import LAPTOP, Page, chromium, png_size, wait_until
from tests.support.services import fresh_database, fresh_redis_db, servers
from tests.support.stack import ROOT, Stack, bearer

CNNS = ["resnet50"]
# (provider, GPU model): the cheapest single-GPU machine type of each, as a person comparing clouds would pick.
GPUS = [("aws", "T4"), ("gcp", "T4"), ("gcp", "L4"), ("aws", "A10G"), ("azure", "A100"), ("gcp", "H100")]
CALIBRATION = ["--cnns", "resnet18,mobilenet_v2,squeezenet1_1,densenet121,efficientnet_b0", "--batch-sizes", "8,16,32"]
# ImageNet downsampled to 64 px: the CPU agent measures local's layers at this size in minutes, not an hour.
IMAGE_SIZE = "64"
BATCH_SIZES = "16,32,64,128,256"
# The GPU type whose point is hovered in the picture: the fastest, top left, so its label opens over empty space.
HOVER = ("gcp", "H100")


def gpu_machines(url: str, key: str) -> dict[tuple[str, str], str]:
    """The cheapest single-GPU machine type per (provider, GPU model prefix) in GPUS, from GET /v1/machines."""
    listed = httpx.get(f"{url}/v1/machines", headers=bearer(key), timeout=30).json()["machines"]
    chosen = {}
    for provider, gpu in GPUS:
        fits = [
            m for m in listed if m["provider"] == provider and (m["gpu"] or "").startswith(gpu) and m["gpu_count"] == 1
        ]
        if not fits:
            raise SystemExit(f"no single-GPU {gpu} machine type from {provider} in GET /v1/machines")
        chosen[(provider, gpu)] = min(fits, key=lambda m: m["price_usd_per_hour"])["name"]
    return chosen


DECISION_MACHINES = ["p4d.24xlarge", "p5.48xlarge", "a2-highgpu-8g"]


def decision(page: Page, out: Path) -> None:
    """A multi-GPU question through the page, and the decision that answers it."""
    page.open()
    page.choose("cnn-picker", "resnet50")
    for name in DECISION_MACHINES:
        page.choose("machine-picker", name)
    page.js(
        "for (const s of document.querySelectorAll('.picker-search')) "
        "{ s.value = ''; s.dispatchEvent(new Event('input')); }"
    )
    page.js("document.getElementById('precision').value = 'amp_fp16'")
    page.type_into("#gpus", "1,8")
    page.type_into("#nodes", "1,2")
    page.type_into("#deadline-hours", "6")
    page.type_into("#batch-list", "64,128,256")
    if page.search(timeout=600) != "done":
        raise SystemExit(f"the page shows an error: {page.find('#error').text}")
    bottom = page.js("return Math.ceil(document.getElementById('decisions').getBoundingClientRect().bottom)")
    page.driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": LAPTOP[0], "height": max(LAPTOP[1], bottom + 14), "deviceScaleFactor": 1, "mobile": False},
    )
    page.screenshot(out)


def main() -> int:
    """Run the stack, calibrate, drive the page, save the PNG."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "page.png")
    parser.add_argument("--decision", action="store_true", help="a multi-GPU decision, no calibration")
    args = parser.parse_args()
    with (
        servers() as (admin_db, redis_server),
        fresh_database(admin_db) as db_url,
        fresh_redis_db(redis_server) as redis_url,
        tempfile.TemporaryDirectory() as tmp,
    ):
        env = {"DATABASE_URL": db_url, "REDIS_URL": redis_url, "BENCH_TIME_CAP_S": "0.3"}
        os.environ.update(env)
        from shared.core.migrate import migrate

        migrate(db_url)
        from shared import keys

        _row, key = keys.create(name="page-screenshot", scope="admin", rate_per_s=1000)
        env["TRAINCAST_API_KEY"] = key
        stack = Stack(env, Path(tmp))
        for name in ("api", "worker", "agent"):
            stack.start(name)
        try:
            stack.wait_ready(timeout=600)  # a shared 2-core machine can take minutes to import the API
            if args.decision:
                driver = chromium(Path(tmp) / "profile")
                try:
                    driver.get(f"{stack.url}/static/app.css")
                    driver.execute_script("localStorage.setItem('traincast.apiKey', arguments[0])", key)
                    decision(Page(driver, stack.url), args.out)
                finally:
                    driver.quit()
                print(f"saved {args.out} ({'x'.join(map(str, png_size(args.out)))})")
                return 0
            traincast = str(Path(sys.executable).parent / "traincast")
            calibrate = [traincast, "calibrate", "--machine", "local", *CALIBRATION, "--image-size", IMAGE_SIZE]
            calibrate += ["--timeout", "7200"]  # on a 2-core machine shared with other work, 30 min can fall short
            print("calibrating local…", file=sys.stderr)
            subprocess.run(calibrate, env={**stack.env, "TRAINCAST_API_URL": stack.url}, check=True, timeout=7500)
            driver = chromium(Path(tmp) / "profile")
            try:
                page = Page(driver, stack.url)
                driver.get(f"{stack.url}/static/app.css")
                driver.execute_script("localStorage.setItem('traincast.apiKey', arguments[0])", key)
                page.open()
                gpus = gpu_machines(stack.url, key)
                for cnn in CNNS:
                    page.choose("cnn-picker", cnn)
                for name in ["local", *gpus.values()]:
                    page.choose("machine-picker", name)
                # Show the whole lists again, as after a person's last pick.
                page.js(
                    "for (const s of document.querySelectorAll('.picker-search')) "
                    "{ s.value = ''; s.dispatchEvent(new Event('input')); }"
                )
                page.type_into("#image-size", IMAGE_SIZE)
                page.type_into("#batch-list", BATCH_SIZES)
                print("predicting through the page…", file=sys.stderr)
                state = page.search(timeout=3600)
                if state != "done":
                    raise SystemExit(f"the page shows an error: {page.find('#error').text}")
                # A laptop's width, and tall enough to show the plots down to the memory plot (a short scroll).
                bottom = page.js(
                    "return Math.ceil(document.getElementById('plot-memory').getBoundingClientRect().bottom)"
                )
                page.driver.execute_cdp_cmd(
                    "Emulation.setDeviceMetricsOverride",
                    {
                        "width": LAPTOP[0],
                        "height": max(LAPTOP[1], bottom + 14),
                        "deviceScaleFactor": 1,
                        "mobile": False,
                    },
                )
                # Hover one GPU type's point: its label shows the price, the time and that it is a reference answer.
                index = page.js(
                    "return document.getElementById('plot-cost').data.findIndex(t => t.meta.machine === arguments[0])",
                    gpus[HOVER],
                )
                page.hover("plot-cost", index)
                wait_until(lambda: page.js("return document.querySelector('#plot-cost .hovertext')"), 10, "hover")
                page.screenshot(args.out)
            finally:
                driver.quit()
        finally:
            stack.stop_all()
    print(f"saved {args.out} ({'x'.join(map(str, png_size(args.out)))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

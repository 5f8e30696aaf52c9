"""Take the README's screenshot of the web page (docs/img/page.png) with less tiny settings than the test's.

    .venv/bin/python -m tests.page_screenshot [--out docs/img/page.png]

Starts a private stack (its own database and Redis database, as the tests do), calibrates `local`,
predicts a few CNNs of different families on it through the page, hovers a point and saves the
viewport at laptop size. Takes several minutes on a 2-core CPU; not part of the test run.
"""

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.browser import Page, chromium, png_size, wait_until
from tests.conftest import ROOT, Stack
from tests.services import fresh_database, fresh_redis_db, servers

CNNS = ["resnet18", "resnet50", "mobilenet_v3_large", "efficientnet_b0", "squeezenet1_1"]
CALIBRATION = ["--cnns", "resnet18,mobilenet_v2,squeezenet1_1,densenet121,efficientnet_b0", "--batch-sizes", "8,16,32"]
IMAGE_SIZE = "64"
BATCH_SIZES = "8,16,32,64,128"


def main() -> int:
    """Run the stack, calibrate, drive the page, save the PNG."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "page.png")
    args = parser.parse_args()
    with (
        servers() as (admin_db, redis_server),
        fresh_database(admin_db) as db_url,
        fresh_redis_db(redis_server) as redis_url,
        tempfile.TemporaryDirectory() as tmp,
    ):
        env = {"DATABASE_URL": db_url, "REDIS_URL": redis_url, "BENCH_TIME_CAP_S": "0.3"}
        os.environ.update(env)
        from shared.migrate import migrate

        migrate(db_url)
        stack = Stack(env, Path(tmp))
        for name in ("api", "worker", "agent"):
            stack.start(name)
        try:
            stack.wait_ready()
            traincast = str(Path(sys.executable).parent / "traincast")
            calibrate = [traincast, "calibrate", "--machine", "local", *CALIBRATION, "--image-size", IMAGE_SIZE]
            print("calibrating local…", file=sys.stderr)
            subprocess.run(calibrate, env={**stack.env, "TRAINCAST_API_URL": stack.url}, check=True, timeout=3600)
            driver = chromium(Path(tmp) / "profile")
            try:
                page = Page(driver, stack.url)
                page.open()
                for cnn in CNNS:
                    page.choose("cnn-picker", cnn)
                page.choose("machine-picker", "local")
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
                # Hover the slowest point: its label opens leftwards, over the empty part of the plot.
                page.js(
                    "const d = document.getElementById('plot-cost').data;"
                    "const i = d.reduce((best, t, k) => (t.x[0] > d[best].x[0] ? k : best), 0);"
                    "Plotly.Fx.hover('plot-cost', [{curveNumber: i, pointNumber: 0}])"
                )
                wait_until(lambda: page.js("return document.querySelector('#plot-cost .hovertext')"), 10, "hover")
                page.screenshot(args.out)
            finally:
                driver.quit()
        finally:
            for name in list(stack.procs):
                stack.stop(name)
    print(f"saved {args.out} ({'x'.join(map(str, png_size(args.out)))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

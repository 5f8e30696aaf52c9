"""Debian's headless Chromium driven by Selenium, cut off from every network but this machine's loopback."""

import os
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.common.exceptions import JavascriptException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
LAPTOP = (1366, 900)
INSTALL_HINT = "run scripts/browser.sh (apt-get install chromium chromium-driver); scripts/test.sh does it"

# No name resolves but localhost, and anything not on loopback goes to a proxy port where nobody listens:
# a page that needs a CDN or any outside host fails here as it would on a machine with no internet.
OFFLINE_FLAGS = (
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE localhost",
    "--proxy-server=http://127.0.0.1:9",
    "--proxy-bypass-list=127.0.0.1;localhost",
)
FLAGS = (
    "--headless=new",
    "--no-sandbox",  # tests run as root in CI, where the sandbox cannot start
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--lang=en-US",
    f"--window-size={LAPTOP[0]},{LAPTOP[1]}",
)


def chromium(profile: Path) -> webdriver.Chrome:
    """A headless Chromium with a fresh profile, offline but for localhost, its viewport a laptop's."""
    # Selenium Manager would look for (and could download) a browser of its own: only Debian's is used.
    os.environ["SE_OFFLINE"] = "true"
    os.environ["SE_AVOID_STATS"] = "true"
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, *OFFLINE_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    # The window size includes no browser chrome in headless mode, but pin the viewport exactly for screenshots.
    width, height = LAPTOP
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
    )
    driver.set_script_timeout(30)
    return driver


def wait_until(check: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    """Call `check` until it returns something truthy; fail saying what was awaited."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except (JavascriptException, WebDriverException) as exc:  # page still loading
            last_error = exc
        time.sleep(interval)
    raise AssertionError(
        f"timed out after {timeout:.0f} s waiting for {what}" + (f" ({last_error})" if last_error else "")
    )


class Page:
    """The Traincast page in a browser: what a person does on it, and what the test reads back."""

    def __init__(self, driver: webdriver.Chrome, url: str) -> None:
        self.driver = driver
        self.url = url

    def open(self, query: str = "") -> None:
        """Load the page and wait until its lists are filled."""
        self.driver.get(f"{self.url}/{query}")
        wait_until(lambda: self.state() not in ("loading", ""), 30, "the page to load its lists")

    def state(self) -> str:
        """The page's body data-state: loading, idle, submitting, running, done or error."""
        return str(self.js("return document.body.dataset.state || ''"))

    def js(self, script: str, *args: Any) -> Any:
        """Run JavaScript in the page."""
        return self.driver.execute_script(script, *args)

    def find(self, css: str) -> WebElement:
        """One element by CSS selector."""
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def choose(self, picker: str, name: str) -> None:
        """Search a picker list for a name and tick it, as a person would."""
        search = self.find(f"#{picker} .picker-search")
        search.clear()
        search.send_keys(name)
        box = self.find(f'#{picker} li[data-value="{name}"] input')
        assert box.is_displayed(), f"{name} is not shown after searching for it"
        if not box.is_selected():
            self.find(f'#{picker} li[data-value="{name}"] label').click()
        assert box.is_selected()

    def type_into(self, css: str, text: str) -> None:
        """Replace an input's text."""
        field = self.find(css)
        field.clear()
        field.send_keys(text)

    def search(self, timeout: float = 180) -> str:
        """Click Search and wait until the job has finished one way or the other; the final state."""
        self.find("#search").click()
        return str(wait_until(lambda: self.state() in ("done", "error") and self.state(), timeout, "the job to finish"))

    def traces(self, plot: str) -> list[dict[str, Any]]:
        """The traces a plot holds, as plotly has them."""
        return list(self.js("return document.getElementById(arguments[0]).data || []", plot))

    def layout(self, plot: str) -> dict[str, Any]:
        """The layout the page gave a plot."""
        return dict(self.js("return JSON.parse(JSON.stringify(document.getElementById(arguments[0]).layout))", plot))

    def hover(self, plot: str, curve: int, point: int = 0) -> str:
        """Hover a point as a mouse would and return the label plotly draws."""
        self.js("Plotly.Fx.unhover(arguments[0])", plot)
        self.js(
            "Plotly.Fx.hover(arguments[0], [{curveNumber: arguments[1], pointNumber: arguments[2]}])",
            plot,
            curve,
            point,
        )
        script = (
            "const t = document.querySelector(`#${arguments[0]} .hoverlayer .hovertext`); return t && t.textContent"
        )
        return str(wait_until(lambda: self.js(script, plot), 10, f"the hover label in {plot}"))

    def viewport(self, width: int, height: int) -> None:
        """Resize the page's viewport (CSS pixels), as a window of that size would be."""
        self.driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        wait_until(lambda: self.js("return innerWidth") == width, 10, f"the viewport to be {width} px wide")

    def screenshot(self, path: Path) -> None:
        """Save the viewport as a PNG."""
        path.parent.mkdir(parents=True, exist_ok=True)
        assert self.driver.save_screenshot(str(path)), f"could not save {path}"


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's header."""
    data = path.read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)

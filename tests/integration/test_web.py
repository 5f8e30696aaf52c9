"""The web page at `/`, driven in Debian's headless Chromium against the real stack (API, worker, local agent)."""

import json
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.select import Select

from api.routers import web
from shared.core.db import transaction
from tests.integration.test_end_to_end import wait_for
from tests.support.browser import CHROMEDRIVER, CHROMIUM, INSTALL_HINT, LAPTOP, Page, chromium, png_size, wait_until
from tests.support.stack import ROOT, Stack, admin_key, http

TRAINCAST = str(Path(sys.executable).parent / "traincast")
# Where the test leaves its screenshot (.run/ is ignored by git); the README's comes from
# tests/support/page_screenshot.py.
SCREENSHOT = ROOT / ".run" / "test-web-page.png"
UNIT_SECONDS = {"seconds": 1, "minutes": 60, "hours": 3600, "days": 86400}
# Tiny on purpose: image size 32 and two batch sizes keep the CPU agent's work to seconds.
CNNS = ["resnet18", "squeezenet1_1"]
SIZES = [2, 4]
KEY_STORAGE = "traincast.apiKey"
FLEET_LAUNCHED = """
INSERT INTO fleet_instances (instance_id, machine_type, market, price_usd_per_hour)
VALUES (%s, 'g5.xlarge', 'spot', 1)"""


@pytest.fixture(scope="module")
def calibrated(full_stack: Stack) -> Stack:
    """The stack, with a predictor model for local calibrated here with tiny settings (none left by others)."""
    from worker import predictor

    before = predictor.latest(machine_type="local")
    env = {**full_stack.env, "TRAINCAST_API_URL": full_stack.url}
    args = ["--cnns", ",".join(CNNS), "--batch-sizes", ",".join(map(str, SIZES)), "--image-size", "32"]
    cal = subprocess.run(
        [TRAINCAST, "calibrate", "--machine", "local", *args, "--timeout", "300"],
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert cal.returncode == 0, cal.stderr
    model = predictor.latest(machine_type="local")
    assert model is not None and (before is None or model["id"] != before["id"])
    return full_stack


@pytest.fixture(scope="module")
def page(full_stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Page]:
    """One browser for the module, offline but for localhost."""
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        # A failure, not a skip: a missing browser must not pass for a tested page.
        pytest.fail(f"Chromium is not installed: {INSTALL_HINT}")
    driver = chromium(tmp_path_factory.mktemp("chromium-profile"))
    try:
        # The page keeps its API key in localStorage (what a person types in once): this run's admin key.
        driver.get(f"{full_stack.url}/static/app.css")
        driver.execute_script("localStorage.setItem(arguments[0], arguments[1])", KEY_STORAGE, admin_key())
        yield Page(driver, full_stack.url)
    finally:
        driver.quit()


def own_modules() -> set[str]:
    """The page's ES modules in api/static/, each checked against what its imports name."""
    names = {p.name for p in web.STATIC.glob("*.js")}
    for name in names:
        source = (web.STATIC / name).read_text(encoding="utf-8")
        imported = set(re.findall(r'^import \{[^}]*\} from "\./([\w.-]+\.js)";$', source, re.M))
        assert imported <= names, f"{name} imports {sorted(imported - names)}, not in api/static/"
        # No module over about 400 lines: one concern each.
        assert source.count("\n") <= 400, f"{name} has {source.count(chr(10))} lines"
    return names


def job_of(page: Page) -> dict[str, Any]:
    """The job the page followed, as the API returns it."""
    job_id = page.js("return window.traincast.state.jobId")
    assert job_id, "the page did not submit a job"
    job: dict[str, Any] = http.get(f"{page.url}/v1/jobs/{job_id}").json()
    return job


def unit_of(title: str) -> int:
    """Seconds per unit of an axis title such as 'Predicted training time (hours)'."""
    match = re.search(r"\((\w+)(?:, log scale)?\)$", title)
    assert match and match.group(1) in UNIT_SECONDS, f"axis title {title!r} names no time unit"
    return UNIT_SECONDS[match.group(1)]


def has_interval(prediction: dict[str, Any]) -> bool:
    """True when a prediction carries its p10 and p90 total time."""
    return all(isinstance(prediction.get(f"total_seconds_{q}"), float | int) for q in ("p10", "p90"))


def hourly(usd: float) -> str:
    """A price per hour as the page writes it: $0.526, $1.01."""
    return f"${usd:.3f}" if usd < 1 else f"${usd:.2f}"


def hidden_cnns(page: Page) -> list[str]:
    """The CNN of every trace hidden in either plot (left in the legend, greyed, to show it again)."""
    traces = page.traces("plot-batch") + page.traces("plot-cost")
    return [t["meta"]["cnn"] for t in traces if t.get("visible") in (False, "legendonly")]


def roles(traces: list[dict[str, Any]], role: str) -> list[dict[str, Any]]:
    """The traces the page drew for one purpose: line, band or point."""
    return [t for t in traces if (t.get("meta") or {}).get("role") == role]


def test_page_and_its_files_need_no_other_host(full_stack: Stack) -> None:
    """The HTML links only relative URLs; plotly.js comes from the installed package, cacheable for a year."""
    r = http.get(f"{full_stack.url}/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    links = re.findall(r'(?:src|href)="([^"]*)"', r.text)
    assert links and all(not re.match(r"^(?:[a-z]+:)?//", u, re.I) for u in links), links
    assert not re.search(r"https?://", r.text)
    for link in (u for u in links if u.startswith("static/")):
        assert http.get(f"{full_stack.url}/{link}").status_code == 200, link
    # The page's own files: its stylesheet and every ES module app.js imports, directly or not (no bundler).
    assert 'type="module" src="static/app.js"' in r.text
    assert own_modules() >= {"app.js", "util.js", "state.js", "api.js", "form.js", "jobs.js", "plots.js", "tables.js"}
    for own in ["static/app.css", *(f"static/{name}" for name in sorted(own_modules()))]:
        first = http.get(f"{full_stack.url}/{own}")
        assert first.status_code == 200, own
        assert not re.search(r"https?://", first.text), own
        # Revalidated on every load (a deploy shows at once), answered 304 while unchanged.
        assert first.headers["cache-control"] == "no-cache"
        again = http.get(f"{full_stack.url}/{own}", headers={"if-none-match": first.headers["etag"]})
        assert again.status_code == 304 and not again.content

    plotly_url = next(u for u in links if "plotly" in u)
    raw = web.plotly_js_path().read_bytes()
    zipped = http.get(f"{full_stack.url}/{plotly_url}", headers={"accept-encoding": "gzip"})
    assert zipped.headers["content-encoding"] == "gzip" and len(zipped.content) == len(raw)  # httpx inflates it
    assert zipped.content == raw and "max-age=31536000" in zipped.headers["cache-control"]
    assert zipped.num_bytes_downloaded < len(raw) / 2  # compressed on the wire, inflated by httpx
    plain = http.get(f"{full_stack.url}/{plotly_url}", headers={"accept-encoding": "identity"})
    assert "content-encoding" not in plain.headers and plain.content == raw
    missing = http.get(f"{full_stack.url}/static/nothing.js")
    assert missing.status_code == 404 and missing.headers["content-type"] == "application/problem+json"


def test_page_loads_offline(page: Page) -> None:
    """With every host but localhost unreachable the page loads, plotly included, from the API alone."""
    page.open()
    assert page.js("return typeof window.Plotly === 'object' && typeof Plotly.react === 'function'")
    fetched = page.js("return performance.getEntriesByType('resource').map(e => e.name)")
    assert any("plotly" in u for u in fetched)
    assert all(u.startswith(page.url + "/") for u in fetched), fetched
    # Every module in api/static/ is part of the page: app.js imports each of them, directly or not.
    loaded = {u.rsplit("/", 1)[1] for u in fetched if u.startswith(f"{page.url}/static/") and u.endswith(".js")}
    assert own_modules() <= loaded, sorted(own_modules() - loaded)
    # The lists came from the API: every built-in and registered CNN, every machine type.
    cnns = http.get(f"{page.url}/v1/cnns").json()["cnns"]
    machine_types = http.get(f"{page.url}/v1/machines").json()["machines"]
    assert page.js("return document.querySelectorAll('#cnn-picker li').length") == len(cnns)
    assert page.js("return document.querySelectorAll('#machine-picker li[data-value]').length") == len(machine_types)


def test_machine_list_is_grouped_by_provider(page: Page) -> None:
    """Every machine type sits under its provider's heading with its GPU and price; "T4" and one click choose the
    T4 machine types of every cloud."""
    machine_types = http.get(f"{page.url}/v1/machines").json()["machines"]
    assert {"aws", "gcp", "azure"} <= {m["provider"] for m in machine_types}
    page.open()
    # Each option with the heading above it, as the person sees the list.
    rows = page.js(
        "let group = null; const out = [];"
        "for (const li of document.querySelectorAll('#machine-picker .picker-options li')) {"
        "  if (li.classList.contains('group')) group = li.textContent;"
        "  else out.push([li.dataset.value, group, li.querySelector('.meta').textContent]); }"
        "return out"
    )
    assert [r[0] for r in rows] == [m["name"] for m in machine_types]
    headings = {"aws": "AWS", "gcp": "Google Cloud", "azure": "Azure", "local": "This machine"}
    for (name, group, meta), m in zip(rows, machine_types, strict=True):
        assert group == headings.get(m["provider"], group), (name, group, m["provider"])
        if m["gpu"]:
            assert m["gpu"] in meta and f"{hourly(m['price_usd_per_hour'])}/h" in meta, (name, meta)
    assert set(
        page.js("return [...document.querySelectorAll('#machine-picker li.group')].map(g => g.textContent)")
    ) >= {"AWS", "Google Cloud", "Azure"}

    t4s = [m["name"] for m in machine_types if m["gpu"] == "T4"]
    assert {m["provider"] for m in machine_types if m["gpu"] == "T4"} >= {"aws", "gcp", "azure"}
    page.type_into("#machine-picker .picker-search", "t4")
    shown = page.js(
        "return [...document.querySelectorAll('#machine-picker li[data-value]')].filter(li => !li.hidden)"
        ".map(li => li.dataset.value)"
    )
    assert shown == t4s
    # Only the headings of providers with a T4 stay.
    shown_groups = page.js(
        "return [...document.querySelectorAll('#machine-picker li.group')].filter(g => !g.hidden)"
        ".map(g => g.textContent)"
    )
    assert sorted(shown_groups) == sorted({headings[m["provider"]] for m in machine_types if m["gpu"] == "T4"})
    choose_all = page.find("#machine-picker .picker-all")
    assert choose_all.is_displayed() and choose_all.text == f"choose all {len(t4s)} shown"
    choose_all.click()
    assert page.js("return window.traincast.machinePicker.values()") == t4s

    # The specs table: provider, GPU × count, both prices, and where the prices come from.
    multi = next(m for m in machine_types if (m["gpu_count"] or 0) > 1 and m["spot_price_usd_per_hour"])
    if multi["name"] not in t4s:
        page.find("#machine-table-toggle").click()  # the machine types not chosen are behind it
    row = page.find(f'#machine-table tr[data-machine="{multi["name"]}"]')
    cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
    assert cells[1].startswith(headings[multi["provider"]]) and cells[2] == f"{multi['gpu_count']}× {multi['gpu']}"
    assert cells[6].startswith("$") and cells[7].startswith("$"), cells
    assert multi["price_source"] and multi["price_source"] in (
        row.find_elements(By.TAG_NAME, "td")[6].get_attribute("title") or ""
    )


def test_search_draws_both_plots(calibrated: Stack, page: Page) -> None:
    """Two CNNs on local: one line each against batch size, one point each at its fastest, a hover label, a table."""
    page.open()
    for cnn in CNNS:
        page.choose("cnn-picker", cnn)
    page.choose("machine-picker", "local")
    page.type_into("#image-size", "32")
    page.type_into("#batch-list", ",".join(map(str, SIZES)))
    assert page.search() == "done", page.find("#error").text
    job = job_of(page)
    assert job["status"] == "succeeded" and job["request"]["cnns"] == CNNS and job["request"]["image_size"] == 32
    result = job["result"]

    lines = roles(page.traces("plot-batch"), "line")
    assert sorted(t["name"] for t in lines) == sorted(f"{c} · local" for c in CNNS)
    # A band per line whose predictions carry an interval (the LightGBM model gives one), none otherwise.
    banded = {c for c in CNNS if all(has_interval(p) for p in result["predictions"] if p["cnn"] == c)}
    assert sorted(t["meta"]["cnn"] for t in roles(page.traces("plot-batch"), "band")) == sorted(2 * list(banded))
    per_s = unit_of(page.layout("plot-batch")["yaxis"]["title"]["text"])
    assert "batch size" in page.layout("plot-batch")["xaxis"]["title"]["text"]
    for line in lines:
        cnn = line["meta"]["cnn"]
        expected = [p for p in result["predictions"] if p["cnn"] == cnn and p["total_seconds"] is not None]
        assert line["x"] == [p["batch_size"] for p in expected] == SIZES
        assert line["y"] == pytest.approx([p["total_seconds"] / per_s for p in expected], rel=1e-9)

    # local measured its own layers: every point says "benchmarked", drawn solid with filled markers.
    assert {p["source"] for p in result["predictions"]} == {"benchmarked"}
    assert all(t["meta"]["source"] == "benchmarked" and t["line"]["dash"] == "solid" for t in lines)
    assert not any(t["marker"]["symbol"].endswith("-open") for t in lines)
    assert page.js("return [...document.querySelectorAll('#source-key .key-item')].map(k => k.dataset.source)") == [
        "benchmarked"
    ]

    points = roles(page.traces("plot-cost"), "point")
    assert len(points) == len(CNNS) and all(len(t["x"]) == 1 for t in points)
    cost_layout = page.layout("plot-cost")
    per_s_cost = unit_of(cost_layout["xaxis"]["title"]["text"])
    assert "US$" in cost_layout["yaxis"]["title"]["text"]
    for point in points:
        best = next(b for b in result["best"] if b["cnn"] == point["meta"]["cnn"])
        assert point["x"][0] == pytest.approx(best["min_time"]["total_seconds"] / per_s_cost, rel=1e-9)
        assert point["y"][0] == pytest.approx(best["min_time"]["cost_usd"])

    # Hover the resnet18 point as a mouse would and read the label plotly draws.
    index = next(i for i, t in enumerate(page.traces("plot-cost")) if t["meta"]["cnn"] == "resnet18")
    page.js("Plotly.Fx.hover('plot-cost', [{curveNumber: arguments[0], pointNumber: 0}])", index)
    label = wait_until(
        lambda: page.js(
            "const t = document.querySelector('#plot-cost .hoverlayer .hovertext'); return t && t.textContent"
        ),
        10,
        "the hover label",
    )
    fastest = next(b for b in result["best"] if b["cnn"] == "resnet18")["min_time"]["batch_size"]
    assert "resnet18" in label and "local" in label and f"batch size {fastest}" in label, label
    assert "benchmarked" in label and "reference" not in label, label
    sources = page.js("return [...document.querySelectorAll('#best-table tbody tr')].map(r => r.lastChild.textContent)")
    assert sources == ["benchmarked"] * len(CNNS)
    assert not page.driver.find_elements(By.ID, "gpu-note")  # local has no GPUs, let alone several

    # Each plot has its own legend, an entry per line; clicking one hides that CNN × machine in every plot.
    entries = page.driver.find_elements(By.CSS_SELECTOR, "#plot-batch .legend .traces")
    assert sorted(e.text for e in entries) == sorted(t["name"] for t in lines)
    squeeze = next(e for e in entries if e.text.startswith("squeezenet1_1"))
    squeeze.find_element(By.CSS_SELECTOR, ".legendtoggle").click()
    hidden = wait_until(lambda: hidden_cnns(page), 10, "squeezenet1_1 to be hidden")
    assert set(hidden) == {"squeezenet1_1"} and len(hidden) >= 2  # its line and its point
    # Shown again from the cost plot's own legend.
    cost_entry = next(
        e for e in page.driver.find_elements(By.CSS_SELECTOR, "#plot-cost .legend .traces") if "squeezenet1_1" in e.text
    )
    cost_entry.find_element(By.CSS_SELECTOR, ".legendtoggle").click()
    wait_until(lambda: not hidden_cnns(page), 10, "squeezenet1_1 to show again")

    machine_types = http.get(f"{page.url}/v1/machines").json()["machines"]
    rows = page.js("return [...document.querySelectorAll('#machine-table tbody tr')].map(r => r.dataset.machine)")
    assert rows[0] == "local" and sorted(rows) == sorted(m["name"] for m in machine_types)
    assert page.find('#machine-table tr[data-machine="local"]').get_attribute("class") == "chosen"
    assert "no hourly price" in page.find("#notes").text  # local is free: its $0 is explained

    page.screenshot(SCREENSHOT)
    assert png_size(SCREENSHOT) == LAPTOP

    # The URL keeps the job: opening it again shows the same result, with the form filled from its request.
    page.open(f"?job={job['id']}")
    wait_until(lambda: page.state() == "done", 30, "the job named in the URL")
    assert sorted(t["name"] for t in roles(page.traces("plot-batch"), "line")) == sorted(t["name"] for t in lines)
    assert page.js("return window.traincast.cnnPicker.values()") == CNNS
    assert page.find("#image-size").get_attribute("value") == "32"


def test_prediction_interval_is_drawn_as_a_band_when_present(calibrated: Stack, page: Page) -> None:
    """A result with total_seconds_p10/p90 gets a filled band per line; without them, none."""
    body = {"cnns": ["squeezenet1_1"], "machines": ["local"], "batch_sizes": SIZES, "image_size": 32}
    job = wait_for_job(calibrated, http.post(f"{calibrated.url}/v1/jobs", json=body).json()["id"])
    with_band, without = json.loads(json.dumps(job["result"])), json.loads(json.dumps(job["result"]))
    for p in with_band["predictions"]:
        if p["total_seconds"] is not None:
            p["total_seconds_p10"], p["total_seconds_p90"] = 0.8 * p["total_seconds"], 1.25 * p["total_seconds"]
    for p in without["predictions"]:
        p.pop("total_seconds_p10", None)
        p.pop("total_seconds_p90", None)
    page.open()
    page.js("window.traincast.render(arguments[0], arguments[1])", with_band, body)
    bands = roles(page.traces("plot-batch"), "band")
    assert len(bands) == 2 and any(t.get("fill") == "tonexty" for t in bands)
    per_s = unit_of(page.layout("plot-batch")["yaxis"]["title"]["text"])
    upper = next(t for t in bands if t.get("fill") != "tonexty")
    assert upper["y"] == pytest.approx([p["total_seconds_p90"] / per_s for p in with_band["predictions"]], rel=1e-9)
    assert len(roles(page.traces("plot-batch"), "line")) == 1
    page.js("window.traincast.render(arguments[0], arguments[1])", without, body)
    assert not roles(page.traces("plot-batch"), "band") and len(roles(page.traces("plot-batch"), "line")) == 1


def test_api_error_is_shown_in_plain_words(page: Page) -> None:
    """inception_v3 at 64 px: the API's problem detail appears on the page as a sentence, not JSON."""
    body = {"cnns": ["inception_v3"], "machines": ["local"], "batch_sizes": [2], "image_size": 64}
    problem = http.post(f"{page.url}/v1/jobs", json=body)
    assert problem.status_code == 422
    page.open()
    page.choose("cnn-picker", "inception_v3")
    page.choose("machine-picker", "local")
    page.type_into("#image-size", "64")
    page.type_into("#batch-list", "2")
    assert page.search(timeout=60) == "error"
    shown = page.find("#error").text
    assert problem.json()["detail"] in shown and problem.json()["title"] in shown, shown
    assert "{" not in shown and "problem+json" not in shown
    assert not page.traces("plot-batch")

    # A form mistake is caught before anything is sent.
    page.type_into("#batch-list", "2, four")
    assert page.search(timeout=10) == "error"
    assert "whole numbers" in page.find("#error").text


def test_progress_names_the_machine_type_waiting_for_an_agent(calibrated: Stack, page: Page) -> None:
    """local has its agent, g4dn.xlarge has none, g5.xlarge has a fleet instance booting: the page says which is
    waiting and for what; Cancel cancels the job."""
    instance = f"i-web{uuid.uuid4().hex[:12]}"
    with transaction() as cur:  # what the fleet controller records when it launches an instance
        cur.execute(FLEET_LAUNCHED, (instance,))
    page.open()
    page.choose("cnn-picker", "squeezenet1_1")
    page.choose("machine-picker", "local")
    page.choose("machine-picker", "g4dn.xlarge")
    page.choose("machine-picker", "g5.xlarge")
    page.type_into("#image-size", "32")
    page.type_into("#batch-list", ",".join(map(str, SIZES)))
    # Unticked, g4dn.xlarge and g5.xlarge would be answered at once by the reference prediction.
    page.find("#wait-benchmarks").click()
    page.find("#search").click()
    wait_until(
        lambda: page.js("return document.querySelectorAll('#machine-progress li.waiting').length === 2"),
        60,
        "two waiting machines",
    )
    waiting = page.find('#machine-progress li.waiting[data-machine="g4dn.xlarge"]')
    assert "waiting for an agent: no benchmark agent for g4dn.xlarge is running" in waiting.text
    booting = page.find('#machine-progress li.waiting[data-machine="g5.xlarge"]')
    assert f"waiting for an agent on g5.xlarge (the fleet launched {instance}; it is booting)" in booting.text
    local = page.find('#machine-progress li[data-machine="local"]')
    assert "waiting" not in (local.get_attribute("class") or "")
    job = job_of(page)
    assert job["request"]["wait_for_benchmarks"] is True
    pending = job["progress"]["machines"]["g4dn.xlarge"]
    assert job["status"] == "running" and pending["pending"] > 0
    assert f"{pending['done']} of {pending['needed']}" in waiting.text

    page.find("#cancel").click()
    wait_until(lambda: job_of(page)["status"] == "canceled", 20, "the job to be canceled")
    wait_until(lambda: "canceled" in page.find("#error").text, 10, "the page to say the job was canceled")
    # The page follows the job with long polls: the API held its reads until the job ended or a few seconds passed.
    urls = page.js("return performance.getEntriesByType('resource').map((e) => e.name)")
    assert any(f"/v1/jobs/{job['id']}?wait=" in url for url in urls), urls
    with transaction() as cur:
        cur.execute("DELETE FROM fleet_instances WHERE instance_id = %s", (instance,))


def test_upload_a_cnn_from_the_page(page: Page, tmp_path: Path) -> None:
    """A JSON layer list uploaded from the form is registered and chosen; a broken file's error is shown."""
    name = f"web-{uuid.uuid4().hex[:8]}"
    layers = {
        "image_size": 32,
        "layers": [{"in_channels": 3, "out_channels": 8, "input_size": 32, "kernel": 3, "padding": 1}],
        "parameters": 224,
    }
    good = tmp_path / "tiny.json"
    good.write_text(json.dumps(layers))
    page.open()
    page.find("#upload summary").click()
    page.type_into("#upload-name", name)
    page.find("#upload-file").send_keys(str(good))
    page.find("#upload-button").click()
    wait_until(lambda: "Registered" in page.find("#upload-message").text, 30, "the upload to be registered")
    assert name in [c["name"] for c in http.get(f"{page.url}/v1/cnns").json()["cnns"]]
    assert page.js("return window.traincast.cnnPicker.values()") == [name]

    broken = tmp_path / "broken.json"
    broken.write_text('{"image_size": 32, "layers": [{"in_channels": 3}]}')
    expected = http.post(
        f"{page.url}/v1/cnns", data={"name": f"{name}-2"}, files={"file": ("b.json", broken.read_bytes())}
    ).json()["detail"]
    page.type_into("#upload-name", f"{name}-2")
    page.find("#upload-file").send_keys(str(broken))
    page.find("#upload-button").click()
    wait_until(lambda: "error" in (page.find("#upload-message").get_attribute("class") or ""), 30, "the upload error")
    assert expected in page.find("#upload-message").text


def test_gpu_types_without_an_agent_get_reference_predictions(full_stack: Stack, page: Page) -> None:
    """g4dn.xlarge, a Google Cloud T4 type and a multi-GPU Azure type have no agent: the job is answered at once by
    the reference prediction, drawn dashed with open markers and labelled so in the hover labels, the key and the
    table; the note on multi-GPU machine types shows once."""
    machine_types = http.get(f"{page.url}/v1/machines").json()["machines"]
    gcp_t4 = next(m for m in machine_types if m["provider"] == "gcp" and m["gpu"] == "T4")
    multi = next(m for m in machine_types if m["provider"] == "azure" and (m["gpu_count"] or 0) > 1)
    chosen = ["g4dn.xlarge", gcp_t4["name"], multi["name"]]
    page.open()
    page.choose("cnn-picker", "resnet18")
    for name in chosen:
        page.choose("machine-picker", name)
    page.type_into("#batch-list", "8,16,32")
    assert page.search(timeout=120) == "done", page.find("#error").text
    job = job_of(page)
    result = job["result"]
    assert job["request"]["wait_for_benchmarks"] is False
    assert {p["source"] for p in result["predictions"]} == {"reference"}
    # Memory is modelled for reference points too: resnet18 at these batch sizes fits a T4.
    assert {p["fits_in_memory"] for p in result["predictions"]} == {True}
    assert "does not fit" not in page.find("#notes").text

    lines = roles(page.traces("plot-batch"), "line")
    assert sorted(t["meta"]["machine"] for t in lines) == sorted(chosen)
    for line in lines:
        assert line["meta"]["source"] == "reference" and line["line"]["dash"] != "solid", line["name"]
        assert line["marker"]["symbol"].endswith("-open") and line["x"] == [8, 16, 32], line["name"]
    # The two T4 types get the same reference times: the second's line has a dash of its own, so both stay visible.
    t4s = {t["meta"]["machine"]: t for t in lines if t["meta"]["machine"] in ("g4dn.xlarge", gcp_t4["name"])}
    if t4s["g4dn.xlarge"]["y"] == t4s[gcp_t4["name"]]["y"]:
        assert t4s["g4dn.xlarge"]["line"]["dash"] != t4s[gcp_t4["name"]]["line"]["dash"]
    points = roles(page.traces("plot-cost"), "point")
    assert len(points) == 3 and all(t["marker"]["color"] == "#ffffff" for t in points)  # open markers
    assert page.js("return [...document.querySelectorAll('#source-key .key-item')].map(k => k.dataset.source)") == [
        "reference"
    ]
    assert len(page.driver.find_elements(By.CSS_SELECTOR, "#plot-batch .legend .traces")) == len(chosen)

    # Hover the Google T4's line and the multi-GPU type's point.
    first = next(p for p in result["predictions"] if p["machine"] == gcp_t4["name"])
    low, high = (
        first["iteration_seconds_p10"] / first["iteration_seconds"],
        first["iteration_seconds_p90"] / first["iteration_seconds"],
    )
    assert low < 1 < high
    index = next(
        i
        for i, t in enumerate(page.traces("plot-batch"))
        if t["meta"]["machine"] == gcp_t4["name"] and t["meta"]["role"] == "line"
    )
    label = page.hover("plot-batch", index)
    assert f"reference (P10–P90 ×{low:.2f}–×{high:.2f})" in label, label
    # Reference points now carry the modelled peak memory and fit (a T4 has 16 GiB).
    point = next(p for p in result["predictions"] if p["machine"] == gcp_t4["name"])
    assert (
        "Google Cloud" in label
        and "T4" in label
        and f"peak memory {point['peak_memory_gib']:.3g} GiB of 16 GiB" in label
    )
    assert ("does not fit" if point["fits_in_memory"] is False else "fits") in label, label
    index = next(i for i, t in enumerate(page.traces("plot-cost")) if t["meta"]["machine"] == multi["name"])
    label = page.hover("plot-cost", index)
    assert f"of its {multi['gpu_count']} GPUs" in label and "cost per GPU" in label, label
    assert "reference (P10–P90 ×" in label, label

    rows = page.js(
        "return [...document.querySelectorAll('#best-table tbody tr')]"
        ".map(r => [r.dataset.machine, r.dataset.source, r.lastChild.textContent])"
    )
    assert sorted(r[0] for r in rows) == sorted(chosen)
    assert all(r[1] == "reference" and r[2].startswith("reference (P10–P90 ×") for r in rows), rows
    assert all(name in page.find("#reference-note").text for name in chosen)
    notes = page.driver.find_elements(By.ID, "gpu-note")
    assert len(notes) == 1 and multi["name"] in notes[0].text and "g4dn.xlarge" not in notes[0].text
    assert "batch sizes per GPU" in notes[0].text and "cost per GPU" in notes[0].text
    assert not any(field in notes[0].text for field in ("gpus_used", "cost_usd", "cost_per_gpu_usd", "nodes machines"))
    assert not page.driver.find_elements(By.CSS_SELECTOR, "#machine-progress li.waiting")


def test_measured_elsewhere_and_unknown_fit_are_drawn_as_such(page: Page) -> None:
    """A Google T4 type predicted from g4dn.xlarge's measurements says so; a point that does not fit is left out and
    named, one whose fit is unknown (null) is plotted."""
    machine_types = http.get(f"{page.url}/v1/machines").json()["machines"]
    gcp_t4 = next(m["name"] for m in machine_types if m["provider"] == "gcp" and m["gpu"] == "T4")
    gcp_l4 = next(m["name"] for m in machine_types if m["provider"] == "gcp" and m["gpu"] == "L4")

    def point(machine_type: str, bs: int, source: str, fits: bool | None) -> dict[str, Any]:
        seconds = 3600.0 * 64 / bs if fits is not False else None
        extra: dict[str, Any] = (
            {"measured_on": ["g4dn.xlarge"]}
            if source == "benchmarked"
            else {
                "reference_error_pct": 9.5,
                "launch_bound": bs == 8,
                "measured_on": [],
                "iteration_seconds_p10": seconds and seconds / 1000 * 0.8,
                "iteration_seconds_p90": seconds and seconds / 1000 * 1.25,
            }
        )
        return {
            "cnn": "resnet18",
            "machine": machine_type,
            "batch_size": bs,
            "source": source,
            "fits_in_memory": fits,
            "total_seconds": seconds,
            "iteration_seconds": seconds and seconds / 1000,
            "cost_usd": seconds and seconds / 3600,
            "cost_per_gpu_usd": seconds and seconds / 3600,
            "gpus_used": 1,
            **extra,
        }

    predictions = [point(gcp_t4, 8, "benchmarked", True), point(gcp_t4, 16, "benchmarked", True),
                   point(gcp_t4, 32, "benchmarked", False),
                   point(gcp_l4, 8, "reference", None), point(gcp_l4, 16, "reference", None),
                   point(gcp_l4, 32, "reference", None)]  # fmt: skip

    def pick(machine_type: str, bs: int, source: str) -> dict[str, Any]:
        return {"batch_size": bs, "total_seconds": 3600.0 * 64 / bs, "cost_usd": 64 / bs, "source": source}

    result = {
        "predictions": predictions,
        "best": [{"cnn": "resnet18", "machine": gcp_t4, "min_time": pick(gcp_t4, 16, "benchmarked"),
                  "min_cost": pick(gcp_t4, 16, "benchmarked")},
                 {"cnn": "resnet18", "machine": gcp_l4, "min_time": pick(gcp_l4, 32, "reference"),
                  "min_cost": pick(gcp_l4, 32, "reference")}],
        "models": {gcp_t4: {"status": "ok", "source": "benchmarked", "version": 2, "kind": "lightgbm",
                            "measured_on": "g4dn.xlarge"},
                   gcp_l4: {"status": "reference", "source": "reference", "version": 1, "whole_step_mape": 9.5,
                            "detail": f"{gcp_l4} (L4) has no benchmarks of its own yet: reference prediction"}},
        "gpu_note": "a point is training on one GPU of the machine",
    }  # fmt: skip
    page.open()
    page.js(
        "window.traincast.render(arguments[0], arguments[1])",
        result,
        {"cnns": ["resnet18"], "machines": [gcp_t4, gcp_l4]},
    )
    lines = {t["meta"]["machine"]: t for t in roles(page.traces("plot-batch"), "line")}
    assert lines[gcp_t4]["x"] == [8, 16] and lines[gcp_t4]["line"]["dash"] == "solid"
    assert lines[gcp_l4]["x"] == [8, 16, 32] and lines[gcp_l4]["line"]["dash"] == "dash"
    index = next(i for i, t in enumerate(page.traces("plot-batch")) if t["meta"]["machine"] == gcp_t4)
    label = page.hover("plot-batch", index, 1)
    assert "benchmarked (measured on g4dn.xlarge)" in label, label
    index = next(i for i, t in enumerate(page.traces("plot-batch")) if t["meta"]["machine"] == gcp_l4)
    # The band is the label: the point's own P10-P90 as multiples of its answer, not a second error figure.
    assert "reference (P10–P90 ×0.80–×1.25), launch-bound" in page.hover("plot-batch", index, 0)
    notes = page.find("#notes").text
    assert f"resnet18 on {gcp_t4} does not fit in GPU memory at batch size 32" in notes, notes
    assert gcp_l4 not in notes.split("does not fit")[0].split("\n")[-1]  # the null fit is not called a misfit
    sources = page.js("return [...document.querySelectorAll('#best-table tbody tr')].map(r => r.lastChild.textContent)")
    assert sources == ["benchmarked (measured on g4dn.xlarge)", "reference (P10–P90 ×0.80–×1.25)"]
    assert page.js("return [...document.querySelectorAll('#source-key .key-item')].map(k => k.dataset.source)") == [
        "benchmarked",
        "reference",
    ]


def test_progress_of_a_machine_type_answered_by_the_reference(page: Page) -> None:
    """A machine type whose benchmarks are pending but answered by the reference is not 'waiting for an agent'."""
    g4dn: dict[str, Any] = {"needed": 10, "done": 0, "pending": 10, "agent_alive": False, "answered_by": "reference"}
    progress = {
        "layer_benchmarks": {"needed": 20, "done": 10, "pending": 10},
        "machines": {"local": {"needed": 10, "done": 10, "pending": 0}, "g4dn.xlarge": g4dn},
    }
    show = (
        "const done = arguments[arguments.length - 1]; const job = arguments[0];"
        "window.traincast.waitingMachines(job).then((a) => { window.traincast.showProgress(job, a); done(); })"
    )
    page.open()
    page.driver.execute_async_script(show, {"status": "running", "progress": progress})
    row = page.find('#machine-progress li[data-machine="g4dn.xlarge"]')
    assert row.get_attribute("class") == "reference" and "waiting" not in row.text
    assert "answered now by the reference prediction" in row.text
    # The same row without answered_by: now it waits for an agent (no agent serves g4dn.xlarge).
    del g4dn["answered_by"]
    page.driver.execute_async_script(show, {"status": "running", "progress": progress})
    row = page.find('#machine-progress li[data-machine="g4dn.xlarge"]')
    assert row.get_attribute("class") == "waiting" and "waiting for an agent" in row.text


def test_register_a_gpu_from_the_page(page: Page) -> None:
    """The "Add your own GPU" form registers a machine type by its figures and chooses it; an invalid one's error is
    shown as the API's sentence."""
    name = f"web-gpu-{uuid.uuid4().hex[:8]}"
    figures = {"name": name, "gpu": "RTX 4090", "gpu_count": "2", "gpu_memory_gib": "24", "gpu_fp32_tflops": "82.6",
               "gpu_fp16_tflops": "165", "gpu_mem_bandwidth_gbs": "1008", "gpu_sm_count": "128", "gpu_l2_mib": "72",
               "gpu_tdp_watts": "450", "price_usd_per_hour": "0.69"}  # fmt: skip
    page.open()
    page.find("#add-gpu summary").click()
    for field, value in figures.items():
        page.type_into(f'#gpu-form input[name="{field}"]', value)
    # No compute capability given: bf16 support is said in the form (an RTX 4090 has it).
    Select(page.find('#gpu-form select[name="gpu_bf16"]')).select_by_value("true")
    # Its links: PCIe inside, two 25 Gbit/s Ethernet ports between machines, TCP.
    Select(page.find('#gpu-form select[name="gpu_link"]')).select_by_value("pcie")
    page.type_into('#gpu-form input[name="nics"]', "2")
    page.type_into('#gpu-form input[name="nic_gbps"]', "25")
    Select(page.find('#gpu-form select[name="network_rdma"]')).select_by_value("false")
    page.find("#gpu-button").click()
    wait_until(lambda: "Registered" in page.find("#gpu-message").text, 30, "the GPU to be registered")
    created = http.get(f"{page.url}/v1/machines/{name}").json()
    assert created["registered"] and created["provider"] == "own" and created["gpu_memory_gib"] == 48
    assert created["gpu_bf16"] is True
    links = (created["gpu_link"], created["nics"], created["nic_gbps"], created["network_rdma"])
    assert links == ("pcie", 2, 25, False)
    assert created["links"]["network_gbps"] == 50
    assert page.js("return window.traincast.machinePicker.values()") == [name]
    heading = page.js(
        "let li = document.querySelector(`#machine-picker li[data-value='${arguments[0]}']`);"
        "while (li && !li.classList.contains('group')) li = li.previousElementSibling; return li && li.textContent",
        name,
    )
    assert heading == "Your own"

    bad = {**figures, "name": f"{name}-2", "gpu_fp16_tflops": "1"}  # below 1/64 of its FP32: the API refuses it
    problem = http.post(
        f"{page.url}/v1/machines", json={k: v if k in ("name", "gpu") else float(v) for k, v in bad.items()}
    )
    assert problem.status_code == 422
    page.type_into('#gpu-form input[name="name"]', bad["name"])
    page.type_into('#gpu-form input[name="gpu_fp16_tflops"]', "1")
    page.find("#gpu-button").click()
    wait_until(lambda: "error" in (page.find("#gpu-message").get_attribute("class") or ""), 30, "the GPU error")
    shown = page.find("#gpu-message").text
    assert problem.json()["title"] in shown and "1/64" in shown and "{" not in shown, shown


def test_a_known_gpu_is_registered_from_the_page_by_its_name(page: Page) -> None:
    """Name, a GPU Traincast knows, count and price, the figures left blank: registered with that GPU's figures."""
    name = f"web-l40s-{uuid.uuid4().hex[:8]}"
    page.open()
    page.find("#add-gpu summary").click()
    for field, value in {"name": name, "gpu": "NVIDIA L40S", "gpu_count": "4", "price_usd_per_hour": "3.5"}.items():
        page.type_into(f'#gpu-form input[name="{field}"]', value)
    page.find("#gpu-button").click()
    wait_until(lambda: "Registered" in page.find("#gpu-message").text, 30, "the GPU to be registered")
    created = http.get(f"{page.url}/v1/machines/{name}").json()
    assert created["gpu"] == "L40S" and created["gpu_count"] == 4 and created["gpu_sm_count"] == 142
    assert created["specs_source"].startswith("data/gpus.csv (L40S")


def wait_for_job(stack: Stack, job_id: str, timeout: float = 120) -> dict[str, Any]:
    """Poll a job over HTTP until it has finished; it must succeed."""
    job = wait_for(stack, job_id, timeout)
    assert job["status"] == "succeeded", job
    return job


def test_the_page_asks_for_a_key_and_keeps_it(page: Page) -> None:
    """With no key the page asks for one; a refused key asks again, saying why; a valid key loads the lists and
    is kept across reloads; a read-only key's search is refused in plain words."""
    from shared import keys

    try:
        page.js("localStorage.removeItem(arguments[0])", KEY_STORAGE)
        page.open()
        assert page.state() == "key" and page.find("#key-form").is_displayed()
        assert page.js("return window.traincast.state.machines.length") == 0
        page.type_into("#api-key", f"tc_{'0' * 12}_{'A' * 43}")
        page.find("#key-save").click()
        refused = wait_until(lambda: page.find("#key-message").is_displayed() and page.find("#key-message").text, 30,
                             "the refusal")  # fmt: skip
        assert "API key was refused" in refused and "unknown" in refused and page.state() == "key"

        _row, reader = keys.create(name="page-reader", scope="read")
        page.type_into("#api-key", reader)
        page.find("#key-save").click()
        wait_until(lambda: page.state() == "idle", 30, "the lists to load with a valid key")
        assert not page.find("#key-form").is_displayed()
        assert page.js("return localStorage.getItem(arguments[0])", KEY_STORAGE) == reader
        page.open()
        assert page.state() == "idle" and page.js("return window.traincast.state.machines.length") > 0

        page.choose("cnn-picker", "resnet18")
        page.choose("machine-picker", "local")
        assert page.search() == "error"
        error = page.find("#error").text
        assert "may not do that" in error and "scope read" in error and "submit" in error
    finally:
        page.js("localStorage.setItem(arguments[0], arguments[1])", KEY_STORAGE, admin_key())


def test_training_settings_memory_plot_and_largest_batch(page: Page) -> None:
    """ResNet-50 on a T4 and an A100 type with AdamW under AMP: the form sends the settings, the memory plot draws each
    point's peak against each GPU's memory, and the best table shows the largest batch that fits and the energy."""
    machine_types = {m["name"]: m for m in http.get(f"{page.url}/v1/machines").json()["machines"]}
    chosen = ["g4dn.xlarge", "a2-highgpu-1g"]
    page.open()
    page.choose("cnn-picker", "resnet50")
    for name in chosen:
        page.choose("machine-picker", name)
    page.type_into("#batch-list", "32,128,512")
    page.js(
        "document.getElementById('optimizer').value = 'adamw'; document.getElementById('optimizer')"
        ".dispatchEvent(new Event('change'))"
    )
    assert page.find("#momentum").get_attribute("disabled") is not None  # momentum is SGD's
    page.js("document.getElementById('precision').value = 'amp_fp16'")
    page.find("#channels-last").click()
    page.find("#cudnn-benchmark").click()
    assert page.search(timeout=120) == "done", page.find("#error").text
    job = job_of(page)
    request = job["request"]
    assert (request["optimizer"], request["precision"], request["channels_last"]) == ("adamw", "amp_fp16", True)
    assert request["cudnn_benchmark"] is True
    # The page says what the answers are for, in PyTorch's words.
    settings = page.find("#settings-note").text
    assert "adamw" in settings and "channels_last" in settings and "cudnn.benchmark on" in settings, settings
    assert request["weight_decay"] == pytest.approx(0.01) and not request.get("momentum")  # AdamW's own default
    result = job["result"]

    # One line per distinct curve of resnet50 (the machine types whose peaks are equal share one).
    memory = roles(page.traces("plot-memory"), "memory")
    assert sorted(m for t in memory for m in t["meta"]["machines"]) == sorted(chosen)
    assert {t["meta"]["cnn"] for t in memory} == {"resnet50"}
    for trace in memory:
        for machine in trace["meta"]["machines"]:
            expected = [p for p in result["predictions"] if p["machine"] == machine]
            assert trace["x"] == [p["batch_size"] for p in expected] == [32, 128, 512]
            assert trace["y"] == pytest.approx([p["peak_memory_gib"] for p in expected], rel=1e-9)
    # Each GPU's memory as PyTorch gets it (the result's: a T4's ECC keeps 1 of its 16 GiB), labelled with its name.
    limits = {t["y"][0]: t["meta"]["gpus"] for t in roles(page.traces("plot-memory"), "limit")}
    usable = {b["machine"]: b["memory_gib"] for b in result["best"]}
    assert limits == {usable[n]: [machine_types[n]["gpu"]] for n in chosen}
    assert usable["g4dn.xlarge"] == 15.0
    t4 = next(i for i, t in enumerate(page.traces("plot-memory")) if "g4dn.xlarge" in (t["meta"].get("machines") or []))
    big = next(p for p in result["predictions"] if p["machine"] == "g4dn.xlarge" and p["batch_size"] == 512)
    label = page.hover("plot-memory", t4, 2)
    assert "batch size 512" in label and "peak memory" in label, label
    assert ("does not fit on g4dn.xlarge" in label) == (big["fits_in_memory"] is False), (label, big)

    for best in result["best"]:
        row = page.find(f'#best-table tr[data-machine="{best["machine"]}"]')
        assert row.find_element(By.CSS_SELECTOR, '[data-field="max_batch_size"]').text == str(best["max_batch_size"])
        fastest = next(
            p for p in result["predictions"]
            if p["machine"] == best["machine"] and p["batch_size"] == best["min_time"]["batch_size"]
        )  # fmt: skip
        assert f"{fastest['energy_kwh']:.3g}"[:3] in row.text and "kWh" in row.text, row.text

    page.js("document.getElementById('plot-memory').scrollIntoView()")
    page.screenshot(ROOT / ".run" / "test-web-memory.png")

    # The form comes back from the job in the URL, settings included.
    page.open(f"?job={job['id']}")
    wait_until(lambda: page.state() == "done", 30, "the job named in the URL")
    assert page.find("#optimizer").get_attribute("value") == "adamw"
    assert page.find("#precision").get_attribute("value") == "amp_fp16"
    assert page.find("#channels-last").is_selected() and page.find("#cudnn-benchmark").is_selected()


def test_every_chosen_cnn_chip_stays_in_view(page: Page) -> None:
    """Forty CNNs chosen: every chip is drawn where a person can see and click it, none under the list."""
    names = [c["name"] for c in http.get(f"{page.url}/v1/cnns").json()["cnns"]][:40]
    page.open()
    page.js("window.traincast.cnnPicker.set(arguments[0])", names)
    covered = page.js(
        "return [...document.querySelectorAll('#cnn-picker .picker-selected .chip')].filter(chip => {"
        # The page scrolls to the chip, never the chips' own box: a chip only seen by scrolling that box is hidden.
        "  window.scrollTo(0, chip.getBoundingClientRect().top + window.scrollY - innerHeight / 2);"
        "  const r = chip.getBoundingClientRect();"
        "  const top = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);"
        "  return !(top === chip || chip.contains(top)); }).map(chip => chip.dataset.value)"
    )
    assert len(page.driver.find_elements(By.CSS_SELECTOR, "#cnn-picker .picker-selected .chip")) == len(names)
    assert covered == []
    assert page.find("#cnn-picker .picker-selected .count").text == f"{len(names)} chosen:"


def test_a_type_with_fewer_gpus_than_asked_is_drawn_for_those_it_holds(page: Page) -> None:
    """GPUs 1 and 8 over a 1-GPU and an 8-GPU type: the job runs, and a note says the 1-GPU type is drawn at 1 only."""
    page.open()
    page.choose("cnn-picker", "resnet18")
    page.choose("machine-picker", "g5.xlarge")
    page.choose("machine-picker", "p5.48xlarge")
    page.type_into("#batch-list", "64")
    page.type_into("#gpus", "1,8")
    assert page.search(timeout=120) == "done", page.find("#error").text
    layouts = {(p["machine"], p["gpus_used"]) for p in job_of(page)["result"]["predictions"]}
    assert layouts == {("g5.xlarge", 1), ("p5.48xlarge", 1), ("p5.48xlarge", 8)}
    said = page.find('[id="fewer-gpus-g5.xlarge"]').text
    assert said == "g5.xlarge has fewer GPUs than 8: it is drawn for 1 GPU only.", said
    assert not page.driver.find_elements(By.CSS_SELECTOR, '[id="fewer-gpus-p5.48xlarge"]')


def test_gpu_and_node_counts_are_compared_and_plotted(page: Page) -> None:
    """ResNet-50 on a p5.48xlarge over 1, 2, 4, 8 GPUs and 1 or 2 machines at 25 Gbit/s between them: the form sends
    the counts and the bandwidth, the batch plot draws a line per layout, the GPUs plot the fastest time per GPU count
    (falling), the hover names the layout, and the form comes back from the job."""
    page.open()
    page.choose("cnn-picker", "resnet50")
    page.choose("machine-picker", "p5.48xlarge")
    page.type_into("#batch-list", "32,256")
    page.type_into("#gpus", "1,2,4,8")
    page.type_into("#nodes", "1,2")
    page.type_into("#internode-gbps", "25")
    page.type_into("#deadline-hours", "12")
    page.js("document.getElementById('allreduce').value = 'hierarchical'")
    assert page.search(timeout=120) == "done", page.find("#error").text
    job = job_of(page)
    assert job["request"]["deadline_hours"] == 12 and job["request"]["allreduce"] == "hierarchical"
    assert {p.get("allreduce_algorithm") for p in job["result"]["predictions"] if p["gpus_used"] * p["nodes"] > 1} == {
        "hierarchical"
    }
    assert page.find('#decisions-table tr[data-question="cheapest_within_deadline"]').is_displayed()
    assert (job["request"]["gpus"], job["request"]["nodes"], job["request"]["internode_gbps"]) == (
        [1, 2, 4, 8],
        [1, 2],
        25,
    )
    assert {p["internode_gbps"] for p in job["result"]["predictions"] if p["nodes"] == 2} == {25}
    assert len(roles(page.traces("plot-batch"), "line")) == 8  # one per GPU and node count
    [line] = page.traces("plot-gpus")
    assert line["x"] == [1, 2, 4, 8, 16]
    assert all(a > b for a, b in zip(line["y"], line["y"][1:], strict=False)), line["y"]
    assert page.find("#plot-gpus").is_displayed()
    label = page.hover("plot-gpus", 0, 4)
    sixteen = [p for p in job["result"]["predictions"] if p["gpus_used"] * p["nodes"] == 16]
    fastest = min(sixteen, key=lambda p: p["total_seconds"])
    assert "8 GPUs × 2 machines" in label and f"global {fastest['global_batch_size']})" in label, label
    assert f"scaling efficiency {round(fastest['scaling_efficiency'] * 100)}% (25 Gbit/s between them)" in label, label
    assert f"all-reduce: {fastest['allreduce_algorithm']}" in label, label
    # The decision names the winner's layout and per-GPU batch; the best-choices table says the layout too.
    decided = {d["question"]: d for d in job["result"]["decisions"]}
    row = page.find('#decisions-table tr[data-question="fastest"]')
    assert row.is_displayed() and decided["fastest"]["reasons"][0] in row.text, row.text
    assert "per GPU" in row.text and "GPUs x" in row.text
    winner = decided["fastest"]["winner"]
    layout = f"{winner['batch_size']} per GPU on {winner['gpus']} GPUs × {winner['nodes']}"
    assert layout in page.find("#best-table").text
    # A search that fails hides the last answer: it is not this search's.
    page.type_into("#batch-list", "2, four")
    assert page.search(timeout=10) == "error"
    assert not page.find("#decisions").is_displayed() and not page.find("#best").is_displayed()
    page.open(f"?job={job['id']}")
    wait_until(lambda: page.state() == "done", 30, "the job named in the URL")
    assert (page.find("#gpus").get_attribute("value"), page.find("#nodes").get_attribute("value")) == ("1,2,4,8", "1,2")
    assert page.find("#internode-gbps").get_attribute("value") == "25"
    assert page.find("#deadline-hours").get_attribute("value") == "12"
    page.open()  # the other tests start from the default form


def test_a_schedule_in_global_batches_from_the_page(page: Page) -> None:
    """5x256,85x1024 on 8 GPUs of a p5: sent as global batches, stored per GPU (32 and 128), 90 epochs from the
    schedule, said in a note, and back in the form from the job."""
    page.open()
    page.choose("cnn-picker", "resnet50")
    page.choose("machine-picker", "p5.48xlarge")
    page.type_into("#batch-list", "64")
    page.type_into("#gpus", "8")
    page.type_into("#epochs", "10")  # the schedule's epochs replace it
    page.type_into("#schedule", "5x256,85x1024")
    assert page.search(timeout=120) == "done", page.find("#error").text
    job = job_of(page)
    assert [(p["batch_size"], p["global_batch_size"]) for p in job["request"]["schedule"]] == [(32, 256), (128, 1024)]
    assert job["request"]["epochs"] == 90
    notes = [n for n in page.find("#notes").text.splitlines() if n.startswith("Schedule for resnet50")]
    assert len(notes) == 1 and "global batch 1024 (128 per GPU on 8 GPUs × 1)" in notes[0], notes
    page.open(f"?job={job['id']}")
    wait_until(lambda: page.state() == "done", 30, "the job named in the URL")
    assert page.find("#schedule").get_attribute("value") == "5x256,85x1024"
    page.type_into("#schedule", "5by32")
    assert page.search(timeout=10) == "error" and "EPOCHSxBATCH" in page.find("#error").text
    page.open()


def test_images_over_a_network_are_sent_and_an_input_bound_point_says_so(page: Page) -> None:
    """JPEGs over a 0.25 Gbit/s link to a p4d: the form sends the input, the hover says the point is input-bound and
    the echo factor that hides it, and the form comes back from the job."""
    from gpu_agent import app as agent

    agent.bench_input("local")  # this host's rate (stored once): the p4d's reference
    page.open()
    page.choose("cnn-picker", "resnet18")
    page.choose("machine-picker", "p4d.24xlarge")
    page.type_into("#batch-list", "128")
    Select(page.find("#input-source")).select_by_value("network_jpeg")
    page.type_into("#network-gbps", "0.25")
    assert page.search(timeout=120) == "done", page.find("#error").text
    job = job_of(page)
    assert job["request"]["input"] | {"dataloader_workers": None} == {
        "source": "network_jpeg",
        "network_gbps": 0.25,
        "jpeg_kb": 115.0,
        "dataloader_workers": None,
    }
    [point] = job["result"]["predictions"]
    assert point["input_bound"] is True
    index = next(i for i, t in enumerate(page.traces("plot-batch")) if t["meta"]["role"] == "line")
    label = page.hover("plot-batch", index)
    assert "input-bound" in label and f"data echoing ×{point['echo_factor']}" in label, label
    page.open(f"?job={job['id']}")
    wait_until(lambda: page.state() == "done", 30, "the job named in the URL")
    assert page.find("#input-source").get_attribute("value") == "network_jpeg"
    assert page.find("#network-gbps").get_attribute("value") == "0.25"
    # Back to images in memory with the Gbit/s still typed: the search works and sends no link.
    Select(page.find("#input-source")).select_by_value("memory")
    assert page.search(timeout=120) == "done", page.find("#error").text
    assert (job_of(page)["request"].get("input") or {}).get("network_gbps") is None
    # Batch sizes of a p4d's eight GPUs are each GPU's: the axes say so.
    title = "return document.getElementById(arguments[0]).layout.xaxis.title.text"
    assert page.js(title, "plot-batch") == page.js(title, "plot-memory") == "Mini-batch size per GPU (images)"
    page.open()  # the other tests start from the default form


# ---- the page, read by a person ------------------------------------------------------------------------------


def made_up(
    cnns: list[str],
    machines: list[str],
    sizes: list[int],
    *,
    seconds: Any = None,
    memory: Any = None,
    source: str = "reference",
    models: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A job result drawn by hand: seconds(cnn, machine, bs) and memory(cnn, machine, bs) give each point's numbers;
    min_time and min_cost are the same point (one machine type: cost is time × price)."""
    seconds = seconds or (lambda c, m, bs: 3600.0 * (2 + cnns.index(c)) * 64 / bs)
    memory = memory or (lambda c, m, bs: 0.5 + (1 + cnns.index(c)) * bs / 8)
    predictions = []
    for cnn in cnns:
        for machine in machines:
            for bs in sizes:
                s = seconds(cnn, machine, bs)
                predictions.append({
                    "cnn": cnn, "machine": machine, "batch_size": bs, "source": source, "fits_in_memory": True,
                    "total_seconds": s, "iteration_seconds": s / 1000, "cost_usd": s / 3600,
                    "cost_per_gpu_usd": s / 3600, "gpus_used": 1, "nodes": 1, "global_batch_size": bs,
                    "peak_memory_gib": memory(cnn, machine, bs), "energy_kwh": s / 7200,
                    "reference_error_pct": 9.5, "measured_on": [],
                })  # fmt: skip
    best = []
    for cnn in cnns:
        for machine in machines:
            mine = [p for p in predictions if p["cnn"] == cnn and p["machine"] == machine]
            fastest = min(mine, key=lambda p: p["total_seconds"])
            pick = {k: fastest[k] for k in ("batch_size", "total_seconds", "cost_usd", "source")}
            best.append({"cnn": cnn, "machine": machine, "min_time": pick, "min_cost": dict(pick),
                         "max_batch_size": max(sizes)})  # fmt: skip
    if models is None:
        models = {m: {"status": "reference", "source": "reference", "kind": "reference", "version": 1,
                      "whole_step_mape": 9.5, "detail": f"{m} has no benchmarks of its own yet: reference prediction"}
                  for m in machines}  # fmt: skip
    return {"predictions": predictions, "best": best, "models": models}


def draw(page: Page, result: dict[str, Any], cnns: list[str], machines: list[str]) -> None:
    """Render a result by hand, as the page does when a job ends."""
    page.js("window.traincast.render(arguments[0], arguments[1])", result, {"cnns": cnns, "machines": machines})


def test_each_plot_has_a_legend_beside_it(page: Page) -> None:
    """The cost plot, the batch plot and the memory plot each carry their own legend inside their box,
    and the cost plot's points are labelled with their CNN and machine type."""
    cnns, machines = ["resnet18", "resnet50"], ["g4dn.xlarge", "g5.xlarge"]
    page.open()
    faster = {"g4dn.xlarge": 1.0, "g5.xlarge": 0.6}
    seconds = lambda c, m, bs: 3600.0 * (2 + cnns.index(c)) * faster[m] * 64 / bs  # noqa: E731
    draw(page, made_up(cnns, machines, [8, 16, 32], seconds=seconds), cnns, machines)
    for plot in ("plot-cost", "plot-batch", "plot-memory"):
        assert page.layout(plot)["showlegend"] is True, plot
        box = page.js(
            "const p = document.getElementById(arguments[0]).getBoundingClientRect();"
            "const l = document.querySelector(`#${arguments[0]} .legend`);"
            "if (!l) return null; const r = l.getBoundingClientRect();"
            "return {inside: r.left >= p.left - 1 && r.right <= p.right + 1 && r.top >= p.top - 1"
            " && r.bottom <= p.bottom + 1, entries: [...l.querySelectorAll('.traces')].map(t => t.textContent)}",
            plot,
        )
        assert box and box["inside"], (plot, box)
        assert len(box["entries"]) >= (len(cnns) if plot == "plot-memory" else len(cnns) * len(machines)), box
    points = roles(page.traces("plot-cost"), "point")
    assert all("text" in t["mode"] for t in points)
    labels = page.js("return [...document.querySelectorAll('#plot-cost .textpoint')].map(t => t.textContent)")
    for cnn in cnns:
        for machine in machines:
            assert any(cnn in label and machine in label for label in labels), labels
    # For a person to look at: the plots with their legends (.run/ is ignored by git).
    bottom = page.js("return Math.ceil(document.getElementById('plot-memory').getBoundingClientRect().bottom)")
    try:
        page.viewport(LAPTOP[0], bottom + 20)
        page.screenshot(ROOT / ".run" / "test-web-legends.png")
    finally:
        page.viewport(*LAPTOP)


def test_lines_of_equal_predictions_stay_visible(page: Page) -> None:
    """p5.48xlarge and a3-highgpu-1g answered by reference with the same H100 give equal times: their
    lines get different dashes, each hover names the other, and a note says the lines coincide."""
    machines = ["p5.48xlarge", "a3-highgpu-1g"]
    page.open()
    draw(page, made_up(["resnet50"], machines, [32, 64, 128]), ["resnet50"], machines)
    lines = {t["meta"]["machine"]: t for t in roles(page.traces("plot-batch"), "line")}
    assert lines["p5.48xlarge"]["y"] == lines["a3-highgpu-1g"]["y"]
    assert lines["p5.48xlarge"]["line"]["dash"] != lines["a3-highgpu-1g"]["line"]["dash"]
    index = next(i for i, t in enumerate(page.traces("plot-batch")) if t["meta"].get("machine") == "a3-highgpu-1g"
                 and t["meta"]["role"] == "line")  # fmt: skip
    label = page.hover("plot-batch", index, 1)
    assert "same" in label and "p5.48xlarge" in label, label
    assert any(
        "p5.48xlarge" in n and "a3-highgpu-1g" in n and "coincide" in n for n in page.find("#notes").text.splitlines()
    ), page.find("#notes").text
    # The same two types on two machines as well: their lines coincide again, and the note says so once.
    twice = made_up(["resnet50"], machines, [32, 64, 128])
    twice["predictions"] += [p | {"nodes": 2, "global_batch_size": 2 * p["batch_size"]} for p in twice["predictions"]]
    draw(page, twice, ["resnet50"], machines)
    coincide = [n for n in page.find("#notes").text.splitlines() if "coincide" in n]
    assert len(coincide) == 1, coincide
    # One machine type whose two layouts give equal times: still two lines, told apart, and said.
    one = made_up(["resnet50"], ["p5.48xlarge"], [32, 64, 128])
    one["predictions"] += [p | {"nodes": 2, "global_batch_size": 2 * p["batch_size"]} for p in one["predictions"]]
    draw(page, one, ["resnet50"], ["p5.48xlarge"])
    layouts = roles(page.traces("plot-batch"), "line")
    assert len(layouts) == 2 and layouts[0]["y"] == layouts[1]["y"]
    assert layouts[0]["line"].get("dash") != layouts[1]["line"].get("dash")
    said = [n for n in page.find("#notes").text.splitlines() if "coincide" in n]
    assert len(said) == 1 and "machines" in said[0], said


def test_memory_plot_draws_a_line_per_cnn_and_each_gpus_limit(page: Page) -> None:
    """Peak memory does not depend on the machine type here: one line per CNN, not per CNN × machine;
    each GPU's memory is its own dotted line labelled with the GPU's name (the T4s once, A10G and L4 at 24 GiB
    together)."""
    machine_types = http.get(f"{page.url}/v1/machines").json()["machines"]
    gcp_t4 = next(m["name"] for m in machine_types if m["provider"] == "gcp" and m["gpu"] == "T4")
    cnns, machines = ["resnet18", "resnet50"], ["g4dn.xlarge", gcp_t4, "g5.xlarge", "g6.xlarge"]
    page.open()
    draw(page, made_up(cnns, machines, [8, 16, 32]), cnns, machines)
    memory = roles(page.traces("plot-memory"), "memory")
    assert sorted(t["meta"]["cnn"] for t in memory) == cnns
    limits = {t["y"][0]: t for t in roles(page.traces("plot-memory"), "limit")}
    assert sorted(limits) == [16, 24]
    assert "T4" in limits[16]["name"] and "A10G" in limits[24]["name"] and "L4" in limits[24]["name"]
    drawn = page.js("return [...document.querySelectorAll('#plot-memory .textpoint')].map(t => t.textContent)")
    assert any("T4" in t for t in drawn) and any("A10G" in t and "L4" in t for t in drawn), drawn
    # A CNN whose memory differs by machine type keeps a line per distinct curve.
    draw(page, made_up(["resnet18"], ["g4dn.xlarge", "g5.xlarge"], [8, 16],
                       memory=lambda c, m, bs: bs / (8 if m == "g5.xlarge" else 4)), ["resnet18"],
         ["g4dn.xlarge", "g5.xlarge"])  # fmt: skip
    assert len(roles(page.traces("plot-memory"), "memory")) == 2


def test_spec_table_lists_the_chosen_machine_types_first(page: Page) -> None:
    """The chosen machine types head the specs table; the others are behind a toggle."""
    machine_types = http.get(f"{page.url}/v1/machines").json()["machines"]
    page.open()
    page.choose("machine-picker", "g5.xlarge")
    page.choose("machine-picker", "local")
    shown = (
        "return [...document.querySelectorAll('#machine-table tbody tr')].filter(r => r.offsetParent)"
        ".map(r => r.dataset.machine)"
    )
    assert page.js(shown) == ["local", "g5.xlarge"]
    toggle = page.find("#machine-table-toggle")
    assert str(len(machine_types) - 2) in toggle.text, toggle.text
    toggle.click()
    rows = page.js(shown)
    assert rows[:2] == ["local", "g5.xlarge"] and sorted(rows) == sorted(m["name"] for m in machine_types)
    toggle.click()
    assert page.js(shown) == ["local", "g5.xlarge"]


def test_pickers_are_tall_and_show_whole_prices(page: Page) -> None:
    """At 1366 and 1440 px wide each list shows more than six rows, has no horizontal scrollbar and
    shows every machine type's whole price."""
    page.open()
    try:
        for width in (1366, 1440):
            page.viewport(width, LAPTOP[1])
            for picker in ("cnn-picker", "machine-picker"):
                fit = page.js(
                    "const list = document.querySelector(`#${arguments[0]} .picker-options`);"
                    "const row = list.querySelector('li[data-value]').getBoundingClientRect().height;"
                    "const box = list.getBoundingClientRect(); const cut = [];"
                    "for (const m of list.querySelectorAll('.meta, .name')) {"
                    "  const r = m.getBoundingClientRect();"
                    "  if (m.scrollWidth > m.clientWidth + 1 || r.right > box.right + 0.5) cut.push(m.textContent); }"
                    "return {rows: list.clientHeight / row, scroll: list.scrollWidth - list.clientWidth, cut}",
                    picker,
                )
                assert fit["rows"] > 6 and fit["scroll"] <= 0 and not fit["cut"], (width, picker, fit)
    finally:
        page.viewport(*LAPTOP)


def test_prices_read_says_when_or_undated(page: Page) -> None:
    """Every machine type's "Prices read" is the date its price was read, "undated snapshot" where the
    catalog gives none, "given by you" for your own; never a bare dash."""
    machine_types = http.get(f"{page.url}/v1/machines").json()["machines"]
    page.open()
    page.find("#machine-table-toggle").click()
    cells = page.js(
        "return Object.fromEntries([...document.querySelectorAll('#machine-table tbody tr[data-machine]')]"
        ".map(r => [r.dataset.machine, r.querySelector('[data-field=\"prices_read\"]').textContent]))"
    )
    assert any(not (m["figures_read_on"] or m["price_read_at"]) for m in machine_types if m["provider"] == "aws")
    for m in machine_types:
        read = m["figures_read_on"] or (m["price_read_at"] or "")[:10]
        if m["registered"]:
            expected = "given by you"
        elif m["provider"] == "local":
            expected = "no price (this machine)"
        else:
            expected = read or "undated snapshot"
        assert cells[m["name"]] == expected, (m["name"], cells[m["name"]], read)
    page.find("#machine-table-toggle").click()


def test_models_and_sources_in_plain_words(page: Page) -> None:
    """The notes say what a fitted model learnt from, not its kind's name; the key says a CPU
    machine type was measured on this machine's CPU."""
    models = {"local": {"status": "ok", "source": "benchmarked", "kind": "base_ratio_interval", "version": 3,
                        "loco_mape": 12.3, "interval_coverage": 0.8, "pooled_from": ["local"]}}  # fmt: skip
    page.open()
    draw(page, made_up(["resnet18"], ["local"], [8, 16], source="benchmarked", models=models), ["resnet18"], ["local"])
    notes = page.find("#notes").text
    assert "local: model v3 fitted on its own measured steps" in notes and "base_ratio_interval" not in notes, notes
    key = page.find("#source-key").text
    assert "this machine's CPU" in key and "GPU" not in key, key
    models["g4dn.xlarge"] = {**models["local"], "pooled_from": ["g4dn.xlarge", "local"]}
    machines = ["local", "g4dn.xlarge"]
    draw(page, made_up(["resnet18"], machines, [8, 16], source="benchmarked", models=models), ["resnet18"], machines)
    notes = page.find("#notes").text
    assert "g4dn.xlarge: model v3 fitted on measured steps of g4dn.xlarge and local" in notes, notes
    key = page.find("#source-key").text
    assert "this machine's CPU" in key and "GPU" in key, key


def test_one_best_column_when_fastest_is_cheapest(page: Page) -> None:
    """On one machine type the fastest batch size is the cheapest: one "best" column group, not two
    equal ones; where they differ, both, with "same" where a row's two agree."""
    cnns, machines = ["resnet18"], ["g4dn.xlarge", "g5.xlarge"]
    result = made_up(cnns, machines, [8, 16, 32])
    page.open()
    draw(page, result, cnns, machines)
    heads = page.js("return [...document.querySelectorAll('#best-table thead th')].map(h => h.textContent)")
    assert any(h.startswith("Best batch size") for h in heads) and not any("Cheapest" in h for h in heads), heads
    assert heads[-1] == "Source" and "Largest batch that fits" in heads
    # Two layouts of one machine type: the cheapest is not the fastest there.
    cheap = next(b for b in result["best"] if b["machine"] == "g5.xlarge")
    cheap["min_cost"] = {**cheap["min_cost"], "batch_size": 8, "cost_usd": 0.01}
    draw(page, result, cnns, machines)
    heads = page.js("return [...document.querySelectorAll('#best-table thead th')].map(h => h.textContent)")
    assert any(h.startswith("Fastest") for h in heads) and any(h.startswith("Cheapest") for h in heads), heads
    assert "same as the fastest" in page.find('#best-table tr[data-machine="g4dn.xlarge"]').text


def test_a_suggested_batch_size_says_the_memory_it_leaves_free(page: Page) -> None:
    """The best table's batch size says how much memory it leaves free (the worker keeps 10% where it
    can), and why, where the result gives it."""
    cnns, machines = ["resnet18"], ["g4dn.xlarge"]
    result = made_up(cnns, machines, [8, 16, 32])
    result["best"][0]["min_time"]["memory_headroom_pct"] = 23.4
    result["best"][0]["min_cost"]["memory_headroom_pct"] = 23.4
    page.open()
    draw(page, result, cnns, machines)
    cell = page.find('#best-table tr[data-machine="g4dn.xlarge"] td[data-field="batch_size"]')
    title = cell.get_attribute("title")
    assert "23% memory free" in cell.text and title is not None and "10%" in title, cell.text

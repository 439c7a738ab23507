"""The dashboard as a person sees it: real `serve --ui` on the sample, real headless Chromium.

Starts the extender as a subprocess (`python -m extender serve --ui`), opens `/ui` in Debian's
Chromium through chromedriver (selenium), and checks what is on the page: the node kinds and
nodes, a MIG node's drawing with a held partition naming its claim, a decision row appearing
after a /filter call (live update, no reload), the per-node reasons of that decision, and the
explain form's report. It saves a screenshot (`DRA_UI_SCREENSHOT=path` keeps it, e.g. for the
README) and checks that every resource the page loaded came from the server itself.

Needs `chromium` and `chromium-driver` (Debian) and the `ui-test` extra (selenium). Skipped
when they are missing, except where `DRA_REQUIRE_BROWSER=1` (set by `.ci/run`, which installs
them): there a missing browser fails the test.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from extender.explaining import load_pods

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
PODS = load_pods(Path(__file__).resolve().parents[1] / "data" / "pipeline_pods.yaml")
ROOT = Path(__file__).resolve().parents[2]

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:  # pragma: no cover - depends on the installed extras
    webdriver = None

_missing = [
    what
    for what, present in (("chromium", CHROMIUM), ("chromedriver", CHROMEDRIVER), ("selenium", webdriver))
    if not present
]
if _missing and os.environ.get("DRA_REQUIRE_BROWSER") != "1":
    pytestmark = pytest.mark.skip(reason=f"browser test needs {', '.join(_missing)}")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = _free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "extender", "serve", "--ui", "--listen", f"127.0.0.1:{port}"],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180  # the first start on a machine compiles the kernels
        while True:
            try:
                with urllib.request.urlopen(f"{base}/readyz", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"serve --ui did not become ready:\n{log.read_text()}")
            time.sleep(0.3)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    assert not _missing, f"DRA_REQUIRE_BROWSER=1 but {', '.join(_missing)} missing"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1400,1800", "--no-first-run", "--disable-extensions"):  # fmt: skip
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def _post(url: str, body: object) -> object:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def test_dashboard_shows_fleet_node_decisions_and_explain(server: str, browser, tmp_path: Path) -> None:
    driver = browser
    wait = WebDriverWait(driver, 20)
    driver.get(f"{server}/ui")
    wait.until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "#kinds tbody tr")))
    load_ms = driver.execute_script(
        "const t = performance.getEntriesByType('navigation')[0]; return t.loadEventEnd - t.startTime;"
    )
    print(f"dashboard page load on the sample: {load_ms:.0f} ms")

    kinds = driver.find_element(By.ID, "kinds").text
    assert "a3-highgpu-8g" in kinds and "a2-ultragpu-2g" in kinds
    cards = [c.get_attribute("data-node") for c in driver.find_elements(By.CSS_SELECTOR, ".node-card")]
    assert len(cards) == 18 and "a100-mig-node-01" in cards and "cpu-node-01" in cards

    # A MIG node: partitions drawn inside their GPU, the held one names its claim.
    driver.find_element(By.CSS_SELECTOR, '.node-card[data-node="a100-mig-node-01"]').click()
    wait.until(expected_conditions.visibility_of_element_located((By.CSS_SELECTOR, "#node-drawing .device")))
    gpu = driver.find_element(By.CSS_SELECTOR, '#node-drawing .device[data-device="gpu-0"]')
    held = gpu.find_element(By.CSS_SELECTOR, '.partition[data-device="gpu-0-mig-1g10gb-0"]')
    assert "held" in held.get_attribute("class")
    assert held.get_attribute("title") == "held by ml-training/notebook-alice-mig"
    assert "gpu-0-counter-set" in driver.find_element(By.ID, "node-counters").text

    # A filter call from outside shows up as a decision without reloading the page.
    pod = next(p for p in PODS if p["metadata"]["name"] == "gpu-training")
    nodes = ["h100-node-01", "h100-node-02", "l40s-node-01", "cpu-node-01"]
    answer = _post(f"{server}/filter", {"Pod": pod, "NodeNames": nodes})
    assert sorted(answer["NodeNames"]) == ["h100-node-01", "h100-node-02"]
    row = wait.until(
        expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "#decisions tbody tr"))
    )
    assert "filter" in row.text and "ml-training/gpu-training" in row.text
    row.click()
    detail = wait.until(expected_conditions.visibility_of_element_located((By.ID, "decision-nodes")))
    wait.until(lambda _: "l40s-node-01" in detail.text)
    assert "h100.nvidia.com" in detail.text  # the reason l40s-node-01 was turned away
    cells = {
        row.find_elements(By.TAG_NAME, "td")[0].text: row.find_elements(By.TAG_NAME, "td")[-1].text
        for row in detail.find_elements(By.CSS_SELECTOR, "tbody tr")
    }
    assert cells["h100-node-02"] == "passed" and "h100.nvidia.com" in cells["cpu-node-01"]

    # Explain a pasted pod.
    driver.find_element(By.ID, "pod-text").send_keys(yaml.safe_dump(pod))
    driver.find_element(By.ID, "explain-button").click()
    wait.until(lambda d: "h100-node-02: PASSED" in d.find_element(By.ID, "explain-output").text)

    # Everything the page loaded came from this server.
    urls = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name);")
    assert urls and all(url.startswith(server + "/") for url in urls), urls

    shot = Path(os.environ.get("DRA_UI_SCREENSHOT") or tmp_path / "dashboard.png")
    driver.execute_script("window.scrollTo(0, 0);")
    assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 10_000


def _decision_cells(server: str, driver, wait, verb: str) -> dict[str, list[str]]:
    """Open the newest decision of `verb` on the page and return its node rows: name -> cells."""
    with urllib.request.urlopen(f"{server}/ui/api/decisions", timeout=10) as response:
        seq = next(d["seq"] for d in json.loads(response.read())["decisions"] if d["verb"] == verb)
    row = wait.until(
        expected_conditions.presence_of_element_located(
            (By.CSS_SELECTOR, f'#decisions tbody tr[data-seq="{seq}"]')
        )
    )
    row.click()
    wait.until(lambda d: d.find_element(By.ID, "decision-seq").text.startswith(f"#{seq}:"))
    detail = driver.find_element(By.ID, "decision-nodes")
    rows = [
        [td.text for td in r.find_elements(By.TAG_NAME, "td")]
        for r in detail.find_elements(By.CSS_SELECTOR, "tbody tr")
    ]
    return {cells[0]: cells for cells in rows if len(cells) == 4}


def test_nodes_named_like_object_properties_show_their_own_values(server: str, browser) -> None:
    """A node named `constructor` or `__proto__` shows its own score and reason, not a property of
    Object.prototype (the page used to look nodes up in plain objects: `function Object() ...`)."""
    driver = browser
    wait = WebDriverWait(driver, 20)
    driver.get(f"{server}/ui")
    wait.until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "#kinds tbody tr")))
    pod = next(p for p in PODS if p["metadata"]["name"] == "gpu-training")
    nodes = ["constructor", "__proto__", "toString", "h100-node-01"]
    answer = _post(f"{server}/filter", {"Pod": pod, "NodeNames": nodes})
    assert answer["NodeNames"] == ["h100-node-01"]
    cells = _decision_cells(server, driver, wait, "filter")
    for name in ("constructor", "__proto__", "toString"):
        _, score, terms, reason = cells[name]
        assert score == "" and terms == "" and reason and "function" not in reason and "[object" not in reason
    assert cells["h100-node-01"][3] == "passed"

    _post(f"{server}/prioritize", {"Pod": pod, "NodeNames": nodes})
    cells = _decision_cells(server, driver, wait, "prioritize")
    assert cells["constructor"][1] == "0" and cells["constructor"][2] == ""
    assert cells["h100-node-01"][1] == "10" and cells["h100-node-01"][2].startswith("score ")
    assert not any("function" in text for row in cells.values() for text in row)


def test_a_bind_decision_shows_the_claim_it_created(server: str, browser) -> None:
    """A pod asking for `example.com/gpu` (KEP-5004): the bind decision's row names the claim bind
    created, under the name it got, with its devices."""
    driver = browser
    wait = WebDriverWait(driver, 20)
    driver.get(f"{server}/ui")
    wait.until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "#kinds tbody tr")))
    meta = {"name": "browser-gpu-job", "namespace": "default", "uid": "browser-gpu-job-uid"}
    pod = {
        "metadata": meta,
        "spec": {"containers": [{"name": "main", "resources": {"limits": {"example.com/gpu": "1"}}}]},
    }
    assert _post(f"{server}/filter", {"Pod": pod, "NodeNames": ["h100-node-01"]})["NodeNames"] == [
        "h100-node-01"
    ]
    bind = {"PodName": meta["name"], "PodNamespace": "default", "PodUID": meta["uid"], "Node": "h100-node-01"}
    assert _post(f"{server}/bind", bind) == {"Error": ""}
    cells = _decision_cells(server, driver, wait, "bind")
    _, score, claim, reason = cells["h100-node-01"]
    assert score == "" and reason == "bound"
    assert claim.startswith("default/browser-gpu-job-extended-resources-")
    assert claim.split(" ", 1)[1].startswith("(created by bind): gpu.nvidia.com/h100-node-01/gpu-")

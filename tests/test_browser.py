"""The playground in a real browser: JupyterLab on loopback, headless Chromium runs every cell.

What a user of ``make lab`` sees: the notebook opens with the project's kernel, the controls render as
widgets, the figures appear, and no cell fails. Needs Debian's ``chromium`` and ``chromium-driver``
(``make browser`` installs them and runs this test) and ``selenium``; skipped with the reason otherwise.
The screenshot is saved as ``explore.png`` under the test's tmp_path.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import nbformat
import pytest

from dynamix import paths

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--window-size=1600,2000")
TINY = {"cluster": "clusters/heldout/hetero-speed-4.yaml", "policies": ["static:64", "lbbsp"], "profile": "smoke",
        "workload": "", "epochs": 0.3, "seeds": 1, "open_run": ""}
"""The playground's parameters for the browser run (out_dir is set per test)."""

# Every cell's outputs from the notebook model in the page (``--LabApp.expose_app_in_browser``).
OUTPUTS_JS = """
const panel = window.jupyterapp.shell.currentWidget;
if (!panel || !panel.content || !panel.content.model) return null;
const cells = [];
const model = panel.content.model;
for (let i = 0; i < model.cells.length; i++) {
  const cell = model.cells.get(i);
  if (cell.type !== 'code') continue;
  const outs = [];
  for (let j = 0; j < cell.outputs.length; j++) {
    const o = cell.outputs.get(j).toJSON();
    outs.push({type: o.output_type, ename: o.ename || '', evalue: o.evalue || '', mimes: Object.keys(o.data || {})});
  }
  cells.push({count: cell.executionCount, outputs: outs});
}
return {busy: panel.sessionContext.session ? panel.sessionContext.session.kernel.status : 'none', cells: cells};
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@pytest.fixture
def lab(tmp_path):
    """JupyterLab (the venv's) on a free loopback port with a token, root ``tmp_path/root`` holding the
    playground with the tiny parameters; yields (url of the notebook, tmp_path)."""
    root = tmp_path / "root"
    root.mkdir()
    nb = nbformat.read(paths.NOTEBOOKS / "explore.ipynb", as_version=4)
    params = {**TINY, "out_dir": str(tmp_path / "out")}
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    cell.source = "\n".join(f"{k} = {v!r}" for k, v in params.items())
    nbformat.write(nb, root / "explore.ipynb")
    port, token = _free_port(), secrets.token_hex(16)
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces"), "PYTHONHASHSEED": "0",
           "DYNAMIX_RESULTS": str(tmp_path / "results")}  # the kernel's results root
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--ServerApp.port={port}",
           "--ServerApp.ip=127.0.0.1", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
           f"--ServerApp.root_dir={root}", "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=",
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    log = open(tmp_path / "lab.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        _wait_http(f"http://127.0.0.1:{port}/api/status?token={token}", 120)
        yield f"http://127.0.0.1:{port}/lab/tree/explore.ipynb?token={token}", tmp_path
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                    reason="no Chromium: `make browser` installs Debian's chromium and chromium-driver")
def test_playground_runs_in_jupyterlab_and_draws_its_figures(lab):
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (requirements.lock)")
    from selenium.webdriver.chrome.service import Service

    url, tmp_path = lab
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER, log_output=str(tmp_path / "chromedriver.log")),
                              options=options)
    try:
        driver.set_script_timeout(30)
        driver.get(url)
        _until(lambda: driver.execute_script("return !!(window.jupyterapp && window.jupyterapp.shell.currentWidget"
                                             " && window.jupyterapp.shell.currentWidget.sessionContext"
                                             " && window.jupyterapp.shell.currentWidget.sessionContext.session)"),
               180, "the notebook did not open with a kernel")
        driver.execute_script("window.jupyterapp.commands.execute('notebook:run-all-cells');")
        state = _until(lambda: _finished(driver.execute_script(OUTPUTS_JS)), 600, "the cells did not finish")
        _until(lambda: driver.execute_script(
            "return document.querySelectorAll('.jp-OutputArea-output img').length") >= 4, 60, "no figures drawn")
        driver.execute_script(
            "const imgs = document.querySelectorAll('.jp-OutputArea-output img');"
            "imgs[Math.min(1, imgs.length - 1)].scrollIntoView({block: 'start'});")
        time.sleep(1.0)
        driver.save_screenshot(str(tmp_path / "explore.png"))
        errors = [o for c in state["cells"] for o in c["outputs"] if o["type"] == "error"]
        assert not errors, errors
        images = driver.execute_script("return document.querySelectorAll('.jp-OutputArea-output img').length")
        assert images >= 4, f"{images} figures rendered (cluster + 3 views expected)"  # cluster, 3 live views
        widgets = driver.execute_script("return document.querySelectorAll('.jp-OutputArea-output .widget-tab,"
                                        " .jp-OutputArea-output .lm-TabBar').length")
        assert widgets >= 1, "the playground's controls did not render as widgets"
        assert (tmp_path / "out" / "figures" / "accuracy_vs_time.png").exists()
        assert (tmp_path / "explore.png").stat().st_size > 10_000
        # the controls' own Run button: the same runs (read back from the run cache), drawn into the widget
        run = next(b for b in driver.find_elements("css selector", "button.jupyter-button") if b.text.strip() == "Run")
        driver.execute_script("arguments[0].scrollIntoView({block: 'start'});", run)
        run.click()
        _until(lambda: "done:" in driver.execute_script("return document.body.innerText"), 300,
               "the Run button did not finish")
        widget_images = driver.execute_script("return document.querySelectorAll('.widget-output img').length")
        assert widget_images >= 4, f"{widget_images} figures in the controls (cluster + 3 views expected)"
        driver.save_screenshot(str(tmp_path / "explore-controls.png"))
    finally:
        driver.quit()


def _finished(state: dict | None) -> dict | None:
    """``state`` once every code cell ran and the kernel is idle, else None."""
    if not state or state["busy"] != "idle" or not state["cells"]:
        return None
    return state if all(c["count"] is not None for c in state["cells"]) else None


def _until(check, timeout_s: float, message: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(1.0)
    pytest.fail(f"{message} within {timeout_s:.0f} s")

"""JupyterLab in a real browser: notebook 02 opened through the Jupytext viewer, run all, its token-view widget
renders live and moving the 'position t' slider redraws its table (the kernel's callback, which no saved
report can run). Needs jupyterlab (the `lab` extra; or $EAGLE3LIB_LAB_PYTHON, an interpreter that has it) and
headless Chromium; skipped with the reason otherwise."""
from __future__ import annotations

import importlib.util
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.browser import Browser, skip_reason

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = "02_training_sample_replay.py"
LAB_PYTHON = os.environ.get("EAGLE3LIB_LAB_PYTHON") or (
    sys.executable if importlib.util.find_spec("jupyterlab") else None)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(LAB_PYTHON is None, reason="jupyterlab is not installed (pip install -e '.[lab]', or set "
                       "EAGLE3LIB_LAB_PYTHON to a Python that has it)"),
    pytest.mark.skipif(skip_reason() is not None, reason=str(skip_reason())),
]

# the first token view (notebook 02 shows one per layout) and its parts
VIEW = "document.querySelector('.widget-vbox')"
TABLE = f"({VIEW}).querySelector('.eagle3lib-position-table').innerText"
POSITION = f"[...({VIEW}).querySelectorAll('.widget-slider')].find(s => s.innerText.startsWith('position t'))"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, timeout: float, server: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"jupyter lab exited with {server.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"jupyter lab did not answer {url} within {timeout:g} s:\n{log.read_text()[-3000:]}")


@pytest.fixture
def lab(tmp_path):
    """A JupyterLab server on 127.0.0.1 with a token, serving a copy of notebook 02 (so nothing it saves
    touches the repository); yields (base url, token); stopped afterwards."""
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(ROOT / "notebooks" / NOTEBOOK, root / NOTEBOOK)
    shutil.copy(ROOT / "jupytext.toml", root / "jupytext.toml")
    port, token = _free_port(), secrets.token_hex(16)
    share, etc = Path(sys.prefix) / "share" / "jupyter", Path(sys.prefix) / "etc" / "jupyter"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               JUPYTER_PATH=str(share), JUPYTER_CONFIG_PATH=str(etc), JUPYTER_RUNTIME_DIR=str(tmp_path / "rt"),
               JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "settings"), OMP_NUM_THREADS="1")
    log = tmp_path / "lab.log"
    argv = [LAB_PYTHON, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
            f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}", "--LabApp.expose_app_in_browser=True",
            f"--LabApp.workspaces_dir={tmp_path / 'ws'}", "--allow-root"]
    with open(log, "wb") as out:
        server = subprocess.Popen(argv, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_http(f"{base}/api/status?token={token}", 120, server, log)
        yield base, token
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)


def _wait_for(page, expression: str, seconds: float):
    """The truthy value of `expression`, polled in the page every 250 ms (Playwright's TimeoutError after)."""
    return page.wait_for_function(expression, timeout=seconds * 1000, polling=250).json_value()


def test_the_token_view_renders_live_and_a_slider_redraws_its_table(lab):
    base, token = lab
    with Browser(loopback=True, timeout=60, height=1000) as b:
        page = b.page(f"{base}/lab?token={token}")
        try:
            _wait_for(page, "!!(window.jupyterapp && window.jupyterapp.commands.hasCommand('docmanager:open'))", 90)
            page.evaluate("window.jupyterapp.restored.then(() => true)")
            opened = page.evaluate(f"window.jupyterapp.commands.execute('docmanager:open', {{path: "
                                   f"{json.dumps(NOTEBOOK)}, factory: 'Jupytext Notebook'}}).then(w => "
                                   "[w.context.path, !!(w.content && w.content.model && w.content.model.cells)])")
            assert opened == [NOTEBOOK, True]                   # the .py opened as a notebook, through Jupytext
            kernel = ("(() => { const s = window.jupyterapp.shell.currentWidget.sessionContext.session; "
                      "return !!(s && s.kernel && s.kernel.status === 'idle'); })()")
            picked = _wait_for(page, f"document.querySelector('.jp-Dialog .jp-mod-accept') ? 'dialog' : "
                                     f"({kernel} ? 'kernel' : null)", 90)   # a kernel, or the dialog to pick one
            if picked == "dialog":                              # no kernel in the .py: Lab asks, Python 3 is picked
                page.evaluate("document.querySelector('.jp-Dialog .jp-mod-accept').click(), true")
                _wait_for(page, kernel, 90)                     # the Python 3 kernel idle
            page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells').then(() => true)")
            # the token view rendered live with its position table
            _wait_for(page, f"!!({VIEW}) && !!({POSITION}) && ({TABLE}).includes('draft top-k')", 420)
            assert page.evaluate("!document.body.innerText.includes('Error displaying widget')")
            before_pos = int(page.evaluate(f"({POSITION}).innerText.split(/\\s+/).pop()"))
            before = page.evaluate(TABLE)
            focused = page.evaluate(f"(() => {{ const h = ({POSITION}).querySelector('.noUi-handle'); h.focus(); "
                                    "return document.activeElement === h; })()")
            assert focused
            page.keyboard.press("ArrowRight")
            # the table redrawn after the slider moved
            after = _wait_for(page, f"(() => {{ const t = {TABLE}; return t !== {json.dumps(before)} ? t : null; }})()",
                              90)
            assert int(page.evaluate(f"({POSITION}).innerText.split(/\\s+/).pop()")) == before_pos + 1
            assert "draft top-k" in after and after != before
        finally:
            page.close()

"""Tests for the report runner (eagle3lib.report, eagle3lib.report.index) on tiny notebooks written here."""
from __future__ import annotations

import errno
import json
import os
import sys
import textwrap
import time
from pathlib import Path

import nbformat
import pytest
import yaml

from eagle3lib.report import runner as report
from eagle3lib.report import params as report_params
from eagle3lib.errors import MissingFileError, ReportError
from eagle3lib.report.index import load_rows, index_html

GOOD = '''\
# %% [markdown]
# # Good notebook

# %% tags=["parameters"]
n: int = 3  # how many things
label: str = "demo"  # a label

# %%
from eagle3lib.report import findings
print(f"good {n} {label}")
findings.record("headline", f"good {n}")
findings.record("n", n)
'''

RAISES = '''\
# %% [markdown]
# # Raising notebook

# %% tags=["parameters"]
n: int = 1  # unused

# %%
from eagle3lib.report import findings
findings.record("headline", "partial")
print("before the failure")

# %%
raise ValueError("planted failure")

# %%
print("never reached")
'''

HANGS = '''\
# %% [markdown]
# # Hanging notebook

# %% tags=["parameters"]
pid_file: str = "kernel.pid"  # where the kernel writes its pid

# %%
import os
from pathlib import Path
Path(pid_file).write_text(str(os.getpid()))
print("hanging now")

# %%
import time
time.sleep(300)
'''


def _write(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def _rows(out: Path) -> dict[str, dict]:
    return {r["notebook"]: r for r in json.loads((out / "index.json").read_text())["notebooks"]}


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "zombie" not in status


def _leftovers(out: Path) -> list[str]:
    return [p.name for p in out.iterdir() if p.name.endswith(".tmp") or ".running." in p.name]


@pytest.mark.slow
def test_failures_are_reported_and_earlier_good_report_kept(tmp_path, capsys):
    """ok / failed / timeout rows, partial notebooks kept, last good HTML kept, kernel gone, exit code 1."""
    nbs = _write(tmp_path / "notebooks", {"00_good.py": GOOD, "01_raises.py": RAISES, "02_hangs.py": HANGS})
    out = _write(tmp_path / "reports", {"01_raises.html": "EARLIER GOOD REPORT",
                                        "00_good.failed.html": "stale failure of an earlier run"})
    params = tmp_path / "params.yaml"
    params.write_text("n: 7\n00_good:\n  label: from-yaml\n")
    t0 = time.monotonic()
    rc = report.main(["--notebooks", str(nbs), "--out", str(out), "-f", str(params), "--timeout", "6"])
    assert time.monotonic() - t0 < 60
    assert rc == 1
    rows = _rows(out)
    assert [rows[k]["status"] for k in ("00_good", "01_raises", "02_hangs")] == ["ok", "failed", "timeout"]

    good = rows["00_good"]
    assert good["findings"] == {"headline": "good 7", "n": 7}
    assert good["html"] == "00_good.html" and "good 7 from-yaml" in (out / "00_good.html").read_text()
    assert json.loads((out / "00_good.findings.json").read_text())["headline"] == "good 7"
    assert not (out / "00_good.failed.html").exists()  # the good run retired the stale failure

    bad = rows["01_raises"]
    assert "ValueError" in bad["error"] and "planted failure" in bad["error"]
    assert bad["findings"] == {"headline": "partial"}
    assert (out / "01_raises.html").read_text() == "EARLIER GOOD REPORT"
    assert bad["html"] == "01_raises.failed.html" and bad["previous_html"] == "01_raises.html"
    assert "planted failure" in (out / "01_raises.failed.html").read_text()
    executed = nbformat.read(out / "01_raises.failed.ipynb", as_version=4)
    printed_cells = [o.get("text", "") for c in executed.cells for o in c.get("outputs", [])]
    assert "before the failure\n" in printed_cells and "never reached\n" not in printed_cells

    hung = rows["02_hangs"]
    assert "timeout" in hung["error"] and "import time" in hung["error"]
    assert "hanging now" in (out / "02_hangs.failed.ipynb").read_text()
    pid = int((tmp_path / "kernel.pid").read_text())  # cwd of the notebooks is the folder above notebooks/
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(pid), "the timed-out kernel is still running"

    page = (out / "index.html").read_text()
    assert "planted failure" in page and "timeout" in page and "last good report" in page and "good 7" in page
    assert _leftovers(out) == []
    printed = capsys.readouterr().out
    assert "[1/3] 00_good: ok" in printed and "[3/3] 02_hangs: timeout" in printed


def test_write_failure_keeps_earlier_report(tmp_path, monkeypatch):
    """A disk-full error while publishing marks the row failed and leaves the earlier HTML untouched."""
    nbs = _write(tmp_path / "notebooks", {"00_good.py": GOOD})
    out = _write(tmp_path / "reports", {"00_good.html": "EARLIER GOOD REPORT"})
    real_replace = os.replace

    def disk_full(src, dst):
        if Path(dst).name == "00_good.html":
            raise OSError(errno.ENOSPC, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", disk_full)
    rc = report.main(["--notebooks", str(nbs), "--out", str(out), "--timeout", "30"])
    assert rc == 1
    row = _rows(out)["00_good"]
    assert row["status"] == "failed" and "No space left on device" in row["error"]
    assert row["html"] is None and row["previous_html"] == "00_good.html"
    assert (out / "00_good.html").read_text() == "EARLIER GOOD REPORT"
    assert _leftovers(out) == []


STOPS = '''\
# %% tags=["parameters"]
data_dir: str = "x"  # a folder the notebook reads
draft: str = ""  # a draft (read by the runner before the run)

# %%
from eagle3lib.errors import DataError
raise DataError(data_dir, "no training data found", expected="samples", found="none")
'''


def test_a_notebook_stopped_by_its_input_or_refused_before_the_run_exits_3(tmp_path, capsys):
    """A notebook that stops on an eagle3lib error is an input it could not read (exit 3, a problem naming the
    parameter whose value the message shows); one given a draft that does not exist is not run at all."""
    nbs = _write(tmp_path / "notebooks", {"00_stops.py": STOPS})
    out = tmp_path / "reports"
    (tmp_path / "p.yaml").write_text(f"data_dir: {tmp_path / 'mine'}\n")
    assert report.main(["--notebooks", str(nbs), "--out", str(out), "-f", str(tmp_path / "p.yaml")]) == 3
    (p,) = json.loads((out / "index.json").read_text())["problems"]
    assert (p["param"], p["given"], p["error"], p["failure"]) == ("data_dir", str(tmp_path / "mine"), "DataError",
                                                                  False)
    (tmp_path / "q.yaml").write_text(f"draft: {tmp_path / 'no_draft'}\n")
    assert report.main(["--notebooks", str(nbs), "--out", str(out), "-f", str(tmp_path / "q.yaml")]) == 3
    row = _rows(out)["00_stops"]
    assert row["status"] == "skipped" and row["ipynb"] is None and row["problems"][0]["param"] == "draft"
    assert "unreadable input: draft" in capsys.readouterr().out


def test_bad_arguments_exit_2_before_any_kernel(tmp_path, capsys):
    """A missing params file, a typo'd section, an unknown --only and a missing folder are usage errors."""
    nbs = _write(tmp_path / "notebooks", {"00_good.py": GOOD})
    out = tmp_path / "reports"
    assert report.main(["--notebooks", str(nbs), "--out", str(out), "-f", str(tmp_path / "nope.yaml")]) == 2
    (tmp_path / "typo.yaml").write_text("00_godo:\n  n: 1\n")
    assert report.main(["--notebooks", str(nbs), "--out", str(out), "-f", str(tmp_path / "typo.yaml")]) == 2
    assert report.main(["--notebooks", str(nbs), "--out", str(out), "--only", "07"]) == 2
    assert report.main(["--notebooks", str(tmp_path / "missing"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "nope.yaml" in err and "00_godo" in err and "'07'" in err and "missing" in err
    assert not out.exists()


def test_load_params_sections_override_top_level(tmp_path):
    """Top-level keys are common; a section named after a notebook stem is that notebook's override."""
    p = tmp_path / "p.yaml"
    p.write_text("device: cuda\nn: 2\n00_good:\n  n: 5\n01_raises:\n")
    common, sections = report_params.load_params(p, ["00_good", "01_raises"])
    assert common == {"device": "cuda", "n": 2}
    assert sections == {"00_good": {"n": 5}, "01_raises": {}}
    params, warns = report_params.params_for("00_good", {"n": ("3", ""), "label": ("'x'", "")}, common,
                                      {"n": 5, "lable": "typo"})
    assert params == {"n": 5}  # 'device' is not declared by this notebook, so it is not injected
    assert len(warns) == 1 and "'lable'" in warns[0]


@pytest.mark.parametrize("text, match", [("- a\n- b\n", "mapping"), ("a: [1\n", "not valid YAML"),
                                         ("00_good: 3\n", "section must be a mapping")])
def test_load_params_rejects_malformed_files(tmp_path, text, match):
    """Malformed parameter files raise ReportError naming the file."""
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(ReportError, match=match) as e:
        report_params.load_params(p, ["00_good"])
    assert "bad.yaml" in str(e.value)
    with pytest.raises(MissingFileError):
        report_params.load_params(tmp_path / "absent.yaml", ["00_good"])


def test_select_and_discover(tmp_path):
    """Only NN_topic.py files are notebooks; --only takes numbers or stems in any order."""
    nbs = _write(tmp_path / "nb", {"00_a.py": GOOD, "01_b.py": GOOD, "02_c.py": GOOD, "helper.py": "", "3_x.py": ""})
    sources = report.discover_notebooks(nbs)
    assert [p.name for p in sources] == ["00_a.py", "01_b.py", "02_c.py"]
    assert [p.stem for p in report.select_notebooks(sources, "02,00")] == ["00_a", "02_c"]
    assert [p.stem for p in report.select_notebooks(sources, "01_b")] == ["01_b"]
    assert report.select_notebooks(sources, None) == sources
    with pytest.raises(ReportError, match="no notebook matches '5'"):
        report.select_notebooks(sources, "5")


def test_declared_parameters_and_template_round_trip(tmp_path):
    """The template lists every parameter commented; uncommenting a line gives that value to that notebook."""
    nbs = _write(tmp_path / "nb", {"00_good.py": GOOD, "02_hangs.py": HANGS})
    declared = report_params.declared_parameters(report_params.read_source(nbs / "00_good.py"))
    assert declared == {"n": ("3", "how many things"), "label": ('"demo"', "a label")}
    text = report_params.params_template(report.discover_notebooks(nbs))
    assert yaml.safe_load(text) == {"00_good": None, "02_hangs": None}
    assert '  # pid_file: "kernel.pid"  # where the kernel writes its pid' in text
    edited = tmp_path / "edited.yaml"
    edited.write_text(text.replace("  # n: 3", "  n: 4"))
    assert report_params.load_params(edited, ["00_good", "02_hangs"]) == ({}, {"00_good": {"n": 4}, "02_hangs": {}})


def test_notebook_without_parameters_cell_declares_nothing(tmp_path):
    """A notebook with no tagged cell declares no parameters (nothing is injected into it)."""
    nbs = _write(tmp_path / "nb", {"00_plain.py": "# %%\nx = 1\n"})
    nb = report_params.read_source(nbs / "00_plain.py")
    assert report_params.parameters_cells(nb) == [] and report_params.declared_parameters(nb) == {}


def test_ensure_kernel_installs_into_sys_prefix_when_missing(monkeypatch):
    """With no python3 spec, the spec is installed into this environment; a foreign one is an error."""
    from ipykernel import kernelspec as ik
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager, NoSuchKernel

    installed = []
    state = {"argv0": None}

    def get_spec(self, name):
        if state["argv0"] is None:
            raise NoSuchKernel(name)
        return KernelSpec(argv=[state["argv0"], "-m", "ipykernel_launcher"], display_name="x", language="python")

    def install(kernel_name, prefix):
        installed.append((kernel_name, prefix))
        state["argv0"] = sys.executable

    monkeypatch.setattr(KernelSpecManager, "get_kernel_spec", get_spec)
    monkeypatch.setattr(ik, "install", install)
    report.ensure_kernel()
    assert installed == [("python3", sys.prefix)]
    report.ensure_kernel()  # already fine: nothing more installed
    assert len(installed) == 1
    state["argv0"] = "/opt/other/bin/python"
    monkeypatch.setattr(ik, "install", lambda kernel_name, prefix: None)
    with pytest.raises(ReportError, match="another Python"):
        report.ensure_kernel()


def test_index_keeps_rows_of_notebooks_not_run_and_escapes_html(tmp_path):
    """--only runs keep the other notebooks' earlier rows; findings text is HTML-escaped."""
    (tmp_path / "index.json").write_text(json.dumps({"notebooks": [
        {"notebook": "00_a", "status": "ok", "findings": {"headline": "<b>bold</b>"}},
        {"notebook": "01_b", "status": "failed", "error": "boom"},
        {"notebook": "09_gone", "status": "ok"}]}))
    rows = load_rows(tmp_path, keep={"00_a", "01_b"})
    assert [r["notebook"] for r in rows] == ["00_a", "01_b"] and all(r["earlier_run"] for r in rows)
    page = index_html(rows, {"params_file": None})
    assert "&lt;b&gt;bold&lt;/b&gt;" in page and "<b>bold</b>" not in page and "(earlier run before run ids)" in page
    (tmp_path / "index.json").write_text("{not json")
    assert load_rows(tmp_path, keep={"00_a"}) == []


@pytest.mark.slow
def test_report_module_runs_as_script(tmp_path):
    """`python -m eagle3lib.report --params-template` works from a shell (the Makefile's entry point)."""
    import subprocess

    nbs = _write(tmp_path / "notebooks", {"00_good.py": GOOD})
    proc = subprocess.run([sys.executable, "-m", "eagle3lib.report", "--notebooks", str(nbs), "--params-template"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert textwrap.dedent("""\
        00_good:
          # n: 3  # how many things""") in proc.stdout


def test_declared_parameters_reads_help_after_the_value(tmp_path):
    """A '#' inside a default string is not taken for the help comment; a broken cell names the file."""
    src = '# %% tags=["parameters"]\ntag: str = "a#b"  # hash inside\nrate = 0.5\n'
    nbs = _write(tmp_path / "nb", {"00_x.py": src, "01_y.py": '# %% tags=["parameters"]\nx: int = (\n'})
    assert report_params.declared_parameters(report_params.read_source(nbs / "00_x.py")) == {
        "tag": ('"a#b"', "hash inside"), "rate": ("0.5", "")}
    with pytest.raises(ReportError, match="01_y.py.*not valid Python"):
        report_params.params_template(report.discover_notebooks(nbs))


FIGURE = '''\
# %% [markdown]
# # Figure notebook

# %% tags=["parameters"]
tag_it: bool = True  # unused here: the tag is in the cell header

# %% [markdown]
# ## 1. Layout search: the evidence

# %% tags=["index-figure"]
import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(2, 1.5))
ax.plot([0, 1, 4])
plt.show()

# %%
from matplotlib.figure import Figure  # the library's plots: no pyplot, the Figure is the cell's value
bare = Figure(figsize=(2, 1.5))
bare.subplots().plot([3, 1])
bare

# %% [markdown]
# ## 2. Findings

# %%
from eagle3lib.report import findings
findings.record("headline", "figure drawn")
findings.record("layout_search", {"best": "a"})
'''


def test_the_tagged_figure_and_evidence_anchors_reach_the_index(tmp_path):
    """The PNG of the cell tagged index-figure is written beside the report and shown inline in the index; the
    headline links to the figure's section, a finding to the section named after it; untagged: no figure. A
    matplotlib Figure that is a cell's value (no pyplot) is drawn in the report, not printed as text."""
    nbs = _write(tmp_path / "notebooks", {"00_fig.py": FIGURE})
    out = tmp_path / "reports"
    assert report.main(["--notebooks", str(nbs), "--out", str(out)]) == 0
    row = _rows(out)["00_fig"]
    assert row["figure"] == "00_fig.figure.png"
    assert (out / "00_fig.figure.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    anchor = row["evidence"]["headline"]["anchor"]
    assert row["evidence"] == {"headline": {"anchor": anchor, "section": "1. Layout search: the evidence"},
                               "layout_search": {"anchor": anchor, "section": "1. Layout search: the evidence"}}
    page = (out / "00_fig.html").read_text()
    assert f'id="{anchor}"' in page and "celltag_index-figure" in page
    assert page.count('src="data:image/png;base64,') == 2 and "Figure size" not in page   # the bare Figure too
    index = (out / "index.html").read_text()
    assert f'<a href="00_fig.html#{anchor}"><img class="fig"' in index and "data:image/png;base64," in index

    (nbs / "00_fig.py").write_text(FIGURE.replace('# %% tags=["index-figure"]', "# %%"))
    assert report.main(["--notebooks", str(nbs), "--out", str(out)]) == 0
    assert _rows(out)["00_fig"]["figure"] is None and not (out / "00_fig.figure.png").exists()
    assert "<img" not in (out / "index.html").read_text()


def test_the_vllm_demo_without_a_vllm_venv_says_how_to_make_one_and_skips(tmp_path, monkeypatch, capsys):
    """params/demo-vllm.yaml on a machine without .venv-vllm: nothing is served, no notebook runs, every one is
    'skipped' with the reason (`make vllm`), and the run exits 0: it never fails for want of the engine."""
    from eagle3lib.report import runner
    monkeypatch.setenv("EAGLE3LIB_VLLM_PYTHON", str(tmp_path / "no-such-python"))
    params = Path(__file__).resolve().parents[2] / "params" / "demo-vllm.yaml"
    code = runner.main(["-f", str(params), "--out", str(tmp_path / "reports"),
                        "--notebooks", str(Path(__file__).resolve().parents[2] / "notebooks")])
    out = capsys.readouterr().out
    assert code == 0 and "make vllm" in out and "skipped" in out
    index = json.loads((tmp_path / "reports" / "index.json").read_text())
    assert {r["status"] for r in index["notebooks"]} == {"skipped"} and len(index["notebooks"]) == 5
    assert not index["diagnosis"]["healthy"]
    assert not (tmp_path / "reports" / "00_checkpoint_audit.html").exists()


def test_a_notebook_whose_input_is_not_given_on_a_users_draft_is_not_run(tmp_path, capsys):
    """Notebook 02 given a user's draft but no training data: not run (no kernel), its row says "not run: not
    given: train_data", its parts' not-checked findings reach the diagnosis, and the run exits 0."""
    import torch
    from safetensors.torch import save_file

    from tests.conftest import TINY_SPECFORGE

    params = 'draft: str = ""\ntrain_data: str = ""\nn: int = 3'
    nbs = _write(tmp_path / "notebooks", {"02_training_sample_replay.py": GOOD.replace("n: int = 3", params)})
    draft = tmp_path / "draft"          # a draft folder the given-checks read: its config and one tensor
    draft.mkdir()
    (draft / "config.json").write_text(json.dumps(TINY_SPECFORGE))
    save_file({"fc.weight": torch.zeros(32, 128)}, str(draft / "model.safetensors"))
    (tmp_path / "p.yaml").write_text(f"draft: {draft}\n")
    out = tmp_path / "reports"
    assert report.main(["--notebooks", str(nbs), "--out", str(out), "-f", str(tmp_path / "p.yaml")]) == 0
    row = _rows(out)["02_training_sample_replay"]
    assert row["status"] == "skipped" and row["error"] == "not run: not given: train_data" and row["html"] is None
    assert row["not_given"] == ["train_data (02_training_sample_replay)"]
    index = json.loads((out / "index.json").read_text())
    assert {v["status"] for v in index["diagnosis"]["verdicts"]} == {"not checked"}


def test_an_unknown_key_stops_the_run_with_did_you_mean_in_the_index(tmp_path, capsys):
    """A YAML typo (`traindata:`) is no warning: the run does not start (exit 2, no kernel), stderr and the index
    name the key and what it may have meant; earlier rows are kept as stale."""
    nbs = _write(tmp_path / "notebooks", {"00_good.py": GOOD.replace("n: int = 3", 'train_data: str = ""\nn: int = 3')})
    out = tmp_path / "reports"
    (tmp_path / "typo.yaml").write_text("traindata: /data/train\n")
    assert report.main(["--notebooks", str(nbs), "--out", str(out), "-f", str(tmp_path / "typo.yaml")]) == 2
    err = capsys.readouterr().err
    assert "'traindata' (top level): did you mean 'train_data'?" in err
    index = json.loads((out / "index.json").read_text())
    (p,) = index["problems"]
    assert (p["param"], p["expected"]) == ("traindata", "did you mean 'train_data'?")
    assert "did you mean" in (out / "index.html").read_text() and not list(out.glob("*.ipynb"))

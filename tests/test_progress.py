"""eagle3lib.progress: a live bar in a terminal, one final stdout line per loop in a report run, silence when off."""
from __future__ import annotations

import io
import sys

import pytest
import torch
import transformers

from eagle3lib import progress
from eagle3lib.hidden.capture import capture_batch
from eagle3lib.report import findings


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def report_run(monkeypatch, tmp_path):
    """The environment the report runner gives each notebook's kernel."""
    monkeypatch.setenv(findings.ENV_VAR, str(tmp_path / "findings.json"))


@pytest.fixture
def no_report(monkeypatch):
    monkeypatch.delenv(findings.ENV_VAR, raising=False)


def test_the_report_variable_is_the_runners():
    assert progress.REPORT_ENV_VAR == findings.ENV_VAR


def test_report_run_prints_one_final_line_per_loop(report_run, capsys):
    assert progress.mode() == "summary"
    seen = [x for x in progress.track(range(7), desc="replay heldout")]
    assert seen == list(range(7))
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert len(lines) == 1 and err == ""
    assert lines[0].startswith("replay heldout: 7/7 it in ") and lines[0].endswith(" it/s)")


def test_bar_counts_updates_and_adds_its_postfix(report_run, capsys):
    with progress.bar(total=10, desc="draft", unit="step") as b:
        for _ in range(4):
            b.update(2)
        b.set_postfix(loss="1.250")
        assert (b.n, b.total) == (8, 10)
    b.close()                                          # closing twice prints nothing more
    out, err = capsys.readouterr()
    assert out.count("\n") == 1 and err == ""
    assert out.startswith("draft: 8/10 steps in ") and out.rstrip().endswith("step/s), loss=1.250")


def test_unknown_total_and_an_early_stop(report_run, capsys):
    for i in progress.track(iter(range(100)), desc="dump"):
        if i == 2:
            break
    out, _ = capsys.readouterr()
    assert out.startswith("dump: 2 it in ") and out.count("\n") == 1


def test_a_log_or_pipe_gets_the_summary_too(no_report, capsys):
    # under pytest's capture stderr is not a terminal, as in a job writing to a log file
    assert progress.mode() == "summary"
    list(progress.track([1, 2, 3], desc="checks"))
    assert capsys.readouterr().out.startswith("checks: 3/3 it in ")


@pytest.mark.parametrize("env", ["report_run", "no_report"])
def test_progress_false_is_silent(env, request, capsys, monkeypatch):
    request.getfixturevalue(env)
    monkeypatch.setattr("sys.stderr", _Terminal())
    assert progress.mode(False) == "off"
    with progress.bar(total=3, desc="quiet", progress=False) as b:
        b.update(3)
        b.set_postfix(x=1)
    list(progress.track(range(3), desc="quiet", progress=False))
    out, err = capsys.readouterr()
    assert out == "" and err == "" and progress.sys.stderr.getvalue() == ""


def test_a_terminal_gets_a_live_bar_and_no_stdout_line(no_report, capsys, monkeypatch):
    term = _Terminal()
    monkeypatch.setattr("sys.stderr", term)
    assert progress.mode() == "live"
    list(progress.track(range(5), desc="live loop"))
    assert capsys.readouterr().out == ""
    assert "live loop" in term.getvalue() and "5/5" in term.getvalue()


def test_a_report_run_wins_over_a_terminal(report_run, monkeypatch):
    monkeypatch.setattr("sys.stderr", _Terminal())
    assert progress.mode() == "summary"


def test_a_library_loop_prints_one_line_in_a_report_run(report_run, capsys):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32)
    model = transformers.LlamaForCausalLM(cfg).eval()
    seqs = [torch.arange(1, 6 + i) for i in range(3)]
    caps = capture_batch(model, seqs, batch_size=2, progress=True)
    out, err = capsys.readouterr()
    assert len(caps) == 3
    assert out.count("\n") == 1 and out.startswith("capture: 2/2 batches in ") and err == ""
    capture_batch(model, seqs, batch_size=2, progress=False)
    assert capsys.readouterr() == ("", "")


class _Shell:
    def __init__(self, app: str):
        self.config = {app: {"connection_file": "kernel.json"}}


class _IPython:
    def __init__(self, app: str):
        self._shell = _Shell(app)

    def get_ipython(self):
        return self._shell


def test_an_interactive_kernel_gets_a_widget_bar_a_report_kernel_the_line(no_report, monkeypatch):
    monkeypatch.setitem(sys.modules, "IPython", _IPython("IPKernelApp"))        # a Jupyter kernel
    assert progress.mode() == "notebook"
    monkeypatch.setenv(findings.ENV_VAR, "x.findings.json")                      # ... that the runner started
    assert progress.mode() == "summary"


def test_a_terminal_ipython_is_not_a_notebook(no_report, monkeypatch):
    monkeypatch.setitem(sys.modules, "IPython", _IPython("TerminalIPythonApp"))
    assert progress.mode() == "summary"                                          # stderr captured: not a TTY
    monkeypatch.setattr("sys.stderr", _Terminal())
    assert progress.mode() == "live"


def test_units_read_as_words():
    assert [progress.plural(u, n) for u, n in (("sample", 64), ("sample", 1), ("batch", 2), ("it", 5), ("pass", 3))] \
        == ["samples", "sample", "batches", "it", "passes"]

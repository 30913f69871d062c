"""Tests for eagle3lib.opened: every path a process opens or lists is recorded, in process and through the
environment variable a notebook kernel inherits."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

from eagle3lib import opened

ROOT = Path(__file__).resolve().parents[1]


def test_recording_sees_open_listdir_and_torch_load(tmp_path):
    (tmp_path / "a.txt").write_text("x")
    torch.save({"w": torch.ones(2)}, tmp_path / "t.pt")
    (tmp_path / "sub").mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("y")
    outside.read_text()                      # before the block: not recorded
    with opened.recording() as seen:
        (tmp_path / "a.txt").read_text()
        torch.load(tmp_path / "t.pt", weights_only=True)
        os.listdir(tmp_path / "sub")
    assert opened.under(seen, tmp_path) == sorted(str(tmp_path / n) for n in ("a.txt", "sub", "t.pt"))
    with opened.recording() as later:
        pass
    assert later == set()


def test_counting_counts_each_open_and_not_a_listing(tmp_path):
    (tmp_path / "a.txt").write_text("x")
    (tmp_path / "sub").mkdir()
    with opened.counting() as opens:
        (tmp_path / "a.txt").read_text()
        (tmp_path / "a.txt").read_bytes()
        os.listdir(tmp_path / "sub")
    (tmp_path / "a.txt").read_text()         # after the block: not counted
    assert {p: n for p, n in opens.items() if p.startswith(str(tmp_path))} == {str(tmp_path / "a.txt"): 2}


def test_under_keeps_only_the_paths_inside_a_folder(tmp_path):
    paths = {str(tmp_path / "data" / "x"), str(tmp_path / "data"), str(tmp_path / "data2" / "y"), "/elsewhere"}
    assert opened.under(paths, tmp_path / "data") == [str(tmp_path / "data"), str(tmp_path / "data" / "x")]


def test_a_process_with_the_variable_appends_what_it_opens_once(tmp_path):
    """A process that imports eagle3lib with $EAGLE3LIB_OPENED set (a notebook kernel) logs each path once; the
    interpreter's own files are left out."""
    (tmp_path / "in.txt").write_text("x")
    log = tmp_path / "opened.log"
    code = f"import eagle3lib, json; open({str(tmp_path / 'in.txt')!r}).read(); open({str(tmp_path / 'in.txt')!r})"
    env = {**os.environ, opened.ENV_VAR: str(log), "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=tmp_path)
    lines = log.read_text().splitlines()
    assert lines.count(str(tmp_path / "in.txt")) == 1
    assert not [p for p in lines if p.startswith(sys.prefix) or p.endswith(".py")], lines
    assert opened.read_log(log) == set(lines) and opened.read_log(tmp_path / "none.log") == set()

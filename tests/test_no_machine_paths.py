"""No tracked file holds a path of the machine that wrote it: this checkout's root, $HOME, or an absolute path into
a checkout's data or venv folders (another machine's root). Shipped logs and records are repository-relative or
relative to their own folder (`eagle3demo.portable`, `eagle3demo.vllm_world`)."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from eagle3demo import portable, vllm_world
from eagle3demo.portable import relative_record
from eagle3lib.demo.shipped_served import rebased_record

ROOT = Path(__file__).resolve().parents[1]


def tracked_files() -> list[Path]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (or no git): the tracked files cannot be listed")
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True).stdout
    return [ROOT / p for p in out.decode().split("\0") if p]


def test_no_tracked_file_holds_a_machine_path():
    bad = {}
    for p in tracked_files():
        if p.is_file() and not p.is_symlink() and portable.is_text(p):
            rel = p.relative_to(ROOT).as_posix()
            engine_output = rel.startswith(("data/", "benchmarks/results/"))    # what an engine wrote
            found = portable.machine_paths(p.read_text(errors="replace"), engine_output=engine_output)
            if found:
                bad[str(p.relative_to(ROOT))] = found[:3]
    assert not bad, f"{len(bad)} tracked files hold machine paths (fix the writer; eagle3demo.portable.make_portable " \
                    f"rewrites a folder): {dict(list(bad.items())[:10])}"


def test_machine_paths_finds_root_home_and_another_checkout():
    # the sample paths are assembled, so that this file holds none itself
    root, home, other = "/srv" + "/ckout", "/home" + "/ann", "/opt" + "/repo"
    text = (f"model='{root}/data/demo/target' File \"{home}/.pyenv/lib/x.py\" {other}/data/demo_vllm/healthy/draft "
            f"{other}/.venv-vllm/lib/vllm/a.py ok: data/demo/target ~/x")
    found = portable.machine_paths(text, root=root, home=home)
    assert any(f.startswith(f"{root}/data/demo/target") for f in found)
    assert any(f.startswith(f"{home}/.pyenv") for f in found)
    assert f"{other}/data/demo_vllm/healthy/draft" in found and f"{other}/.venv-vllm/lib/vllm/a.py" in found
    assert not portable.machine_paths("data/demo/target ~/x /tmp/vv/bin/python", root=root, home=home)


def test_engine_output_loses_its_python_prefix_and_scratch_folders():
    """A served log's traceback keeps what a reader needs (lib/pythonX.Y/site-packages/vllm/...) and loses the
    venv's or pyenv's prefix and the scratch folder the draft was written to."""
    venv = "/tmp" + "/vv"
    text = (f'File "{venv}/lib/python3.11/site-packages/vllm/v1/engine/core.py", line 3; {venv}/bin/python -m vllm; '
            f"model={'/tmp' + '/hA2'}/draft_fc3; ~/.pyenv/versions/3.11.7/lib/python3.11/x.py")
    assert len(portable.machine_paths(text, engine_output=True)) == 4
    got = portable.portable_text(text)
    assert got == ('File "<python>/lib/python3.11/site-packages/vllm/v1/engine/core.py", line 3; <python>/bin/python '
                   "-m vllm; model=<tmp>/draft_fc3; <python>/lib/python3.11/x.py")
    assert not portable.machine_paths(got, engine_output=True)


def test_portable_text_makes_root_relative_and_home_tilde():
    home = "/home" + "/ann"
    root = f"{home}/ckout"
    text = f"--model {root}/data/demo/target cwd={root} at {home}/.pyenv/lib/x.py"
    got = portable.portable_text(text, root=root, home=home)
    assert got == "--model data/demo/target cwd=. at ~/.pyenv/lib/x.py"
    assert not portable.machine_paths(got, root=root, home=home)


def test_make_portable_rewrites_text_and_leaves_binary(tmp_path):
    (tmp_path / "a.log").write_text(f"model {ROOT}/data/demo/target\n")
    (tmp_path / "w.safetensors").write_bytes(b"\0\1" + str(ROOT).encode())
    changed = portable.make_portable(tmp_path)
    assert changed == [tmp_path / "a.log"]
    assert (tmp_path / "a.log").read_text() == "model data/demo/target\n"
    assert (tmp_path / "w.safetensors").read_bytes() == b"\0\1" + str(ROOT).encode()


def test_deployment_records_read_from_a_copied_folder(tmp_path):
    """A committed deployment.json (paths relative to its folder) copied elsewhere reads its own files there; an
    older record with absolute paths of its serving machine is moved to where it lies."""
    rec = json.loads((ROOT / "data" / "demo_vllm" / "healthy" / "deployment.json").read_text())
    assert rec["dir"] == "." and not Path(rec["log"]).is_absolute()
    got = rebased_record(rec, tmp_path, vllm_world.PATHS)
    assert got["dir"] == str(tmp_path) and got["log"] == str(tmp_path / "served" / "server.log")
    old = {**rec, "dir": "/elsewhere/d", "log": "/elsewhere/d/served/server.log"}
    assert rebased_record(old, tmp_path, vllm_world.PATHS)["log"] == str(tmp_path / "served" / "server.log")
    back = relative_record(got, tmp_path, vllm_world.PATHS)
    assert back["dir"] == "." and back["log"] == "served/server.log"

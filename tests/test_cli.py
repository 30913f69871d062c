"""eagle3lib.cli: `eagle3lib COMMAND ...` hands the rest of the line to that package's own CLI, untouched."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from eagle3lib import cli
from eagle3lib.demo import __main__ as demo_main
from eagle3lib.diagnose import cli as diagnose_cli
from eagle3lib.hidden import recapture
from eagle3lib.replay import cli as replay_cli
from eagle3lib.report import runner

ROOT = Path(__file__).resolve().parents[1]
OWN = {"diagnose": diagnose_cli.main, "report": runner.main, "recapture": recapture.main, "replay": replay_cli.main,
       "demo": demo_main.main}


def _help(capsys, call) -> str:
    with pytest.raises(SystemExit) as e:
        call()
    assert e.value.code == 0
    return capsys.readouterr().out


def test_the_commands_are_the_five_package_clis():
    assert set(cli.COMMANDS) == set(OWN)


@pytest.mark.parametrize("name", sorted(OWN))
def test_a_commands_help_is_its_own_clis_help(capsys, name):
    """`eagle3lib NAME --help` prints exactly what the package's CLI prints for --help (its argparse, not a copy)."""
    own = _help(capsys, lambda: OWN[name](["--help"]))
    assert own.startswith("usage: ") and own == _help(capsys, lambda: cli.main([name, "--help"]))


def test_arguments_and_exit_code_pass_through_untouched(monkeypatch):
    """Everything after the command, including what looks like the top level's own options, reaches the CLI as is;
    its return value is the exit code."""
    seen = []
    monkeypatch.setattr(diagnose_cli, "main", lambda argv: seen.append(argv) or 3)
    argv = ["--draft", "d", "-h", "--", "report", "x y"]
    assert cli.main(["diagnose", *argv]) == 3 and seen == [argv]


def test_no_or_an_unknown_command_is_a_usage_error_naming_the_commands(capsys):
    for argv in ([], ["diagnos"]):
        with pytest.raises(SystemExit) as e:
            cli.main(argv)
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("usage: eagle3lib") and "COMMAND" in err
    assert "invalid choice: 'diagnos'" in err and all(f"'{name}'" in err for name in OWN)
    top = _help(capsys, lambda: cli.main(["--help"]))
    assert all(f"  {name} " in top for name in OWN)


def test_python_dash_m_eagle3lib_runs_a_command(monkeypatch):
    """`python -m eagle3lib diagnose --help` (what the console script does, without installing it)."""
    monkeypatch.setenv("COLUMNS", "100")       # argparse wraps help to the terminal: the same width on both sides
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-m", "eagle3lib", "diagnose", "--help"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout == diagnose_cli.parser().format_help()

"""Packaging checks: environment.yml vs pyproject, the README's two commands, notebook sources, git hygiene."""
from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from eagle3lib.report import runner as report
from eagle3lib.report import params as report_params

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = report.discover_notebooks(ROOT / "notebooks")
_REQ = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(.*?)\s*$")
CONDA_TO_PIP = {"pytorch": "torch"}  # conda-forge names that differ from the PyPI name


def _requirements(specs: list[str]) -> dict[str, str]:
    """{normalized name: version spec} of requirement strings."""
    out = {}
    for spec in specs:
        name, version = _REQ.match(spec).groups()
        name = re.sub(r"[-_.]+", "-", name.lower())
        out[CONDA_TO_PIP.get(name, name)] = version.replace(" ", "")
    return out


def _readme_commands() -> list[str]:
    """The `make ...` lines of the README's first code block (the commands for a fresh machine)."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```[a-z]*\n(.*?)```", text, re.S)
    assert block, "README.md has no code block"
    return [ln.split("#")[0].strip() for ln in block.group(1).splitlines() if ln.strip().startswith("make ")]


def test_environment_yml_matches_pyproject():
    """environment.yml lists the same names and lower bounds as pyproject's dependencies + dev extra."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = _requirements(project["dependencies"] + project["optional-dependencies"]["dev"])
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    listed = _requirements([d for d in conda if not re.match(r"^(python|pip)\b", d)]
                           + [d for d in pip if not d.startswith("-")])
    assert listed == wanted
    assert any(re.match(r"^python=3\.11", d) for d in conda)


def test_console_script_is_the_cli_module():
    """pyproject's [project.scripts] `eagle3lib` names a callable that is eagle3lib.cli.main (pip install -e . makes
    the script from it); every command it dispatches is documented in docs/cli.md."""
    import importlib

    from eagle3lib import cli

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, attr = scripts["eagle3lib"].partition(":")
    entry = getattr(importlib.import_module(module), attr)
    assert entry is cli.main and callable(entry)
    doc = (ROOT / "docs" / "cli.md").read_text()
    for name in cli.COMMANDS:
        assert f"eagle3lib {name}" in doc, name


def test_readme_shows_two_commands_and_ci_runs_a_test_command_it_names():
    """README's first code block holds exactly `make report` and `make test`; .ci/run runs `make test-all`, the full
    suite, which the README names beside it; the Makefile has all three targets, and the quick one deselects what
    the full one runs."""
    assert _readme_commands() == ["make report", "make test"]
    ci = (ROOT / ".ci" / "run").read_text()
    code = [ln.strip() for ln in ci.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    assert "set -euo pipefail" in code and code[-1] == "make test-all"
    parsed = subprocess.run(["bash", "-n", str(ROOT / ".ci" / "run")], capture_output=True, text=True)
    assert parsed.returncode == 0, parsed.stderr                 # bash reads it (a syntax error fails CI at once)
    assert "`make test-all`" in (ROOT / "README.md").read_text()
    makefile = (ROOT / "Makefile").read_text()
    for target in ("report", "test", "test-all"):
        assert re.search(rf"^{target}:", makefile, re.M), target
    quick = re.search(r"^QUICK := (.+)$", makefile, re.M).group(1)
    assert "not slow" in quick and "not engine" in quick and "e2e" in quick


@pytest.mark.parametrize("source", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_source_follows_the_house_rules(source):
    """Readable by jupytext; markdown title first; one literal-only parameters cell, first code cell; no def/class."""
    nb = report_params.read_source(source)
    assert nb.cells and nb.cells[0].cell_type == "markdown" and nb.cells[0].source.lstrip().startswith("# ")
    tagged = report_params.parameters_cells(nb)
    assert len(tagged) == 1, f"{len(tagged)} cells tagged parameters"
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    assert code[0] == tagged[0], "the parameters cell must be the first code cell"
    for stmt in ast.parse(nb.cells[tagged[0]].source).body:
        assert isinstance(stmt, (ast.Assign, ast.AnnAssign)), f"line {stmt.lineno}: only assignments"
        ast.literal_eval(stmt.value)  # literals only: derived values go in the next cell
    for i in code:
        bad = [ln for ln in nb.cells[i].source.splitlines() if re.match(r"\s*(async\s+def|def|class)\s", ln)]
        assert not bad, f"cell {i} defines {bad}: move it into eagle3lib"


def test_gpu_box_params_cover_every_notebook_parameter():
    """params/gpu-box.yaml loads with the notebooks' names and mentions each notebook's every parameter."""
    path = ROOT / "params" / "gpu-box.yaml"
    report_params.load_params(path, [p.stem for p in NOTEBOOKS])  # no section for an unknown notebook
    text = path.read_text()
    for source in NOTEBOOKS:
        section = re.search(rf"^{source.stem}:\n((?:[ \t].*\n|\n)*)", text, re.M)
        assert section, f"no section '{source.stem}:' (regenerate: python -m eagle3lib.report --params-template)"
        for name in report_params.declared_parameters(report_params.read_source(source)):
            assert re.search(rf"^\s*(?:#\s*)?{name}:", section.group(1), re.M), f"{source.stem}.{name} missing"


def test_no_ipynb_tracked_under_notebooks():
    """Notebooks live in git as jupytext .py only; the .ipynb are build products."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(["git", "ls-files", "notebooks"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    assert [f for f in tracked if f.endswith(".ipynb")] == []
    assert "notebooks/*.ipynb" in (ROOT / ".gitignore").read_text().split()


def _lab_config(source: Path):
    """The jupytext configuration JupyterLab's Jupytext contents manager applies to `source`."""
    from jupytext.config import find_jupytext_configuration_file, load_jupytext_config

    assert find_jupytext_configuration_file(str(source.parent)) == str(ROOT / "jupytext.toml")
    return load_jupytext_config(str(source))


@pytest.mark.parametrize("source", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_source_survives_a_jupytext_round_trip(source):
    """py:percent -> ipynb -> py:percent with the repository's jupytext.toml gives back the same text."""
    import jupytext
    import nbformat

    config, text = _lab_config(source), source.read_text()
    nb = jupytext.reads(text, fmt="py:percent", config=config)
    ipynb = nbformat.reads(jupytext.writes(nb, fmt="ipynb"), as_version=4)
    assert jupytext.writes(ipynb, fmt="py:percent", config=config) == text


@pytest.mark.parametrize("source", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_saving_in_lab_leaves_the_tracked_source_unchanged(source):
    """What a Lab session adds to the paired .ipynb (kernel name and language_info, jupytext's version, cell flags,
    outputs, papermill's metadata), also to an .ipynb paired before jupytext.toml held the filters, never reaches
    the .py: only the user's own edits do."""
    import jupytext
    import nbformat

    config, text = _lab_config(source), source.read_text()
    nb = nbformat.reads(jupytext.writes(jupytext.reads(text, fmt="py:percent", config=config), fmt="ipynb"),
                        as_version=4)
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"name": "python", "version": "3.11.9", "pygments_lexer": "ipython3"}
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}, "version_major": 2}}
    nb.metadata["jupytext"] = {"formats": "ipynb,py:percent", "text_representation": {   # as paired by an older
        "extension": ".py", "format_name": "percent", "format_version": "1.3", "jupytext_version": "1.99.0"}}  # .py
    for cell in nb.cells:
        cell.metadata.update({"editable": True, "slideshow": {"slide_type": ""}, "jp-MarkdownHeadingCollapsed": True,
                              "papermill": {"status": "completed"}, "trusted": True})
        if cell.cell_type == "code":
            cell.execution_count = 7
            cell.metadata["execution"] = {"iopub.status.idle": "2026-01-01T00:00:00Z"}
            cell.outputs = [nbformat.v4.new_output("stream", text="ran\n")]
    assert jupytext.writes(nb, fmt="py:percent", config=config) == text
    nb.cells[1].source += "\nx = 1"                                     # the user's own edit does reach it
    assert jupytext.writes(nb, fmt="py:percent", config=config) != text


def test_the_users_venv_gets_the_workbook_and_only_tests_get_the_test_peers():
    """`make report` / `make setup` install what the workbook needs (and JupyterLab); pytest, Playwright, the parity
    extra and SpecForge / speculators (--no-deps) come only with `bootstrap.sh --test`, which `make test` and `make
    test-all` run (issue 46: no resolver conflict lines in the user's set-up); every install of eagle3lib says
    --no-warn-conflicts (the peers' own pins are expected to disagree)."""
    script = (ROOT / "tools" / "bootstrap.sh").read_text()
    code = "\n".join(ln for ln in script.splitlines() if not ln.lstrip().startswith("#"))
    start = code.index('if [ "${1:-}" = "--test" ]; then')
    test_part = code[start: code.index("\nfi\n", code.index("exit 0", start))]
    user_part = code.replace(test_part, "")
    for word in (r"\bdev\b(?!/null)", "parity", "specforge", "speculators", "PEERS"):
        assert not re.search(word, user_part), word
        assert re.search(word, test_part), word
    assert '-e ".[lab]"' in user_part and "--no-deps $PEERS" in test_part
    installs = re.findall(r"pip install[^\n]*-e [^\n]*", code)
    assert len(installs) == 2 and all("--no-warn-conflicts" in i for i in installs), installs
    makefile = (ROOT / "Makefile").read_text()
    deps = dict(re.findall(r"^([\w$()-]+):\s*(.*)$", makefile, re.M))
    assert deps["report"] == "$(STAMP)" and deps["setup"] == "$(STAMP)"
    assert deps["test"] == deps["test-all"] == "$(TEST_STAMP)" and deps["$(TEST_STAMP)"] == "$(STAMP)"
    assert "bootstrap.sh --test" in makefile


def test_the_installed_package_holds_the_library_and_not_the_demo_builder(tmp_path):
    """`pip install .` ships eagle3lib alone (issue 49): pyproject's package find (as setuptools runs it) matches
    eagle3lib.demo (the restore) and no eagle3demo module (the builder beside it); the installed package, imported
    from outside the checkout, restores the world without the builder: eagle3demo is not importable there, and
    eagle3lib.demo.world loads no builder module."""
    from setuptools import find_namespace_packages

    found = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = find_namespace_packages(where=str(ROOT), include=found["include"], exclude=found.get("exclude", ()))
    assert "eagle3lib.demo" in packages and not [p for p in packages if p.split(".")[0] == "eagle3demo"], packages
    builder = sorted(p.stem for p in (ROOT / "eagle3demo").glob("*.py") if p.stem not in ("__init__", "__main__"))
    assert not [m for m in builder if (ROOT / "eagle3lib" / "demo" / f"{m}.py").exists()], builder
    code = ("import importlib.util, sys\nimport eagle3lib.demo.world, eagle3lib.demo.__main__\n"
            "print(importlib.util.find_spec('eagle3demo') is None)\n"
            f"print(sorted(m for m in sys.modules if m.startswith('eagle3') and (m.split('.')[-1] in {builder!r} or "
            "m.startswith('eagle3demo'))))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split("\n")[:2] == ["True", "[]"], p.stdout

"""Packaging checks: environment.yml vs pyproject, the README's two commands, notebook sources, git hygiene."""
from __future__ import annotations

import ast
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from eagle3lib.report import runner as report

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = report.discover(ROOT / "notebooks")
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


def test_readme_shows_two_commands_and_ci_runs_the_test_one():
    """README's first code block holds exactly `make report` and `make test`; .ci/run runs `make test`."""
    assert _readme_commands() == ["make report", "make test"]
    ci = (ROOT / ".ci" / "run").read_text()
    code = [ln.strip() for ln in ci.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    assert "set -euo pipefail" in code and "make test" in code
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^report:", makefile, re.M) and re.search(r"^test:", makefile, re.M)


@pytest.mark.parametrize("source", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_source_follows_the_house_rules(source):
    """Readable by jupytext; markdown title first; one literal-only parameters cell, first code cell; no def/class."""
    nb = report.read_source(source)
    assert nb.cells and nb.cells[0].cell_type == "markdown" and nb.cells[0].source.lstrip().startswith("# ")
    tagged = report.parameters_cells(nb)
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
    report.load_params(path, [p.stem for p in NOTEBOOKS])  # no section for an unknown notebook
    text = path.read_text()
    for source in NOTEBOOKS:
        section = re.search(rf"^{source.stem}:\n((?:[ \t].*\n|\n)*)", text, re.M)
        assert section, f"no section '{source.stem}:' (regenerate: python -m eagle3lib.report --params-template)"
        for name in report.declared_parameters(report.read_source(source)):
            assert re.search(rf"^\s*(?:#\s*)?{name}:", section.group(1), re.M), f"{source.stem}.{name} missing"


def test_no_ipynb_tracked_under_notebooks():
    """Notebooks live in git as jupytext .py only; the .ipynb are build products."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(["git", "ls-files", "notebooks"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    assert [f for f in tracked if f.endswith(".ipynb")] == []
    assert "notebooks/*.ipynb" in (ROOT / ".gitignore").read_text().split()

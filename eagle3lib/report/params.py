"""The notebooks' parameters: each notebook's parameters cell, a YAML parameters file (top-level keys and notebook
sections), the template that lists every parameter, and what a parameters file asks to exist before the notebooks
run (`prepare`: `vllm_demo` and `sglang_demo`, the shipped served demo deployments the notebooks read), and the keys
no notebook takes (`unknown_keys`: each named with the closest parameter names, "did you mean 'train_data'?").

Usage: ``common, sections = load_params("params/gpu-box.yaml", stems); params_for(stem, declared, common, sec)``.
"""
from __future__ import annotations

import ast
import difflib
import json
import os
import re
from pathlib import Path

import yaml

from ..engines.versions import ENGINES
from ..errors import MissingFileError, ReportError
from ..names import WHAT, renamed
from ..steps.given import Problem

KERNEL = "python3"       # the kernel every notebook runs on (papermill and JupyterLab alike)


def read_source(source: Path):
    """The notebook of a jupytext percent ``.py`` file, with the ``python3`` kernel set."""
    import jupytext

    try:
        nb = jupytext.read(source, fmt="py:percent")
    except Exception as e:  # jupytext raises many types on a broken file
        raise ReportError(str(source), "jupytext cannot read the notebook source", expected="a percent-format "
                          ".py notebook", found=f"{type(e).__name__}: {e}") from None
    nb.metadata["kernelspec"] = {"name": KERNEL, "display_name": "Python 3", "language": "python"}
    return nb


def parameters_cells(nb) -> list[int]:
    """Indices of the cells tagged ``parameters``."""
    return [i for i, c in enumerate(nb.cells) if "parameters" in c.get("metadata", {}).get("tags", [])]


def declared_parameters(nb, where: str = "parameters cell") -> dict[str, tuple[str, str]]:
    """Names in the ``parameters`` cell -> (default as written, help comment)."""
    cells = parameters_cells(nb)
    if not cells:
        return {}
    src = nb.cells[cells[0]].source
    lines = src.splitlines()
    try:
        body = ast.parse(src).body
    except SyntaxError as e:
        raise ReportError(where, "not valid Python", found=f"line {e.lineno}: {e.msg}") from None
    out = {}
    for stmt in body:
        target = stmt.target if isinstance(stmt, ast.AnnAssign) else (
            stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None)
        if not isinstance(target, ast.Name) or stmt.value is None:
            continue
        rest = lines[stmt.end_lineno - 1].encode()[stmt.end_col_offset:].decode(errors="replace")  # after the value
        comment = rest.split("#", 1)[1].strip() if "#" in rest else ""
        out[target.id] = (ast.get_source_segment(src, stmt.value) or "", comment)
    return out


def load_params(path: str | os.PathLike | None, stems: list[str]) -> tuple[dict, dict[str, dict]]:
    """(top-level parameters, {notebook stem: section}) from a YAML file; a section overrides the top level. An
    input's old name (`names.OLD_PARAMS`: `train_data_path`, `sample_data`, ...) is read as its new name, with a
    FutureWarning: at the top level it then reaches every notebook that takes the input."""
    if path is None:
        return {}, {}
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(str(path), "parameters file not found", expected="a YAML file", found="nothing")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise ReportError(str(path), "parameters file is not valid YAML", found=str(e).replace("\n", " ")) from None
    if not isinstance(data, dict):
        raise ReportError(str(path), "parameters file must be a mapping", expected="name: value lines and "
                          "notebook sections", found=type(data).__name__)
    common, sections = {}, {}
    for key, value in data.items():
        key = str(key)
        if key in stems:
            if value is not None and not isinstance(value, dict):
                raise ReportError(f"{path}, section '{key}'", "a notebook section must be a mapping",
                                  expected="name: value lines", found=type(value).__name__)
            sections[key] = renamed({str(k): v for k, v in (value or {}).items()}, f"{path}, section '{key}'")
        elif re.match(r"^\d\d_", key):
            raise ReportError(f"{path}, section '{key}'", "no notebook of that name", expected=stems, found=key,
                              cause="a typo, or a notebook that was renamed")
        else:
            common[key] = value
    return renamed(common, str(path)), sections


def params_for(stem: str, declared: dict, common: dict, section: dict) -> tuple[dict, list[str]]:
    """Parameters to inject into one notebook, and warnings for section keys the notebook does not declare: every
    top-level key the notebook declares, then its section's keys over them. An old input name is passed under its
    new one (`names.renamed`, warned), so it reaches every notebook that takes the input."""
    common, section = renamed(common, "top level"), renamed(section, stem)
    params = {k: v for k, v in common.items() if k in declared}
    warnings = []
    for k, v in section.items():
        if k in declared:
            params[k] = v
        else:
            warnings.append(f"parameter '{k}' of section '{stem}' is not declared by the notebook; ignored")
    return params, warnings


def params_template(sources: list[Path]) -> str:
    """A YAML parameters file listing every notebook's parameters, commented out, with defaults and help."""
    lines = ["# Parameters for `make report PARAMS=<this file>` (python -m eagle3lib.report -f <this file>).",
             "# Top-level keys apply to every notebook that declares them; a section named after a notebook",
             "# overrides them for that notebook. Uncomment and edit what you need; the values shown are the",
             "# defaults (the embedded demo world). On a GPU box: device and dtype at the top level, then the",
             "# artifact paths per notebook. Regenerate: python -m eagle3lib.report --params-template", ""]
    declared = {p.stem: declared_parameters(read_source(p), f"{p}, parameters cell") for p in sources}
    first: dict[str, str] = {}
    counts: dict[str, int] = {}
    for stem, names in declared.items():
        for name, (default, comment) in names.items():
            counts[name] = counts.get(name, 0) + 1
            first.setdefault(name, _template_line(name, default, comment))
    for name, what in WHAT.items():        # an input shared at the top level: what it is, not one notebook's use
        if counts.get(name, 0) > 1:
            first[name] = _template_line(name, '""', what)
    shared = [first[n] for n in sorted(n for n, c in counts.items() if c > 1)]
    if shared:
        lines += ["# Shared by several notebooks (top level):"] + shared + [""]
    for stem, names in declared.items():
        lines.append(f"{stem}:")
        lines += ["  " + _template_line(name, *spec) for name, spec in names.items()]
        lines.append("")
    return "\n".join(lines)


def _template_line(name: str, default: str, comment: str) -> str:
    try:  # a Python literal as JSON, which YAML reads as the same value
        default = json.dumps(ast.literal_eval(default))
    except (ValueError, SyntaxError, TypeError):
        comment = f"{comment} (default written in Python: {default})".strip()
        default = "..."
    return f"# {name}: {default}" + (f"  # {comment}" if comment else "")


RUNNER_KEYS = ("vllm_demo", "sglang_demo")   # parameters-file keys the runner reads itself (no notebook declares them)


def keys_text(problems) -> str:
    """Unknown keys in one line: "'traindata' (top level): did you mean 'train_data'?; ..."."""
    return "; ".join(f"'{p.param}' ({', '.join(p.notebooks)}): {p.expected}" for p in problems)


def unknown_keys(path, common: dict, sections: dict[str, dict], declared: dict[str, dict]) -> list[Problem]:
    """The keys of a parameters file no notebook takes: at the top level, a key no notebook declares (nor the
    runner, `RUNNER_KEYS`); in a notebook's section, a key that notebook does not declare. Each a `Problem` naming
    the key, its value and where, expecting the closest names it may have meant (difflib: "did you mean
    'train_data'?") or the notebook that takes it."""
    known = {k for names in declared.values() for k in names} | set(RUNNER_KEYS)
    where = [("top level", k, v, known) for k, v in common.items() if k not in known]
    where += [(f"section {stem}", k, v, set(declared.get(stem, {}))) for stem, sec in sections.items()
              for k, v in sec.items() if k not in declared.get(stem, {})]
    out = []
    for place, key, value, names in where:
        close = difflib.get_close_matches(key, sorted(names), n=3, cutoff=0.6)
        takes = "no notebook takes it" if place == "top level" else f"notebook {place[8:]} does not take it"
        others = sorted(s for s, names_ in declared.items() if key in names_ and place != "top level")
        hint = (f"did you mean {' or '.join(repr(c) for c in close)}?" if close else
                f"move it to {' or '.join(others)}, or to the top level" if others else
                "a key the notebooks take (python -m eagle3lib.report --params-template lists every one)")
        out.append(Problem(key, str(value)[:80], "ParameterError", f"unknown key '{key}' ({place} of {path}): "
                           f"{takes}", hint, "a key of the parameters file", notebooks=(place,)))
    return out


def prepare(common: dict) -> str | None:
    """What the parameters file asks to exist before the notebooks run: `vllm_demo: [names]` (of `demo_world`'s
    world) and `sglang_demo: [names]`, the shipped served demo deployments the notebooks read (`demo.shipped_served`; the
    vLLM ones only where the real vLLM runs, whose probes the notebooks ask). Returns why the run is skipped (no vLLM
    here, or a deployment missing or not current: re-serving it is the builder's, ``python -m eagle3demo``), else
    None."""
    from ..demo import shipped_served
    from ..errors import DataError
    from ..vllm_engine import env as vllm_env
    asked = [("sglang", n, None) for n in _names(common.pop("sglang_demo", None))]
    vllm = _names(common.pop("vllm_demo", None))
    if vllm:
        why = vllm_env.unavailable_reason()
        if why:
            return f"the vLLM demo needs the real vLLM: {why}"
    asked += [("vllm", n, common.get("demo_world") or None) for n in vllm]   # the mla world's for demo_world: mla
    for engine, name, world in asked:
        label = ENGINES[engine].title
        try:
            d = shipped_served.shipped(engine, name, world)
        except DataError as e:
            return f"the {label} demo deployment {name} is not served: {e}"
        print(f"{label} demo deployment {name}: " + (f"served, accept length {d['accept_length']:.2f}" if d["ok"] else
              f"not served ({(d['error'] or '')[:120]})") + f" -> {d['dir']}", flush=True)
    return None


def _names(names) -> list[str]:
    """A parameters-file list of names (one name alone, a list, or nothing)."""
    return [str(n) for n in ([names] if isinstance(names, str) else list(names or ()))]

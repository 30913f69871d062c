"""Report runner: each ``notebooks/NN_topic.py`` -> executed notebook + HTML in ``reports/``, then an index.

jupytext (percent .py -> notebook) -> papermill (parameters from a YAML file, kernel ``python3``, per-cell
timeout, cwd = the folder above notebooks/) -> nbconvert HTML. Files are staged then ``os.replace``d: a failed
run never overwrites the last good ``NN_topic.html``; it is written as ``NN_topic.failed.html`` beside it.
Usage: ``python -m eagle3lib.report [-f params.yaml] [--only 02,03] [--timeout S] [--out reports]``.
"""
from __future__ import annotations

import argparse
import base64
import contextlib
import dataclasses
import datetime as dt
import json
import os
import re
import secrets
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

from .. import __version__
from . import findings as findings_mod
from . import problems
from ..errors import Eagle3Error, MissingFileError, ReportError
from ..jsonfiles import atomic_write_all
from ..names import GIVE
from ..steps.given import given
from .export import evidence_anchors, external_loads, index_figure, sections, tex_cells, to_html
from .index import load_rows, write_index
from .params import (KERNEL, declared_parameters, load_params, params_for, params_template, prepare, read_source,
                     keys_text, unknown_keys)

DEFAULT_TIMEOUT_S = 1800.0  # per cell; demo cells take seconds, real targets on a GPU box minutes
NOTEBOOK_NAME = re.compile(r"^\d\d_\w+\.py$")
STATUSES = ("ok", "failed", "timeout")
# the kernel starts with matplotlib's inline support, as `%matplotlib inline` would: a cell whose value is a
# matplotlib Figure (the library's plots draw without pyplot) is shown as a PNG, not as "<Figure size ...>"
KERNEL_ARGS = ["--InteractiveShellApp.matplotlib=inline"]


@dataclasses.dataclass(frozen=True)
class NotebookResult:
    """One notebook's run: status is ok / failed / timeout; file names are relative to the output folder."""
    notebook: str
    source: str
    status: str
    seconds: float
    error: str | None
    findings: dict
    html: str | None  # this run's report (NN.html when ok, NN.failed.html otherwise)
    ipynb: str | None  # this run's executed notebook
    previous_html: str | None  # the last good NN.html, kept when this run failed
    warnings: tuple[str, ...]
    finished_at: str
    figure: str | None = None  # NN.figure.png (or .html: a table) of the cell tagged index-figure, beside `html`
    evidence: dict = dataclasses.field(default_factory=dict)  # {finding key: {"anchor", "section"}} in `html`
    problems: tuple = ()  # steps.given.Problem: a parameter that could not be read (not run), a stop or a failure
    not_given: tuple[str, ...] = ()  # the parameters a "no fault found" needs that were left empty
    run_id: str = ""  # the report run that made this row (`new_run_id`); the index combines one run's rows only


def new_run_id() -> str:
    """An id for one report run: when it started and four random hex digits (two runs in one second differ)."""
    return dt.datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def discover_notebooks(notebooks_dir: str | os.PathLike) -> list[Path]:
    """The ``NN_topic.py`` notebook sources of a folder, in name order."""
    folder = Path(notebooks_dir)
    if not folder.is_dir():
        raise MissingFileError(str(folder), "notebooks folder not found", expected="a folder of NN_topic.py files",
                               found="nothing", cause="run from the repository root or pass --notebooks")
    return sorted(p for p in folder.iterdir() if NOTEBOOK_NAME.match(p.name))


def select_notebooks(sources: list[Path], only: str | None) -> list[Path]:
    """Sources picked by ``--only`` ("02,03" or full stems); all when `only` is empty."""
    if not only:
        return list(sources)
    picked = []
    for want in (w.strip() for w in only.split(",") if w.strip()):
        hits = [p for p in sources if p.stem == want or p.stem.startswith(want + "_")]
        if not hits:
            raise ReportError("--only", f"no notebook matches '{want}'",
                              expected=[p.stem for p in sources], found=want)
        picked += [p for p in hits if p not in picked]
    return sorted(picked)


def ensure_kernel(name: str = KERNEL) -> None:
    """Make kernel `name` run this interpreter; install its spec into ``sys.prefix`` when it is missing."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    here = {"python", f"python{sys.version_info[0]}", "python{}.{}".format(*sys.version_info[:2]),
            os.path.abspath(sys.executable)}

    def spec_argv0():
        try:
            return KernelSpecManager().get_kernel_spec(name).argv[0]
        except (NoSuchKernel, IndexError):
            return None

    if spec_argv0() in here:
        return
    from ipykernel.kernelspec import install

    install(kernel_name=name, prefix=sys.prefix)
    found = spec_argv0()
    if found not in here:
        raise ReportError(f"Jupyter kernel '{name}'", "the kernel runs another Python", expected=sys.executable,
                          found=found, cause="a user-level kernel spec shadows this environment's; remove it "
                          "(jupyter kernelspec list) or set JUPYTER_PREFER_ENV_PATH=1")


def _kernel_config(socket_dir: str):
    """Kernel manager config: on Linux, IPC sockets in a private temp folder (no localhost TCP ports)."""
    from traitlets.config import Config

    config = Config()
    if sys.platform.startswith("linux") and len(socket_dir) < 90:  # AF_UNIX paths must stay under 108 bytes
        config.KernelManager.transport = "ipc"
        config.KernelManager.ip = os.path.join(socket_dir, "kernel")  # sockets kernel-1 .. kernel-5
    return config


@contextlib.contextmanager
def environment(values: dict[str, str]):
    """Set environment variables for the duration of a block (the kernel inherits them), then restore them."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _execute(nb, tmp_nb: Path, params: dict, timeout: float | None, cwd: Path, findings_path: Path):
    """Run papermill; returns (status, error summary or None). The partial notebook is left in `tmp_nb`."""
    import papermill
    from nbclient.exceptions import CellTimeoutError, DeadKernelError
    from papermill.exceptions import PapermillExecutionError

    # a plain text per-cell bar in a terminal only; logs and tests get the runner's one line per notebook
    bar = {"desc": "    cells", "unit": "cell", "leave": False} if sys.stderr.isatty() else False
    env = {findings_mod.ENV_VAR: str(findings_path), "MPLBACKEND": "module://matplotlib_inline.backend_inline"}
    socket_dir = tempfile.mkdtemp(prefix="eagle3lib-kernel-")  # mode 0700: only this user can connect
    try:
        with environment(env):
            papermill.execute_notebook(nb, str(tmp_nb), parameters=params, kernel_name=KERNEL, language="python",
                                       progress_bar=bar, log_output=False, cwd=str(cwd), start_timeout=180,
                                       execution_timeout=timeout, request_save_on_cell_execute=True,
                                       config=_kernel_config(socket_dir), extra_arguments=KERNEL_ARGS)
    except PapermillExecutionError as e:
        return "failed", f"{e.ename}: {e.evalue} (In [{e.exec_count}])"
    except CellTimeoutError as e:
        preview = str(e).split("contents:", 1)[-1].strip("-\n ").splitlines()
        first = next((ln.strip() for ln in preview if ln.strip() and not ln.startswith("---")), "?")
        return "timeout", f"a cell ran past the per-cell timeout of {timeout:g} s (cell starting: {first[:120]})"
    except DeadKernelError as e:
        return "failed", f"the kernel died: {e}".splitlines()[0]
    except Exception as e:  # kernel start, parameter injection, ...: a row in the index, not a crash
        return "failed", f"{type(e).__name__}: {e}".strip().splitlines()[0]
    finally:
        shutil.rmtree(socket_dir, ignore_errors=True)
    return "ok", None


def run_notebook(source: Path, out_dir: Path, params: dict | None = None, timeout: float | None = DEFAULT_TIMEOUT_S,
                 cwd: Path | None = None, warnings: tuple[str, ...] = ()) -> NotebookResult:
    """Execute one notebook source and publish its executed notebook, HTML and findings into `out_dir`."""
    import nbformat

    stem, out_dir = source.stem, Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cwd = Path(cwd) if cwd is not None else source.resolve().parent.parent
    fd, tmp_name = tempfile.mkstemp(dir=out_dir, prefix=f".{stem}.running.", suffix=".ipynb")
    os.close(fd)
    tmp_nb, tmp_findings = Path(tmp_name), Path(tmp_name[: -len(".ipynb")] + ".findings.json")
    warnings, executed, found, wrote, extras = list(warnings), None, {}, False, (None, {})
    t0 = time.monotonic()
    try:
        try:
            nb = read_source(source)
            status, error = _execute(nb, tmp_nb, params or {}, timeout, cwd, tmp_findings)
        except Eagle3Error as e:
            status, error = "failed", str(e)
        seconds = time.monotonic() - t0
        try:
            executed = nbformat.read(tmp_nb, as_version=4) if tmp_nb.stat().st_size else None
        except Exception as e:  # a notebook papermill could not finish writing
            warnings.append(f"partial notebook unreadable: {type(e).__name__}: {e}")
        if tmp_findings.exists():
            try:
                found = findings_mod.read_findings(tmp_findings)
            except Eagle3Error as e:
                warnings.append(str(e))
        try:
            extras = _publish(out_dir, stem, executed, found, status, error, warnings)
            wrote = True
        except Exception as e:  # disk full, read-only folder, an export that breaks: this row fails, not the run
            status, error = "failed", f"could not write the report files: {type(e).__name__}: {e}" + (
                f" (after: {error})" if error else "")
    finally:
        for p in (tmp_nb, tmp_findings):
            p.unlink(missing_ok=True)
    base = stem if status == "ok" else f"{stem}.failed"
    good = out_dir / f"{stem}.html"
    return NotebookResult(
        notebook=stem, source=str(source), status=status, seconds=round(seconds, 2), error=error, findings=found,
        html=f"{base}.html" if wrote else None, ipynb=f"{base}.ipynb" if wrote else None,
        previous_html=good.name if status != "ok" and good.exists() else None,
        warnings=tuple(warnings), finished_at=dt.datetime.now().isoformat(timespec="seconds"),
        figure=extras[0], evidence=extras[1])


def _publish(out_dir: Path, stem: str, executed, found: dict, status: str, error: str | None,
             warnings: list[str]) -> tuple[str | None, dict]:
    """Stage then replace NN[.failed].{findings.json,ipynb,figure.png|html,html}; returns (figure file or None,
    evidence anchors). Raises OSError when a write fails; appends to `warnings` what a reader would miss."""
    import nbformat

    ok = status == "ok"
    base = stem if ok else f"{stem}.failed"
    if executed is None:  # nothing ran (unreadable source, kernel did not start): an HTML page with the error
        executed = nbformat.v4.new_notebook()
    banner = None if ok else (f"**This run {'timed out' if status == 'timeout' else 'failed'}.** The last good "
                              f"report, if any, is kept as `{stem}.html`.\n\n```text\n{error}\n```")
    page = to_html(executed, stem, banner)
    text = page.decode("utf-8")
    outside = external_loads(text)
    if outside:
        warnings.append(f"{base}.html loads {len(outside)} address(es) from outside (first: {outside[0]}); it "
                        "will not open complete offline")
    tex = tex_cells(executed)
    if tex:
        warnings.append(f"markdown cells {tex} hold TeX math: {base}.html shows it as source (no MathJax offline)")
    try:
        figure = index_figure(executed, f"{stem}, cells")
    except Eagle3Error as e:
        warnings.append(str(e))
        figure = None
    heads = sections(executed, text)  # the banner cell is not in `executed`: sections() skips it
    anchors = evidence_anchors(found, heads, figure.cell if figure else None)
    titles = {h.anchor: h.title for h in heads}
    evidence = {k: {"anchor": a, "section": titles.get(a, "")} for k, a in anchors.items()}
    files = {out_dir / f"{base}.findings.json": json.dumps(found, indent=2) + "\n",
             out_dir / f"{base}.ipynb": nbformat.writes(executed)}
    fig_name = f"{base}{figure.suffix}" if figure else None
    if figure:
        files[out_dir / fig_name] = base64.b64decode(figure.data) if figure.kind == "png" else figure.data
    files[out_dir / f"{base}.html"] = page  # html last: replaced only if all else was
    atomic_write_all(files)
    stale = [f"{base}.figure.{k}" for k in ("png", "html") if f"{base}.figure.{k}" != fig_name]
    if ok:  # a good run retires the failure files of earlier runs
        stale += [f"{stem}{suffix}" for suffix in (".failed.html", ".failed.ipynb", ".failed.findings.json",
                                                  ".failed.figure.png", ".failed.figure.html")]
    for name in stale:  # and a figure this run no longer shows
        (out_dir / name).unlink(missing_ok=True)
    return fig_name, evidence


def given_inputs(common: dict, sections: dict[str, dict]) -> dict[str, str]:
    """The inputs a parameters file gives (top level, then sections), by their names in `names.GIVE` (the draft
    too): {name: the value given}; the index writes paths relative to their folder and asks for no input given."""
    name_of = {key: n for n, (_, key, _) in GIVE.items()} | {n: n for n in GIVE} | {"draft": "draft"}
    out: dict[str, str] = {}
    for values in [common, *sections.values()]:
        for k, v in values.items():
            if k in name_of and isinstance(v, str) and given(v):
                out.setdefault(name_of[k], v.strip())
    return out


def _declared(src: Path) -> dict:
    """A notebook's declared parameters; {} when its source cannot be read (run_notebook reports that failure)."""
    try:
        return declared_parameters(read_source(src), f"{src}, parameters cell")
    except Eagle3Error:
        return {}


def run_all(sources: list[Path], out_dir: Path, params_file: str | None = None, timeout: float | None =
            DEFAULT_TIMEOUT_S, cwd: Path | None = None, all_stems: list[str] | None = None) -> list[NotebookResult]:
    """Run `sources` in order (one failure does not stop the others) and write the index; returns the results."""
    out_dir = Path(out_dir)
    stems = all_stems or [p.stem for p in sources]
    with warnings.catch_warnings(record=True) as renamed:     # an input's old name: one plain line each
        warnings.simplefilter("always", FutureWarning)
        common, sections = load_params(params_file, stems)
    for w in renamed:
        if issubclass(w.category, FutureWarning):
            print(f"warning: {w.message}", flush=True)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    run_id = new_run_id()
    print(f"report run {run_id} -> {out_dir}", flush=True)
    every = {p.stem: _declared(p) for p in discover_notebooks(sources[0].parent)} if sources else {}
    unknown = unknown_keys(params_file, common, sections, every)
    if unknown:   # a typo is no input of anyone's: the run stops, the index says which key and what was meant
        write_index(out_dir, load_rows(out_dir, keep=set(stems)), {"run_id": run_id, "params_file": params_file,
                                                                    "stopped": "unknown keys"}, problems=unknown)
        raise ReportError(str(params_file), f"unknown keys: {keys_text(unknown)}", expected="the keys the "
                          "notebooks take (python -m eagle3lib.report --params-template)", found=", ".join(
                              p.param for p in unknown), cause="a typo, or a key of another notebook's section")
    skip = prepare(common)
    if skip:
        print(f"skipped: {skip}", flush=True)
        now = time.strftime("%Y-%m-%d %H:%M:%S")
        results = [NotebookResult(s.stem, str(s), "skipped", 0.0, skip, {}, None, None, None, (), now, run_id=run_id)
                   for s in sources]
        write_index(out_dir, [dataclasses.asdict(r) for r in results], {"run_id": run_id, "params_file": params_file,
                                                                          "skipped": skip})
        return results
    ensure_kernel()
    results, declared_any = [], set()
    for i, src in enumerate(sources, 1):
        print(f"[{i}/{len(sources)}] {src.stem}: running", flush=True)
        declared = every.get(src.stem) or _declared(src)
        declared_any |= set(declared)
        params, warns = params_for(src.stem, declared, common, sections.get(src.stem, {}))
        bad = problems.refused(src.stem, params, cwd or src.resolve().parent.parent)
        missing = problems.needs_missing(src.stem, params)
        now = dt.datetime.now().isoformat(timespec="seconds")
        if bad:   # a given parameter that cannot be read: the notebook is not run on it
            r = NotebookResult(src.stem, str(src), "skipped", 0.0, "not run: a given parameter could not be read: "
                               + "; ".join(map(str, bad)), {}, None, None, None, tuple(warns), now, problems=bad)
        elif missing:   # a user's draft without what the notebook needs: not given, never the demo's
            why = f"not run: not given: {', '.join(missing)}"
            found = {"headline": why, findings_mod.FINDINGS_KEY: [f.to_dict() for f in problems.not_run_findings(
                src.stem)]}
            r = NotebookResult(src.stem, str(src), "skipped", 0.0, why, found, None, None, None, tuple(warns), now)
        else:
            r = run_notebook(src, out_dir, params, timeout, cwd, tuple(warns))
            r = dataclasses.replace(r, problems=problems.of_failure(src.stem, r.status, r.error, params))
        r = dataclasses.replace(r, run_id=run_id, not_given=tuple(dict.fromkeys(problems.not_given(
            src.stem, declared, params) + tuple(f"{k} ({src.stem})" for k in missing))))
        results.append(r)
        where = r.html or "no report written"
        print(f"[{i}/{len(sources)}] {src.stem}: {r.status} in {r.seconds:.1f} s -> {out_dir / where}", flush=True)
        for line in ([r.error] if r.error else []) + list(r.warnings):
            print(f"    {line}", flush=True)
    for k in sorted(set(common) - declared_any):
        print(f"warning: parameter '{k}' in {params_file} is declared by no notebook that ran", flush=True)
    rows = load_rows(out_dir, keep=set(stems) - {r.notebook for r in results})
    rows += [dataclasses.asdict(r) for r in results]
    meta = {"run_id": run_id, "params_file": params_file, "timeout_s": timeout, "python": sys.version.split()[0],
            "eagle3lib": __version__, "inputs": given_inputs(common, sections),
            "cwd": str((cwd or sources[0].resolve().parent.parent).resolve()) if sources else None}
    try:
        write_index(out_dir, sorted(rows, key=lambda r: r["notebook"]), meta)
    except OSError as e:
        raise ReportError(str(out_dir / "index.html"), "could not write the index", found=str(e),
                          cause="disk full or a read-only output folder; the notebook reports above were kept") from e
    return results


def main(argv: list[str] | None = None) -> int:
    """Command line entry point: 0 when every notebook ran ok on parameters that all read, 1 when one broke or timed
    out (the workbook failed), 2 when the run itself could not start, 3 when a given parameter could not be read
    (its notebooks not run) or a notebook stopped on an input it could not read."""
    ap = argparse.ArgumentParser(prog="python -m eagle3lib.report", description=__doc__.splitlines()[0])
    ap.add_argument("-f", "--params", help="YAML parameters file (top-level keys + per-notebook sections)")
    ap.add_argument("--only", help="comma-separated notebook numbers or names, e.g. 02,03")
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="per-cell timeout in s (0: none)")
    ap.add_argument("--out", default="reports", help="output folder (default: reports): the notebooks' pages and "
                    "index.html; notebooks not run this time keep their earlier rows there, listed as stale and "
                    "never combined into this run's diagnosis")
    ap.add_argument("--notebooks", default="notebooks", help="folder of NN_topic.py sources (default: notebooks)")
    ap.add_argument("--cwd", help="working directory of the notebooks (default: the folder above --notebooks)")
    ap.add_argument("--params-template", action="store_true", help="print a parameters YAML template and exit")
    args = ap.parse_args(argv)
    try:
        sources = discover_notebooks(args.notebooks)
        if args.params_template:
            print(params_template(sources))
            return 0
        picked = select_notebooks(sources, args.only)
        if not picked:
            raise ReportError(args.notebooks, "no notebooks to run", expected="NN_topic.py files", found="none")
        t0 = time.monotonic()
        results = run_all(picked, Path(args.out), args.params, args.timeout or None,
                          Path(args.cwd) if args.cwd else None, [p.stem for p in sources])
    except Eagle3Error as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    bad = [r.notebook for r in results if r.status != "ok" and (r.status != "skipped" or r.problems)]
    idle = [f"{r.notebook} ({r.error})" for r in results if r.status == "skipped" and not r.problems]
    unread = problems.merged(p for r in results for p in r.problems if not p.failure)
    print(f"{len(results) - len(bad) - len(idle)}/{len(results)} notebooks ok in {time.monotonic() - t0:.0f} s; "
          f"index: {Path(args.out) / 'index.html'}" + (f"; not ok: {', '.join(bad)}" if bad else "")
          + (f"; {', '.join(idle)}" if idle else ""), flush=True)
    for p in unread:
        print(f"unreadable input: {p}", flush=True)
    return problems.exit_code(results)


"""Shipped demo files hold no path of the machine that wrote them.

A deployment served by the real vLLM leaves logs, metrics and records full of the paths it was given and of its
own install (tracebacks): the repository root of the serving checkout, and $HOME. On another checkout those point
nowhere and leak the machine. `portable_text` rewrites them the one way that stays true everywhere: a path inside
the repository becomes repository-relative (``data/demo/target``, what the same command prints when launched from
the repository root, as the notebooks and the CLI run), a path under $HOME becomes ``~/...``, a Python
installation's prefix (a venv, pyenv) ``<python>/`` (``<python>/lib/python3.11/site-packages/vllm/...``: what a
traceback reader needs stays), a scratch folder ``<tmp>``. `make_portable`
applies it to every text file of a folder the repository ships; `machine_paths` finds what is left (the test over
every tracked file uses it).

Records whose paths a reader opens (``deployment.json``) are written relative to their own folder instead
(`relative_record`: `vllm_world`, `sglang_world`; read back by the library's `eagle3lib.demo.shipped_served.rebased_record`),
so a copied data folder still reads; `eagle3lib.demo.shipped_served.folder_stamp` says whether a served deployment is still
the draft it was served with.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from eagle3lib.demo.world import REPO_ROOT

BINARY_SUFFIXES = {".safetensors", ".pt", ".pth", ".bin", ".npy", ".npz", ".png", ".jpg", ".gz", ".zip", ".whl",
                   ".arrow", ".parquet"}
# an absolute path reaching into a checkout (its data folders or its venvs), whatever that checkout's root was
CHECKOUT_PATH = re.compile(r"(?<![\w.~])(?:/[\w.+@-]+)+/(?:data/demo[\w/.-]*|\.venv[\w-]*/[\w/.-]*)")
# a Python installation's own files, wherever it lives (a venv, pyenv): the part from lib/pythonX.Y/ on is what
# a traceback reader needs (engines.engine_errors keeps what follows site-packages/)
PYTHON_PREFIX = re.compile(r"(?<![\w.<])(?:~|/[\w.+@-]+)(?:/[\w.+@-]+)*?/(?=(?:lib/python\d+\.\d+|bin/python)\b)")
# a scratch folder of the machine that wrote the file
TMP_DIR = re.compile(r"(?<![\w.<])/tmp/[\w.+@-]+(?=/)")


def _roots(root: Path | str | None, home: Path | str | None) -> tuple[str, str | None]:
    r = str(Path(root or REPO_ROOT).resolve())
    h = str(Path(home) if home is not None else Path.home()).rstrip("/")
    return r, (h or None)            # a $HOME of "/" is no machine path


def portable_text(text: str, root: Path | str | None = None, home: Path | str | None = None) -> str:
    """`text` with the repository root (`root`, default this checkout's) made relative and $HOME (`home`) made
    ``~``. The root goes first: a checkout under $HOME stays repository-relative."""
    r, h = _roots(root, home)
    text = text.replace(r + "/", "").replace(r, ".")
    if h:
        text = re.sub(re.escape(h) + r"(?=/|\b)", "~", text)
    text = PYTHON_PREFIX.sub("<python>/", text)
    return TMP_DIR.sub("<tmp>", text)


def machine_paths(text: str, root: Path | str | None = None, home: Path | str | None = None,
                  engine_output: bool = False) -> list[str]:
    """The machine paths left in `text`: this checkout's root, $HOME, and any absolute path into a checkout's
    data or venv folders (another machine's root); in `engine_output` (what an engine wrote: logs, records) also a
    Python installation's prefix and a scratch folder. Each as found, in order, without repeats."""
    r, h = _roots(root, home)
    found: list[str] = []
    for m in re.finditer(re.escape(r) + r"[^\s'\"]*", text):
        found.append(m.group(0))
    if h:
        for m in re.finditer(re.escape(h) + r"/[^\s'\"]*", text):
            found.append(m.group(0))
    found += [m.group(0) for m in CHECKOUT_PATH.finditer(text)]
    if engine_output:
        found += [m.group(0) for m in PYTHON_PREFIX.finditer(text)] + [m.group(0) for m in TMP_DIR.finditer(text)]
    return list(dict.fromkeys(found))


def is_text(path: Path) -> bool:
    """A file to check or rewrite: not a known binary kind, and no NUL byte in its first 8 KiB."""
    if path.suffix.lower() in BINARY_SUFFIXES:
        return False
    with open(path, "rb") as f:
        return b"\0" not in f.read(8192)


def make_portable(folder: Path | str, root: Path | str | None = None, home: Path | str | None = None) -> list[Path]:
    """Every text file under `folder` rewritten by `portable_text`, in place; the files that changed."""
    changed = []
    for p in sorted(Path(folder).rglob("*")):
        if p.is_file() and not p.is_symlink() and is_text(p):
            old = p.read_text(errors="surrogateescape")
            new = portable_text(old, root, home)
            if new != old:
                p.write_text(new, errors="surrogateescape")
                changed.append(p)
    return changed


def relative_record(rec: dict, out: Path, fields) -> dict:
    """A deployment record's file paths (its `fields`) written relative to its own folder `out` (no machine path is
    shipped)."""
    return {k: (os.path.relpath(v, out) if k in fields and isinstance(v, str) else v) for k, v in rec.items()}

"""Notebook 04's inputs: the served runs read from the files and server given, and the demo engine's own sweep."""
from __future__ import annotations

from pathlib import Path

from ..demo import sweep as demo_sweep_mod
from ..demo.world import REPO_ROOT
from ..throughput import benchparse
from ..throughput.logparse import ParseResult
from ..throughput.records import RunRecord


def resolve_path(p) -> Path:
    """A path as given when absolute or present from the working directory, else relative to the repository."""
    p = Path(p)
    return p if p.is_absolute() or p.exists() else REPO_ROOT / p


def read_runs(paths, server_url: str = "") -> list[ParseResult]:
    """One parse result per file (logs, /server_info dumps, bench JSON, RunRecord .jsonl), plus a live server."""
    out = [benchparse.parse_file(resolve_path(p)) for p in paths]
    return out + ([benchparse.read_server(server_url)] if server_url else [])


def demo_sweep(num_steps, repeats: int = 3, device: str = "cpu", progress=True) -> list[RunRecord]:
    """The demo engine over `num_steps` with the correct and the seed's capture, plus a baseline run."""
    return demo_sweep_mod.run_demo_sweep(list(num_steps), captures=("correct", "seed"), repeats=repeats,
                                         device=device, progress=progress)

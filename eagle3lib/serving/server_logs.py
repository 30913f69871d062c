"""A server's startup log, read by its engine's home, and what each engine's logged accept metrics mean.

    log = read_startup_log("server.log", "vllm"); log.version, log.runner, log.summary()
"""
from __future__ import annotations

import pandas as pd

from .homes import homes


def read_startup_log(source, engine: str | None = None, *, num_target_layers: int | None = None):
    """What a server's startup log (path, text or lines) says, read by the home of `engine` (`EngineHome.startup_log`);
    None where that home reads no startup log. No engine named: every home reads it and the reading with the most
    lines only its engine writes (`own_lines`) is the answer (the first home's on a tie). Each home reads a file once
    per case; an empty or missing log is the readers' error (`LogParseError`, `MissingFileError`)."""
    readers = {name: h.startup_log for name, h in homes().items() if h.startup_log is not None}
    if engine is not None:
        read = readers.get(engine)
        return read(source, num_target_layers=num_target_layers) if read is not None else None
    readings = [read(source, num_target_layers=num_target_layers) for read in readers.values()]
    return max(readings, key=lambda r: r.own_lines) if readings else None


def accept_rate_definitions() -> pd.DataFrame:
    """What each engine's 'accept length' / 'accept rate' means, by version (each home's `accept_metrics`)."""
    rows = [(name, *row) for name, h in homes().items() for row in h.accept_metrics]
    return pd.DataFrame(rows, columns=["engine", "metric", "formula", "versions", "note"])

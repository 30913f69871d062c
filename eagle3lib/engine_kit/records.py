"""One measured serving run as data: ``RunRecord``, JSON-lines I/O and a DataFrame view.

Settings are the *effective* ones. ``num_steps`` = draft steps per round (SGLang ``speculative_num_steps``, vLLM
``num_speculative_tokens``), 0 = no speculation (baseline). ``accept_length`` = tau, tokens per request per verify
round with the bonus token (SGLang ``accept len``). Usage: ``write_jsonl(recs, p); to_dataframe(read_jsonl(p))``.
"""
from __future__ import annotations

import dataclasses
import json
import math
import operator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..errors import DataError, MissingFileError
from ..jsonfiles import atomic_write, json_lines, to_json_value

TOK_S_SCOPES = ("aggregate", "per_request")
ROUNDING_SLACK = 0.006  # engines print tau with 2 decimals


@dataclass(frozen=True)
class RunRecord:
    """One measured run (or one log segment): engine, effective settings, accept length, tok/s, provenance."""

    engine: str                                   # "sglang", "vllm", "demo", ...
    tok_s: float | None = None                    # generated tokens per second (see tok_s_scope)
    accept_length: float | None = None            # tau, bonus token included; None for a baseline or unknown
    num_steps: int | None = None                  # draft steps per round (chain K); 0 = no speculation
    topk: int | None = None                       # SGLang speculative_eagle_topk (1 = chain)
    num_draft_tokens: int | None = None           # verify width per request incl. the root (SGLang NDT; vLLM K+1)
    batch_size: int | None = None                 # running requests / client concurrency
    per_position: tuple[float, ...] | None = None  # unconditional P(drafts 1..i+1 all accepted), i = 0..K-1
    drafted: int | None = None                    # raw counter: draft tokens proposed
    accepted: int | None = None                   # raw counter: draft tokens accepted (bonus excluded)
    rounds: int | None = None                     # raw counter: verify rounds summed over requests (vLLM num_drafts)
    accept_rate: float | None = None              # the engine's own printed "accept rate", as printed
    accept_rate_definition: str = ""              # which formula that rate used, e.g. "tau/num_draft_tokens"
    tok_s_scope: str = "aggregate"                # "aggregate" (whole batch) or "per_request"
    engine_version: str = ""
    hardware: str = ""                            # e.g. "8x RTX PRO 6000 Blackwell, TP8" or "cpu"
    series: str = ""                              # which curve the run belongs to, e.g. "correct capture"
    label: str = ""                               # short name for charts
    source: str = ""                              # file:line, URL or document the numbers come from
    time: str = ""                                # when measured (log timestamp), free text
    repeats: int | None = None                    # timed repeats behind tok_s (median), when known
    notes: str = ""

    def __post_init__(self):
        where = f"RunRecord {self.label or self.source or self.engine!r}"
        if not isinstance(self.engine, str) or not self.engine:
            raise DataError(where, "engine must be a non-empty string", expected="'sglang', 'vllm', 'demo', ...",
                            found=repr(self.engine))
        if self.tok_s_scope not in TOK_S_SCOPES:
            raise DataError(where, "unknown tok_s_scope", expected=TOK_S_SCOPES, found=self.tok_s_scope)
        for name in ("tok_s", "accept_length", "accept_rate"):
            v = getattr(self, name)
            if v is None:
                continue
            try:
                v = float(v)
            except (TypeError, ValueError):
                raise DataError(where, f"{name} must be a number or None", expected="a float",
                                found=repr(v)) from None
            if v < 0:
                raise DataError(where, f"{name} must be >= 0", expected="a float >= 0", found=v)
            object.__setattr__(self, name, v if math.isfinite(v) else None)  # NaN/inf -> unknown
        for name in _INT_FIELDS:
            v = getattr(self, name)
            if v is None:
                continue
            if isinstance(v, bool):
                raise DataError(where, f"{name} must be an int or None", expected="an int", found=repr(v))
            try:
                v = operator.index(v)  # accepts numpy ints, refuses floats
            except TypeError:
                raise DataError(where, f"{name} must be an int or None", expected="an int", found=repr(v)) from None
            if v < 0:
                raise DataError(where, f"{name} must be an int >= 0", expected="an int >= 0", found=repr(v))
            object.__setattr__(self, name, int(v))
        if self.per_position is not None:
            pos = tuple(float(x) for x in self.per_position)
            if not all(0.0 <= x <= 1.0 for x in pos):  # also refuses NaN
                raise DataError(where, "per-position acceptance must lie in [0, 1]", expected="probabilities",
                                found=pos, cause="counts instead of rates, or percentages")
            object.__setattr__(self, "per_position", pos)
        tau = self.accept_length
        if tau is not None and tau < 1 - ROUNDING_SLACK:
            raise DataError(where, "accept length below 1", expected="tau >= 1 (bonus token included)",
                            found=tau, cause="a metric that excludes the bonus token (vLLM 'Mean acceptance "
                            "length' between 2025-04-24 and 2025-05-09): add 1")
        if tau is not None and self.num_steps and tau > self.num_steps + 1 + ROUNDING_SLACK:
            raise DataError(where, "accept length above num_steps + 1", expected=f"tau <= {self.num_steps + 1}",
                            found=tau, cause="the settings recorded are the requested ones, not the effective "
                            "ones (SGLang rewrites num_draft_tokens when topk == 1)")

    @property
    def is_baseline(self) -> bool:
        """True for a run without speculation (num_steps == 0)."""
        return self.num_steps == 0

    @property
    def draft_rate(self) -> float | None:
        """(tau - 1) / K: accepted drafts per drafted token of a chain (vLLM's accepted/drafted)."""
        if self.accept_length is None or not self.num_steps:
            return None
        return (self.accept_length - 1) / self.num_steps


FIELDS = tuple(f.name for f in dataclasses.fields(RunRecord))
_INT_FIELDS = ("num_steps", "topk", "num_draft_tokens", "batch_size", "drafted", "accepted", "rounds", "repeats")


def to_dict(rec: RunRecord) -> dict:
    """A record as plain JSON data (tuples -> lists, NaN/inf -> None)."""
    return to_json_value(dataclasses.asdict(rec), where=f"RunRecord {rec.label!r}")


def from_dict(d: dict, where: str = "record") -> RunRecord:
    """A record from a dict written by ``to_dict`` (unknown keys are refused, missing ones take defaults)."""
    if not isinstance(d, dict):
        raise DataError(where, "a run record must be a JSON object", expected="{...}", found=type(d).__name__)
    unknown = sorted(set(d) - set(FIELDS))
    if unknown:
        raise DataError(where, "unknown run-record fields", expected=f"a subset of {list(FIELDS)}", found=unknown,
                        cause="a file written by another tool or a newer eagle3lib")
    if "engine" not in d:
        raise DataError(where, "missing field 'engine'", expected="'engine': 'sglang' | 'vllm' | 'demo' | ...",
                        found=sorted(d))
    try:
        return RunRecord(**d)
    except TypeError as e:
        raise DataError(where, "fields of the wrong type", expected="RunRecord fields", found=str(e)) from None


def write_jsonl(records, path: str | Path, append: bool = False) -> Path:
    """Write records as JSON lines (one object per line, NaN/inf as null); returns the path."""
    path = Path(path)
    lines = [json.dumps(to_dict(r), allow_nan=False) for r in records]
    if append and path.exists():
        old = path.read_text(encoding="utf-8")
        lines = ([old.rstrip("\n")] if old.strip() else []) + lines
    atomic_write(path, "\n".join(lines) + ("\n" if lines else ""))
    return path


def read_jsonl(path: str | Path) -> list[RunRecord]:
    """Records from a JSON-lines file written by ``write_jsonl`` (blank lines skipped)."""
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(str(path), "run-record file not found", expected="a .jsonl file", found="nothing")
    return [from_dict(d, where=f"{path}:{i}") for i, d in json_lines(path)]


def to_dataframe(records) -> pd.DataFrame:
    """One row per record, one column per field, plus ``speculative`` and ``draft_rate``."""
    rows = []
    for r in records:
        row = dataclasses.asdict(r)
        row["speculative"] = None if r.num_steps is None else not r.is_baseline
        row["draft_rate"] = r.draft_rate
        rows.append(row)
    df = pd.DataFrame(rows, columns=list(FIELDS) + ["speculative", "draft_rate"])
    return df.astype({name: "Int64" for name in _INT_FIELDS})  # nullable ints: None stays <NA>, not NaN


def unit_problems(records) -> list[str]:
    """Plain-words warnings when records mix tok/s scopes or engines' units and should not share one axis."""
    records = list(records)
    out = []
    scopes = sorted({r.tok_s_scope for r in records if r.tok_s is not None})
    if len(scopes) > 1:
        per_req = [r.label or r.source for r in records if r.tok_s_scope == "per_request"]
        out.append(f"tok/s mixes scopes {scopes}: per-request speeds ({', '.join(per_req[:3])}) are not "
                   "comparable with aggregate throughput unless batch size is 1")
    batched = [r for r in records if r.tok_s_scope == "aggregate" and (r.batch_size or 1) > 1]
    single = [r for r in records if r.tok_s_scope == "aggregate" and r.batch_size == 1]
    if batched and single:
        out.append("aggregate tok/s at different batch sizes "
                   f"({sorted({r.batch_size for r in batched + single})}): compare speedups within one batch size")
    return out

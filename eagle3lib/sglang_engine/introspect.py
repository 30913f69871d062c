"""Ask an installed SGLang how it resolves a launch command, and set its answer beside the rule table's.

Builds ``ServerArgs`` from the same argv (``add_cli_args`` + ``from_cli_args``), then runs ``resolve_once()`` where
that version has it (0.5.2x: a msgspec record whose resolution is a separate pipeline). Newer SGLang records each
decision in ``server_args._resolved_overrides`` (source, {field: value}); older ones mutate fields in
``__post_init__``, so we diff before/after. Optional: nothing here runs unless ``sglang`` is importable.
    intro = introspect(parse_launch(cmd), path_map={"data/demo/target": "/local/target"}); against_rules(intro, res)
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import importlib.util
import io
import logging
import os
from dataclasses import dataclass, field
from unittest import mock
from typing import Any, Mapping

import pandas as pd

from ..errors import ServingArgsError
from ..engine_kit.launch_reading import LaunchArgs
from .resolver import Resolution
from .rule import KNOBS
from .rules_table import RULES

_RULE_FIELDS = frozenset({f for r in RULES for f in r.fields} | {"page_size", "device", "speculative_algorithm"})
_OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}   # never let SGLang reach the hub from here


def sglang_available() -> bool:
    """Whether an ``sglang`` package can be imported here."""
    try:
        return importlib.util.find_spec("sglang") is not None
    except (ImportError, ValueError):
        return False


def installed_version() -> str | None:
    """The importable SGLang's version (None when absent or unreadable)."""
    if not sglang_available():
        return None
    try:
        mod = importlib.import_module("sglang")
        v = getattr(mod, "__version__", None)
        if v is None:
            from importlib.metadata import version
            v = version("sglang")
        return str(v)
    except Exception:   # noqa: BLE001 - a broken install is "unreadable", not a crash of the notebook
        return None


@dataclass(frozen=True)
class Introspection:
    """What the installed SGLang decided for a launch command."""

    version: str | None
    style: str                                  # "declarations" (records decisions) or "post_init diff"
    requested: dict                             # ServerArgs fields as argparse produced them
    effective: dict                             # fields after SGLang's resolution
    decisions: tuple[tuple[str, str, Any, Any], ...]   # (source, field, before, after)
    log: tuple[str, ...]                        # what SGLang logged while resolving
    error: str | None = None                    # SGLang refused the settings (its exception), or could not run
    path_map: dict = field(default_factory=dict)   # launch path -> local folder SGLang was pointed at

    def frame(self) -> pd.DataFrame:
        """The decisions as a table (source, field, before, after)."""
        return pd.DataFrame(list(self.decisions), columns=["source", "field", "before", "after"])


class _ListHandler(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record):
        try:
            self.lines.append(f"{record.levelname}: {record.getMessage()}")
        except Exception:   # noqa: BLE001 - a bad log record must not break introspection
            self.lines.append(f"{record.levelname}: {record.msg!r}")


def _argv(launch: LaunchArgs, path_map: Mapping[str, str] | None) -> list[str]:
    out = []
    for tok in launch.argv:
        name, eq, value = tok.partition("=")
        if path_map and eq and value in path_map:
            tok = f"{name}={path_map[value]}"
        elif path_map and tok in path_map:
            tok = path_map[tok]
        out.append(str(tok))
    return out


def installed_resolution(launch: LaunchArgs, path_map: Mapping[str, str] | None = None) -> Introspection | None:
    """`introspect` where SGLang is installed here, else None (`EngineHome.introspect`)."""
    return introspect(launch, path_map=path_map) if sglang_available() else None


def introspect(launch: LaunchArgs, path_map: Mapping[str, str] | None = None,
               env: Mapping[str, str] | None = None, cpu_fallback: bool = True) -> Introspection:
    """Build SGLang's ServerArgs from the launch's argv and report what that version resolved.

    With no ``--device`` and no accelerator here, SGLang >= 0.5.2x refuses ("No accelerator ..."); cpu_fallback
    then asks again with ``--device cpu`` and says so in the log (CPU-only decisions, e.g. the default attention
    backend and disable_overlap_schedule, are then SGLang's answer for a CPU server).
    """
    intro = dataclasses.replace(_introspect(launch, path_map, env), path_map=dict(path_map or {}))
    if (cpu_fallback and intro.error and "No accelerator" in intro.error and launch.flags.get("device") is None
            and "--device" not in launch.argv):
        retry = _introspect(dataclasses.replace(launch, argv=(*launch.argv, "--device", "cpu")), path_map, env)
        note = ("eagle3lib: no accelerator here, so SGLang was asked again with --device cpu (first answer: "
                f"{intro.error[:120]})")
        return dataclasses.replace(retry, log=(*retry.log, note), path_map=dict(path_map or {}))
    return intro


def _introspect(launch: LaunchArgs, path_map: Mapping[str, str] | None, env: Mapping[str, str] | None
                ) -> Introspection:
    if launch.engine != "sglang":
        raise ServingArgsError("sglang_engine.introspect", "not an SGLang launch command", expected="sglang",
                               found=launch.engine)
    if not sglang_available():
        raise ServingArgsError("sglang_engine.introspect", "SGLang is not importable here", expected="an installed sglang",
                               found="none", cause="the optional path; use the rule table (sglang_engine.resolver) instead")
    version = installed_version()
    try:
        server_args_mod = importlib.import_module("sglang.srt.server_args")
        ServerArgs = server_args_mod.ServerArgs
    except Exception as e:   # noqa: BLE001 - missing optional deps of SGLang itself
        return Introspection(version, "unavailable", {}, {}, (), (), f"import sglang.srt.server_args failed: {e!r}")
    parser = argparse.ArgumentParser(prog="sglang.launch_server")
    handler, logger = _ListHandler(), logging.getLogger("sglang")
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    before, error, sa = {}, None, None
    try:
        with mock.patch.dict(os.environ, {**launch.env, **(env or {}), **_OFFLINE}):
            ServerArgs.add_cli_args(parser)
            stderr = io.StringIO()
            try:
                with contextlib.redirect_stderr(stderr):
                    ns, unknown = parser.parse_known_args(_argv(launch, path_map))
            except SystemExit:
                said = stderr.getvalue().strip()
                said = next((ln for ln in reversed(said.splitlines()) if ": error:" in ln), said[-300:])
                return Introspection(version, "unavailable", {}, {}, (), tuple(handler.lines),
                                     f"SGLang's argparse refused the command: {said}")
            if unknown:
                handler.lines.append(f"argparse: unrecognized arguments {unknown}")
            names = _field_names(ServerArgs)
            try:
                sa = ServerArgs.from_cli_args(ns)
                if callable(getattr(sa, "resolve_once", None)):
                    sa.resolve_once()      # resolution is its own step since ServerArgs became a sealed record
            except Exception as e:   # noqa: BLE001 - SGLang's own rejection (ValueError, AssertionError, ...)
                error = f"{type(e).__name__}: {e}"
            before = {n: getattr(ns, n) for n in names if hasattr(ns, n)}
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    if sa is None or error:
        style = "declarations" if sa is not None and hasattr(sa, "resolve_once") else "post_init diff"
        return Introspection(version, style, before, dict(before), (), tuple(handler.lines), error)
    stash = getattr(sa, "_resolved_overrides", None)
    if isinstance(stash, list):
        effective = {n: getattr(sa, n, None) for n in names}
        decisions = []
        for entry in stash:
            source, fields = entry if isinstance(entry, tuple) and len(entry) == 2 else ("?", {})
            for f, v in dict(fields).items():
                decisions.append((str(source), f, before.get(f), v))
                effective[f] = v               # last declaration wins, as SGLang's resolution_result reads it
        reader = getattr(_optional_module("sglang.srt.arg_groups.overrides"), "resolution_result", None)
        if callable(reader):                   # that version's own reader (it also applies declared fallbacks)
            effective = {n: _read_or(reader, sa, n, effective[n]) for n in names}
        return Introspection(version, "declarations", before, effective, tuple(decisions), tuple(handler.lines))
    effective = {n: getattr(sa, n, None) for n in names}
    decisions = tuple(("__post_init__", n, before.get(n), effective[n]) for n in names
                      if n in before and not values_equal(before[n], effective[n]))
    return Introspection(version, "post_init diff", before, effective, decisions, tuple(handler.lines))


def _field_names(server_args_cls) -> list[str]:
    """ServerArgs field names: a dataclass (SGLang <= 0.5.1x) or a msgspec Struct (0.5.2x)."""
    if dataclasses.is_dataclass(server_args_cls):
        return [f.name for f in dataclasses.fields(server_args_cls)]
    return list(getattr(server_args_cls, "__struct_fields__", ()))


def _optional_module(name: str):
    try:
        return importlib.import_module(name)
    except Exception:   # noqa: BLE001 - older SGLang without that module
        return None


def _read_or(reader, sa, name, fallback):
    try:
        return reader(sa, name)
    except Exception:   # noqa: BLE001 - a field that version's reader refuses: keep our own reading
        return fallback


def values_equal(a, b) -> bool:
    """a == b for ServerArgs values, identity for objects that refuse == (tensors, configs)."""
    try:
        return bool(a == b)
    except Exception:   # noqa: BLE001 - exotic objects (tensors, configs) that refuse ==
        return a is b


def against_rules(intro: Introspection, resolution: Resolution) -> pd.DataFrame:
    """SGLang's own answer beside the rule table's, one row per setting either side touched; `agree` flags.

    Rows: the three knobs, every field a rule changed, and every field SGLang decided that the rule table knows of
    or that is speculative (``speculative_*``); SGLang's other decisions (tokenizer path, seed, ...) stay in
    ``intro.frame()``. ``agree`` is None where the rule table does not decide the field (neither requested nor set
    by a rule): that is a gap of the table, not a disagreement.
    """
    decided = {f for _, f, _, _ in intro.decisions}
    hit_fields = {h.field for h in resolution.hits if h.kind != "note"}
    ours_decides = set(KNOBS) | {"speculative_algorithm"} | hit_fields | {
        f for f, v in resolution.requested.items() if v is not None}
    shown = [f for f in sorted(decided) if f in ours_decides or f in _RULE_FIELDS or f.startswith("speculative_")]
    local_to_launch = {local: given for given, local in intro.path_map.items()}
    rows = []
    for f in dict.fromkeys([*KNOBS, *sorted(hit_fields), *shown]):
        ours = resolution.effective.get(f, resolution.requested.get(f))
        theirs = intro.effective.get(f) if f in intro.effective else None
        as_launched = local_to_launch.get(theirs, theirs) if isinstance(theirs, str) else theirs   # path_map undone
        rules = ", ".join(h.rule_id for h in resolution.hits if h.field == f and h.kind != "note")
        agree = (None if intro.error or resolution.rejected or f not in intro.effective or f not in ours_decides
                 else values_equal(ours, as_launched))
        rows.append({"field": f, "sglang": theirs, "rule_table": ours, "agree": agree, "rule": rules,
                     "sglang_source": ", ".join(s for s, g, _, _ in intro.decisions if g == f)})
    if intro.error or resolution.rejected:     # either side refusing to start is a row, agreeing or not
        rows.append({"field": "(startup)", "sglang": intro.error or "starts",
                     "rule_table": "; ".join(resolution.rejected) or "starts",
                     "agree": bool(intro.error) == bool(resolution.rejected), "rule": "",
                     "sglang_source": "exception" if intro.error else ""})
    return pd.DataFrame(rows, columns=["field", "sglang", "rule_table", "agree", "rule", "sglang_source"], dtype=object)


def ask(launch: LaunchArgs | None, resolution: Resolution | None, path_map: Mapping[str, str] | None = None,
        introspection: Introspection | None = None) -> pd.DataFrame:
    """against_rules(introspection or introspect(...), resolution), or a one-row note when SGLang is absent or
    there is nothing to ask."""
    def note(text):
        return pd.DataFrame([{"field": "(not asked)", "sglang": text, "rule_table": None, "agree": None, "rule": "",
                              "sglang_source": ""}])
    if launch is None or resolution is None or launch.engine != "sglang":
        return note("no SGLang launch command and resolution to compare")
    if not sglang_available():
        return note("SGLang is not installed here: the rule table's answer stands alone")
    return against_rules(introspection or introspect(launch, path_map=path_map), resolution)

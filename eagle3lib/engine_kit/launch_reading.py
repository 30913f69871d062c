"""A serving launch command read into the settings it requests, whatever the engine: `LaunchArgs`, `read_command`.

Accepts what users paste: ``python -m <module> ...``, ``<engine> serve ...``, env prefixes, ``\\`` line
continuations, or a list of args. Which command is which engine's, and which flags it takes, is each engine's home
(`EngineHome.entrypoint`, `.flags`, `.launch_fields`); this module reads tokens against them. Unknown flags are
kept (``LaunchArgs.unknown``), never dropped.
    args = read_command("python -m sglang.launch_server --model-path M ...", homes)   # serving.launch.parse_launch
"""
from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import pandas as pd

from ..engines.versions import ENGINES
from ..errors import Eagle3Error, ServingArgsError

def flag_table(spec: dict, short=()) -> dict[str, tuple[str, str]]:
    """{"names a b": (field, kind)} -> {"--a": ..., "--b": ...}; a name in `short` also as "-a"."""
    out = {}
    for names, value in spec.items():
        for name in names.split():
            out["--" + name] = value
            if name in short:
                out["-" + name] = value
    return out


_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_PYTHON = re.compile(r"^python[0-9.]*(\.exe)?$")
_SHELL_STOP = re.compile(r"^(\||\|\||&&|;|&|\d*>.*|>.*|<.*|\d*>&\d+)$")
_WRAPPERS = {"env", "nohup", "exec", "time", "command", "$"}


@dataclass(frozen=True)
class LaunchArgs:
    """The settings a launch command requests (None = not given); every flag kept, unknown ones listed."""

    engine: str                         # the engine's name (engines.versions.SERVING_ENGINES)
    entrypoint: str                     # how it was started, e.g. "python -m sglang.launch_server"
    model_path: str | None
    draft_path: str | None
    algorithm: str | None               # SGLang --speculative-algorithm / vLLM speculative_config.method
    num_steps: int | None               # SGLang --speculative-num-steps
    topk: int | None                    # SGLang --speculative-eagle-topk
    num_draft_tokens: int | None        # SGLang --speculative-num-draft-tokens (verify width incl. root)
    num_speculative_tokens: int | None  # vLLM speculative_config.num_speculative_tokens (K)
    speculative_config: dict | None     # vLLM --speculative-config, parsed
    flags: dict[str, Any]               # every flag given, by the engine's field name, typed
    unknown: tuple[str, ...] = ()       # flags this parser does not know (their values are in `flags` too)
    env: dict[str, str] = field(default_factory=dict)   # VAR=value given before the command
    positionals: tuple[str, ...] = ()   # stray words that are neither flags nor values
    notes: tuple[str, ...] = ()         # what was read leniently: bad values, repeats, shell redirections
    argv: tuple[str, ...] = ()          # the flag part as tokens (what the engine's argparse would see)
    unread: tuple[str, ...] = ()        # fields whose value could not be read (strict=False): never evidence
    table: Mapping = field(default_factory=dict, repr=False, compare=False)   # the engine's flag table (its home's)
    speculative: tuple[str, ...] = ()   # the fields that say how the draft is served (its home's)
    roles: Mapping = field(default_factory=dict, repr=False, compare=False)   # role -> field (its home's `roles`)

    @property
    def speculation_unread(self) -> bool:
        """A speculative setting (algorithm, draft, knobs, vLLM --speculative-config) whose value could not be read:
        nothing about the draft's serving may be decided from this command."""
        return bool(set(self.unread) & set(self.speculative))

    def field_for(self, role: str) -> str | None:
        """This engine's launch field for a role ("pipeline_parallel" -> "pp_size"), None when it has none."""
        return self.roles.get(role)

    def get(self, name: str, default=None):
        """A flag's value by field name (``max_running_requests``) or flag (``--max-running-requests``)."""
        if name.startswith("-"):
            spec = self.table.get(name)
            name = spec[0] if spec else name.lstrip("-").replace("-", "_")
        return self.flags.get(name, default)

    def frame(self) -> pd.DataFrame:
        """One row per flag: field, value, whether this parser knows the flag."""
        known = {spec[0] for spec in self.table.values()}
        rows = [{"field": k, "value": v, "known": k in known} for k, v in self.flags.items()]
        return pd.DataFrame(rows, columns=["field", "value", "known"])


def read_command(command: str | Sequence[str], homes: Mapping, engine: str | None = None,
                 strict: bool = True) -> LaunchArgs:
    """Parse a launch command (string or argv list) against the engines' homes ({name: EngineHome}) into
    LaunchArgs; strict=False keeps bad values as notes."""
    if engine is not None and engine not in homes:
        raise ServingArgsError("parse_launch(engine=...)", "unknown engine", expected=tuple(homes), found=engine)
    tokens = _tokenize(command)
    env, rest, notes = _strip_prefix(tokens)
    home, entrypoint, rest = _entrypoint(rest, homes, engine)
    rest, dropped = _cut_shell(rest)
    if dropped:
        notes.append(f"ignored shell syntax after the command: {' '.join(dropped)}")
    unread: list[str] = []
    flags, unknown, positionals = _read_flags(rest, home.flags, strict, notes, unread)
    fields, positionals = home.launch_fields(flags, entrypoint, positionals, strict, notes, unread)
    if positionals:
        notes.append(f"stray words kept but not understood: {list(positionals)}")
    return LaunchArgs(home.name, entrypoint, fields.get("model_path"), fields.get("draft_path"),
                      fields.get("algorithm"),
                      fields.get("num_steps"), fields.get("topk"), fields.get("num_draft_tokens"),
                      fields.get("num_speculative_tokens"), fields.get("speculative_config"),
                      flags, tuple(unknown), env, tuple(positionals), tuple(notes), tuple(rest),
                      tuple(dict.fromkeys(unread)), home.flags, home.speculative_fields, home.roles)


def int_or_none(v):
    """`v` when it is an int (not a bool), else None."""
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def python_module(tokens: list[str]) -> tuple[str, list[str]] | None:
    """``python [options] -m MODULE rest...`` -> (MODULE, rest); None when the command is not a python -m."""
    if not tokens or not _PYTHON.match(os.path.basename(tokens[0])):
        return None
    i = 1
    while i < len(tokens) and tokens[i].startswith("-") and tokens[i] != "-m":
        i += 2 if tokens[i] in ("-X", "-W") else 1  # python's own options (-u, -O, -X dev, ...)
    if i + 1 < len(tokens) and tokens[i] == "-m":
        return tokens[i + 1], tokens[i + 2:]
    return None


def _tokenize(command) -> list[str]:
    if isinstance(command, (list, tuple)):
        bad = [t for t in command if not isinstance(t, str)]
        if bad:
            raise ServingArgsError("launch command (list)", "every argument must be a string",
                                   expected="a list of str", found=repr(bad[0])[:80])
        return [t for t in command]
    if not isinstance(command, str):
        raise ServingArgsError("launch command", "not a string or a list of arguments",
                               expected="str or list[str]", found=type(command).__name__)
    text = re.sub(r"\\[ \t]*\r?\n", " ", command)      # `\` line continuations
    try:
        return shlex.split(text, comments=False, posix=True)
    except ValueError as e:
        raise ServingArgsError("launch command", "cannot be split into arguments like a shell would",
                               expected="balanced quotes", found=str(e),
                               cause="an unbalanced ' or \" (often around --speculative-config JSON)") from None


def _strip_prefix(tokens: list[str]):
    env, notes, i = {}, [], 0
    while i < len(tokens) and (tokens[i] in _WRAPPERS or _ENV.match(tokens[i])):
        if "=" in tokens[i] and _ENV.match(tokens[i]):
            key, _, value = tokens[i].partition("=")
            env[key] = value
        i += 1
    return env, tokens[i:], notes


def _entrypoint(tokens: list[str], homes: Mapping, engine: str | None):
    if not tokens:
        raise ServingArgsError("launch command", "is empty", expected="a serving engine's launch command",
                               found="nothing")
    for home in homes.values():
        hit = home.entrypoint(tokens)
        if hit is not None:
            return home, hit[0], hit[1]
    if tokens[0].startswith("-"):
        found = engine or _guess_engine(tokens, homes)
        if found:
            return homes[found], "(flags only)", tokens
    raise ServingArgsError("launch command", f"not a {' or '.join(ENGINES[n].title for n in homes)} launch command",
                           expected=", ".join(h.commands or f"a {ENGINES[n].title} launch command"
                                              for n, h in homes.items())
                           + ", or flags with engine=", found=" ".join(tokens[:4])[:120],
                           cause="a different program, or a wrapper (docker, srun) in front of the command")


def _guess_engine(tokens: list[str], homes: Mapping) -> str | None:
    names = {t.split("=")[0] for t in tokens if t.startswith("-")}
    hits = {e: len(names & set(h.flags)) - max((len(names & set(o.flags)) for n, o in homes.items() if n != e),
                                                 default=0)
            for e, h in homes.items()}
    best = max(hits, key=hits.get)
    return best if hits[best] > 0 else None


def _cut_shell(tokens: list[str]):
    for i, t in enumerate(tokens):
        if _SHELL_STOP.match(t):
            return tokens[:i], tokens[i:]
    return tokens, []


def _looks_like_value(token: str) -> bool:
    return not token.startswith("-") or bool(re.fullmatch(r"-\d+(\.\d*)?([eE][-+]?\d+)?", token))


def _read_flags(tokens: list[str], table: Mapping, strict: bool, notes: list[str], unread: list[str]):
    flags, unknown, positionals, i = {}, [], [], 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if not tok.startswith("-") or tok in ("-", "--"):
            positionals.append(tok)
            continue
        name, eq, inline = tok.partition("=")
        negated = name.startswith("--no-") and name not in table and ("--" + name[5:]) in table
        spec = table.get("--" + name[5:] if negated else name)
        if spec is None and "." in name:   # a JSON flag's dotted form (vLLM): --speculative-config.method x
            head, _, key = name.partition(".")
            if table.get(head, ("", ""))[1] == "json":
                value = inline if eq else (tokens[i] if i < len(tokens) else None)
                i += 0 if eq else 1
                flags.setdefault(table[head][0], {})
                if isinstance(flags[table[head][0]], dict):
                    flags[table[head][0]][key.replace("-", "_")] = maybe_number(value)
                continue
        if spec is None and name.startswith("--") and len(name) > 3:   # argparse accepts unique prefixes
            hits = {table[k] for k in table if k.startswith(name)}
            if len(hits) == 1:
                spec = hits.pop()
                notes.append(f"{name} read as an abbreviation of the {spec[0]} flag (argparse prefix matching; "
                             "the real parser knows more flags and may find it ambiguous)")
        if spec is None:
            unknown.append(name)
            field_name = name.lstrip("-").replace("-", "_")
            if eq:
                value = inline
            elif i < len(tokens) and _looks_like_value(tokens[i]) and not _SHELL_STOP.match(tokens[i]):
                value, i = tokens[i], i + 1
            else:
                value = True
            _store(flags, field_name, value, notes)
            continue
        field_name, kind = spec
        before = len(notes)
        if kind == "bool":
            value = (not negated) if not eq else _bool(inline, name, strict, notes)
        elif kind == "list":
            if eq:
                items = inline.split(",")
            else:
                items = []
                while i < len(tokens) and _looks_like_value(tokens[i]) and not _SHELL_STOP.match(tokens[i]):
                    items.append(tokens[i])
                    i += 1
            value = [_typed(x, "int", name, strict, notes) for x in items]
        else:
            if eq:
                raw = inline
            elif i < len(tokens) and (_looks_like_value(tokens[i]) or kind == "json"):
                raw, i = tokens[i], i + 1
            else:
                fail_or_note(strict, notes, ServingArgsError(f"flag {name}", "has no value", expected=f"a {kind} value",
                                                      found="nothing", cause="the value was cut off or quoted away"))
                unread.append(field_name)
                continue
            value = _typed(raw, kind, name, strict, notes)
        if len(notes) > before:           # a value kept as text because it could not be typed
            unread.append(field_name)
        _store(flags, field_name, value, notes)
    return flags, unknown, positionals


def _store(flags: dict, name: str, value, notes: list[str]) -> None:
    if name in flags and flags[name] != value:
        notes.append(f"{name} given twice ({flags[name]!r}, then {value!r}): the engine keeps the last")
    flags[name] = value


def fail_or_note(strict: bool, notes: list[str], err: Eagle3Error):
    """Raise `err` when strict, else keep its text among the notes (the value is then read leniently)."""
    if strict:
        raise err
    notes.append(str(err))


def _bool(raw: str, name: str, strict: bool, notes: list[str]):
    low = raw.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    fail_or_note(strict, notes, ServingArgsError(f"flag {name}", "is a switch", expected="no value, or true/false",
                                          found=raw))
    return raw


def maybe_number(value):
    """An int or float when `value` reads as one, else `value` unchanged."""
    for cast in (int, float):
        try:
            return cast(value)
        except (TypeError, ValueError):
            pass
    return value


def _typed(raw: str, kind: str, name: str, strict: bool, notes: list[str]):
    try:
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
        if kind == "json":
            return json.loads(raw)
    except (ValueError, RecursionError) as e:
        what = {"int": "an integer", "float": "a number", "json": "a JSON object"}[kind]
        cause = ("quote the JSON in single quotes so the shell keeps its double quotes" if kind == "json"
                 else None)
        fail_or_note(strict, notes, ServingArgsError(f"flag {name}", f"value is not {what}", expected=what,
                                              found=repr(raw)[:120], cause=cause or str(e)[:120]))
        return raw
    return raw

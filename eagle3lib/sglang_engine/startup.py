"""What an SGLang server says it runs: its ``/server_info`` and its startup log (adjustment warnings, the normalized
``server_args=ServerArgs(...)``), and the requested-vs-effective table with the rule behind each change.

``/server_info`` is ``asdict(server_args)`` after SGLang's normalization, so diffing it (or the log's
``server_args=ServerArgs(...)`` line) against the launch command shows every silent rewrite:
    diff = requested_vs_effective(parse_launch(cmd), read_server_info("http://host:30000"), resolve(...))
"""
from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from ..errors import LogParseError, MissingFileError, ServingArgsError
from ..engine_kit.launch_reading import LaunchArgs
from ..engines.engine_errors import source_lines
from ..engines.versions import LATEST_TRACED, parse_version
from ..once import file_text, kept, parsed_once
from .launch import FLAGS, SPEC_FIELDS
from .resolver import Resolution
from .rules_table import RULES
from .run_log import SERVER_ARGS_MARK, server_args_from_line

_EXTRA_FIELDS = {"tokenizer_mode", "skip_tokenizer_init", "load_format", "revision", "prefill_only_one_req",
                 "speculative_draft_model_revision", "cuda_graph_config", "enable_dp_lm_head", "nnodes", "node_rank",
                 "dist_init_addr", "max_loaded_loras", "lora_paths", "disable_chunked_prefix_cache", "nccl_port",
                 "model_impl", "is_embedding", "enable_multimodal", "schedule_conservativeness", "cpu_offload_gb"}
KNOWN_FIELDS = {spec[0] for spec in FLAGS.values()} | _EXTRA_FIELDS
_SCHEDULER_KEYS = {"max_total_num_tokens", "max_req_input_len", "status", "internal_states", "version"}
CHECKLIST = SPEC_FIELDS + ("speculative_accept_threshold_single", "speculative_accept_threshold_acc",
                           "max_running_requests", "disable_overlap_schedule", "page_size", "attention_backend",
                           "speculative_draft_model_quantization", "cuda_graph_max_bs", "enable_mixed_chunk")
_MESSAGES = {r.message: r for r in RULES if r.message}
_TS = re.compile(r"^\[(?P<ts>\d{4}-\d\d-\d\d[ T][\d:.,]+)(?P<rank>[^\]]*)\]\s*")
_LEVEL = re.compile(r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+(?:[\w./-]+\.py:\d+:?\s*)?")
_ADJUST = re.compile(r"\b(?:is|are) (?:adjusted|reset|changed|disabled|forced|overridden|turned off)\b|"
                     r"\b[Oo]verriding\b|not specified\. Use \w+ backend by default")
_FIELD_ADJ = re.compile(r"^(?P<field>[a-z]+(?:_[a-z0-9]+)+) is (?:adjusted|changed|reset) to ")
_ATTN_DEFAULT = re.compile(r"Attention backend not specified\. Use (?P<value>\w+) backend by default")
_GARBLED = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ufffd]")
# an SGLang version named in a launch command or a server log: a pinned install (sglang==0.5.6), an image tag
# (lmsysorg/sglang:v0.5.6), a versioned environment's interpreter (/opt/sglang-0.5.6/bin/python), "SGLang v0.5.6"
_SGLANG_VERSION = re.compile(r"\bsglang(?:==|[-_:]v?|\s+v(?:ersion)?\s*[:=]?\s*v?)(\d+\.\d+\.\d+(?:\.post\d+|rc\d+)?)",
                              re.IGNORECASE)


def version_in_text(text: str) -> str | None:
    """The SGLang version a launch command or server log names (`_SGLANG_VERSION`), None when it names none."""
    m = _SGLANG_VERSION.search(text or "")
    return m.group(1) if m else None


@dataclass(frozen=True)
class ServerInfo:
    """An SGLang /server_info answer: settings after normalization, scheduler facts, per-DP internal states."""

    source: str
    version: str | None
    settings: dict                    # every ServerArgs-like key -> value (nothing dropped)
    scheduler: dict                   # max_total_num_tokens, max_req_input_len, ...
    internal_states: tuple[dict, ...]
    unrecognised: tuple[str, ...]     # setting keys this workbook does not know (kept in `settings`)
    warnings: tuple[str, ...]

    @property
    def avg_spec_accept_length(self) -> float | None:
        """Lifetime τ of DP rank 0 (includes warmup; only completed 40-iteration windows are folded in)."""
        for state in self.internal_states:
            if isinstance(state.get("avg_spec_accept_length"), (int, float)):
                return float(state["avg_spec_accept_length"])
        value = self.scheduler.get("avg_spec_accept_length", self.settings.get("avg_spec_accept_length"))
        return float(value) if isinstance(value, (int, float)) else None


@dataclass(frozen=True)
class LogEvent:
    """One log line that says something about the settings the server runs."""

    line_no: int
    timestamp: str | None
    level: str | None
    kind: str                 # "adjustment" or "server_args"
    message: str
    rule_id: str | None       # the sglang_engine.rules_table row whose exact line this is
    field: str | None


@dataclass(frozen=True)
class SglangStartupLog:
    """What an SGLang startup log proves: adjustment warnings, the normalized ServerArgs (the home's `startup_log`)."""

    source: str
    events: tuple[LogEvent, ...]
    server_args: dict | None          # `server_args=ServerArgs(...)`: settings after normalization
    version: str | None               # the SGLang install a line names (version_in_text)
    lines: int
    skipped: int                      # non-empty lines that say nothing about settings
    garbled: int                      # lines with binary or undecodable bytes (skipped too)
    warnings: tuple[str, ...]
    engine = "sglang"                 # the home that read it
    runner = None                     # SGLang has one model runner: its log names none

    def frame(self) -> pd.DataFrame:
        """The events as a table (line, timestamp, level, kind, rule, field, message)."""
        cols = ["line", "timestamp", "level", "kind", "rule", "field", "message"]
        rows = [[e.line_no, e.timestamp, e.level, e.kind, e.rule_id, e.field,
                 e.message if len(e.message) < 160 else e.message[:157] + "..."] for e in self.events]
        return pd.DataFrame(rows, columns=cols, dtype=object)

    @property
    def own_lines(self) -> int:
        """How many lines only an SGLang server writes: settings events, and a line naming its install."""
        return len(self.events) + (self.version is not None)

    def summary(self) -> str:
        """How much of the log was read, skipped and garbled."""
        return (f"{self.source}: {self.lines} lines, {len(self.events)} about settings, {self.skipped} skipped "
                f"({self.garbled} garbled)")

    def proof(self, changed) -> pd.DataFrame:
        """The lines that show the `changed` settings: their adjustment warnings and the ServerArgs line."""
        frame = self.frame()
        return frame[(frame["kind"] == "server_args") | frame["field"].isin(set(changed))].reset_index(drop=True)


def _load_json_source(src, timeout: float):
    if isinstance(src, Mapping):
        return dict(src), "<dict>"
    text = str(src)
    if text.startswith(("http://", "https://")):
        return _fetch(text, timeout), text
    path = Path(text)
    if not path.is_file():
        raise MissingFileError(text, "server info file not found", expected="a saved /server_info JSON, a dict "
                               "or a URL", found="nothing")
    try:
        return json.loads(file_text(path)), text
    except json.JSONDecodeError as e:
        raise ServingArgsError(text, "not valid JSON", expected="the body of GET /server_info",
                               found=str(e)[:120], cause="a truncated save, or HTML from a proxy") from None


def _fetch(url: str, timeout: float):
    parts = urllib.parse.urlsplit(url)
    paths = [parts.path] if parts.path not in ("", "/") else ["/server_info", "/get_server_info"]
    last = None
    for p in paths:
        full = urllib.parse.urlunsplit((parts.scheme, parts.netloc, p, parts.query, ""))
        try:
            with urllib.request.urlopen(full, timeout=timeout) as resp:  # noqa: S310 (user-given server URL)
                return json.loads(resp.read().decode("utf-8", errors="replace"))
        except urllib.error.HTTPError as e:
            last = f"HTTP {e.code} from {full}"
        except (urllib.error.URLError, OSError, ValueError) as e:
            last = f"{type(e).__name__}: {e}"
            break
    raise ServingArgsError(url, "could not read server info", expected="a running SGLang server answering GET "
                           "/server_info", found=last, cause="server down, wrong port, or not an SGLang server")


def read_server_info(src, timeout: float = 3.0) -> ServerInfo:
    """Read /server_info (or /get_server_info) from a dict, a saved JSON file or a URL; never drops a key. A file or
    a URL is read once per case (`once`): the inputs' check and the discovery share one answer."""
    if isinstance(src, (str, Path)) and str(src).startswith(("http://", "https://")):
        return kept(("server info", str(src)), lambda: _server_info(src, timeout), copied=True)
    return parsed_once("server info", src, lambda: _server_info(src, timeout))


def _server_info(src, timeout: float) -> ServerInfo:
    data, where = _load_json_source(src, timeout)
    if not isinstance(data, dict):
        raise ServingArgsError(where, "server info is not a JSON object", expected="{ServerArgs fields..., "
                               "'version': ...}", found=type(data).__name__)
    warnings, version = [], data.get("version")
    version = str(version) if version is not None else None
    if version is None:
        warnings.append("no 'version' key: pass sglang_version yourself for rule-table predictions")
    else:
        try:
            v = parse_version(version)
            if v > parse_version(LATEST_TRACED):
                warnings.append(f"SGLang {version} is newer than the rule table (traced up to {LATEST_TRACED})")
        except ServingArgsError:
            warnings.append(f"version {version!r} is not a version this workbook can read")
    states = data.get("internal_states", [])
    if not isinstance(states, list) or not all(isinstance(s, dict) for s in states):
        warnings.append(f"internal_states is not a list of objects ({type(states).__name__}): ignored")
        states = []
    settings = {k: v for k, v in data.items() if k not in _SCHEDULER_KEYS and not str(k).startswith("_eagle3lib")
                and k not in ("avg_spec_accept_length",)}
    scheduler = {k: data[k] for k in _SCHEDULER_KEYS - {"internal_states", "version"} if k in data}
    if "avg_spec_accept_length" in data:
        scheduler["avg_spec_accept_length"] = data["avg_spec_accept_length"]
    unknown = tuple(sorted(k for k in settings if k not in KNOWN_FIELDS))
    if not any(k in settings for k in SPEC_FIELDS):
        warnings.append("no speculative_* settings: not an SGLang /server_info, or speculative decoding is off")
    if unknown and any("newer" in w or "not a version" in w or "no 'version'" in w for w in warnings):
        warnings.append(f"{len(unknown)} keys not recognised (kept in .settings): {', '.join(unknown[:15])}"
                        + (" ..." if len(unknown) > 15 else ""))
    return ServerInfo(where, version, settings, scheduler, tuple(states), unknown, tuple(warnings))


def read_sglang_startup_log(source, *, num_target_layers: int | None = None) -> SglangStartupLog:
    """Read an SGLang server log (path, text or lines): adjustment warnings, the normalized ServerArgs, the version
    a line names (`num_target_layers`: the homes' `startup_log` signature; SGLang's log needs none). A file is read
    and parsed once per case (`once`)."""
    return parsed_once("sglang startup log", source, lambda: _startup_log(source))


def _startup_log(source) -> SglangStartupLog:
    lines, where = source_lines(source, "a server log file or its text")
    events, server_args, version = [], None, None
    skipped = garbled = 0
    warnings = []
    for no, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        if _GARBLED.search(raw):
            garbled += 1
            skipped += 1
            continue
        ts = level = None
        msg = raw.strip()
        m = _TS.match(msg)
        if m:
            ts, msg = m["ts"], msg[m.end():]
        m = _LEVEL.match(msg)
        if m:
            level, msg = m["level"], msg[m.end():]
        if version is None:
            version = version_in_text(msg)           # a line naming its install (sglang==0.5.6, an image tag)
        if SERVER_ARGS_MARK in msg:
            server_args = server_args_from_line(msg)
            if not msg.rstrip().endswith(")"):
                warnings.append(f"line {no}: the server_args line looks truncated; later fields are missing")
            events.append(LogEvent(no, ts, level, "server_args", msg, None, None))
            continue
        rule = next((r for text, r in _MESSAGES.items() if msg.startswith(text)), None)
        if rule is not None or _ADJUST.search(msg):
            fm, am = _FIELD_ADJ.match(msg), _ATTN_DEFAULT.search(msg)
            field = (rule.fields[0] if rule else fm["field"] if fm else "attention_backend" if am else None)
            events.append(LogEvent(no, ts, level, "adjustment", msg, rule.id if rule else None, field))
            continue
        skipped += 1
    if not any(ln.strip() for ln in lines):
        raise LogParseError(where, "log is empty", expected="an SGLang server log", found="no text")
    if not events:
        warnings.append("no settings-related line found (no adjustment warning, no server_args=ServerArgs(...)): is "
                        "this an SGLang startup log?")
    launches = sum(e.kind == "server_args" for e in events)
    if launches > 1:
        warnings.append(f"{launches} launches in this log: the last server_args line is the one read")
    if garbled:
        warnings.append(f"{garbled} garbled line(s) skipped (binary or undecodable bytes)")
    return SglangStartupLog(where, tuple(events), server_args, version, len(lines), skipped, garbled,
                            tuple(warnings))


def _observed(observed) -> tuple[dict, str]:
    if observed is None:
        return {}, ""
    if isinstance(observed, ServerInfo):
        return observed.settings, "/server_info"
    if isinstance(observed, SglangStartupLog):
        return observed.server_args or {}, "log: server_args"
    if isinstance(observed, Resolution):
        return observed.effective, "rule table"
    if isinstance(observed, Mapping):
        return dict(observed), "given"
    raise ServingArgsError("requested_vs_effective(observed=...)", "unknown kind of server answer",
                           expected="ServerInfo, SglangStartupLog, Resolution or dict", found=type(observed).__name__)


def requested_vs_effective(requested, observed=None, resolution: Resolution | None = None) -> pd.DataFrame:
    """Requested vs effective per setting, with the rule (and its source) that explains each change."""
    req = dict(requested.flags) if isinstance(requested, LaunchArgs) else dict(requested or {})
    seen, evidence = _observed(observed)
    predicted = resolution.effective if resolution is not None else {}
    hits = {}
    for h in (resolution.hits if resolution is not None else ()):
        if h.kind != "note":
            hits.setdefault(h.field, []).append(h)
    fields = list(dict.fromkeys([*SPEC_FIELDS, *[k for k in req if k in KNOWN_FIELDS], *hits,
                                 *[k for k in CHECKLIST if k in seen]]))
    rows = []
    for f in fields:
        r = req.get(f)
        pred = predicted.get(f, r)
        eff = seen[f] if f in seen else pred
        fired = [h for h in hits.get(f, []) if h.requested != h.effective]
        changed = (r is not None or bool(fired)) and not _same(r, eff)
        rule = ", ".join(dict.fromkeys(h.rule_id for h in fired)) or ("unexplained" if changed else "")
        source = "; ".join(dict.fromkeys(h.source for h in fired))
        modelled = resolution is not None and (pred is not None or f in hits)
        agrees = _same(pred, seen[f]) if (f in seen and modelled) else None   # None: the table says nothing
        rows.append({"field": f, "requested": r, "effective": eff, "changed": changed, "rule": rule,
                     "source": source, "predicted": pred, "agrees": agrees,
                     "evidence": evidence if f in seen else ("rule table" if resolution is not None else "")})
    return pd.DataFrame(rows, columns=["field", "requested", "effective", "changed", "rule", "source", "predicted",
                                       "agrees", "evidence"], dtype=object)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return abs(float(a) - float(b)) < 1e-9
    return a == b

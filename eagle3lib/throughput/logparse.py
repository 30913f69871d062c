"""Parsers from SGLang / vLLM logs, /server_info, benchmark JSON and Prometheus text into ``RunRecord``s.

Each returns a ``ParseResult`` (records + lines used + bad lines with reasons + warnings); nothing readable at
all raises ``LogParseError`` naming the file and what was looked for. tau is recomputed from raw counters where
they exist; a printed "accept rate" is kept with the formula it matched. Logs split into runs at launch lines
(``server_args=ServerArgs(...)``, ``sglang.launch_server`` / ``vllm serve``, vLLM engine init) and ``# run: <label>``.
"""
from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import DataError, LogParseError, MissingFileError
from .records import RunRecord
from ..serving.serverinfo import SERVER_ARGS_MARK, server_args_from_line
from ..engines.sglang_resolver import accept_rate_versions

MAX_BAD_SHOWN = 10
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)")
_MARKER = re.compile(r"^\s*#+\s*run:\s*(.*?)\s*$")
_KV = re.compile(r"(\w+)=('(?:[^'\\]|\\.)*'|\"[^\"]*\"|[^,()\s]+)")
_FLAG = re.compile(r"--([a-z][\w-]*)[ =]('[^']*'|\"[^\"]*\"|\S+)")
_SG_DECODE = re.compile(r"Decode batch(?: \[\d+\])?[.,]\s+(#running-req.*)$")
# every `accept rate` formula SGLang ever logged, labelled with its versions (one table: engines.sglang_resolver)
_SG_RATE_DEFS = {f"{f.name} ({versions})": f.fn for versions, f in accept_rate_versions()}
_UNIT_SCALE = {"token/s": 1.0, "tokens/s": 1.0, "tok/s": 1.0, "token/ms": 1000.0, "tokens/ms": 1000.0}


@dataclass(frozen=True)
class ParseResult:
    """Records read from one source plus what was skipped and why."""

    source: str
    records: tuple[RunRecord, ...]
    n_lines: int = 0
    n_used: int = 0                                   # lines (or objects) that fed a record
    n_bad: int = 0                                    # garbage, binary or truncated candidate lines
    bad_lines: tuple[tuple[int, str], ...] = ()      # first few (line number, reason)
    warnings: tuple[str, ...] = ()

    def summary(self) -> str:
        """One paragraph: counts, first bad lines, warnings."""
        s = (f"{self.source}: {len(self.records)} runs from {self.n_used} of {self.n_lines} lines; "
             f"{self.n_bad} bad lines skipped")
        if self.bad_lines:
            s += " (" + "; ".join(f"line {n}: {why}" for n, why in self.bad_lines) + ")"
        return s + "".join(f"\n  warning: {w}" for w in self.warnings)


@dataclass
class _Seg:
    """Lines of one run between two launch boundaries (internal accumulator)."""

    label: str = ""
    settings: dict = field(default_factory=dict)      # effective (server_args / engine config)
    requested: dict = field(default_factory=dict)     # from a launch command
    notes: list = field(default_factory=list)
    items: list = field(default_factory=list)         # (line number, time, parsed dict)
    version: str = ""


class LogScan:
    """Line bookkeeping shared by the log parsers: segments, bad lines, warnings."""

    def __init__(self, source: str, text: str | None):
        if text is None:
            p = Path(source)
            if not p.is_file():
                raise MissingFileError(str(p), "log file not found", expected="a server log", found="nothing")
            text = p.read_bytes().decode("utf-8", errors="replace")
        self.source, self.lines = str(source), text.splitlines()
        self.segs, self.bad, self.n_bad, self.warnings = [_Seg()], [], 0, []

    def bad_line(self, n: int, why: str):
        self.n_bad += 1
        if len(self.bad) < MAX_BAD_SHOWN:
            self.bad.append((n, why))

    def boundary(self, label: str = "", settings: dict | None = None, note: str = "", version: str = "",
                 requested: dict | None = None):
        if self.segs[-1].items:
            self.segs.append(_Seg())
        seg = self.segs[-1]
        seg.label = label or seg.label
        seg.settings.update(settings or {})
        seg.requested.update(requested or {})
        seg.version = version or seg.version
        if note:
            seg.notes.append(note)

    def clean_lines(self):
        """(line number, stripped text, timestamp) for every line that is not binary garbage."""
        for n, raw in enumerate(self.lines, 1):
            line = _ANSI.sub("", raw).rstrip("\r\n")
            if "\ufffd" in line or any(ord(ch) < 32 and ch != "\t" for ch in line):
                self.bad_line(n, "binary or garbled bytes")
                continue
            m = _TIME.match(line)
            yield n, line, m.group(1) if m else ""

    def make(self, idx: int, seg: _Seg, **kw) -> RunRecord | None:
        """A record for one segment; a DataError becomes a warning and the run is skipped."""
        lines = [n for n, _, _ in seg.items]
        try:
            return RunRecord(source=f"{self.source}:{lines[0]}-{lines[-1]}", time=seg.items[0][1], **kw)
        except DataError as e:
            self.warnings.append(f"run {idx} (lines {lines[0]}-{lines[-1]}) skipped: {e}")
            return None

    def build_result(self, keep, build, used: int, problem: str, expected: str, cause: str) -> ParseResult:
        """Build one record per kept segment; nothing built at all -> LogParseError naming the file."""
        segs = [s for s in self.segs if keep(s)]
        records = [r for i, seg in enumerate(segs) if (r := build(seg, i + 1)) is not None]
        if not records:
            raise LogParseError(self.source, problem, expected=expected, cause=cause,
                                found=f"{len(self.lines)} lines, {self.n_bad} bad")
        return self.result(records, used)

    def result(self, records, n_used: int) -> ParseResult:
        return ParseResult(self.source, tuple(records), len(self.lines), n_used, self.n_bad, tuple(self.bad),
                           tuple(self.warnings))


def _num(s: str):
    s = s.strip().rstrip("%,")
    if s in ("None", "null", ""):
        return None
    return int(s) if re.fullmatch(r"-?\d+", s) else float(s)


def _settings_from_kv(text: str, names: dict) -> dict:
    """Pick `names` (source key -> record field) out of ``key=value`` / ``--flag value`` text."""
    found = {k.replace("-", "_"): v.strip("'\"") for k, v in _KV.findall(text) + _FLAG.findall(text)}
    return {dst: found[src] for src, dst in names.items() if src in found}


SGLANG_FIELD_NAMES = {"speculative_algorithm": "algorithm", "speculative_num_steps": "num_steps",
             "speculative_eagle_topk": "topk", "speculative_num_draft_tokens": "num_draft_tokens"}


def _int_or_none(v):
    return None if v in (None, "None", "null", "") else int(v)


def sglang_settings(raw: dict) -> dict:
    """SGLang settings dict -> record fields; no algorithm means no speculation (num_steps 0)."""
    if "algorithm" in raw and raw["algorithm"] in ("None", "null", None, ""):
        return {"num_steps": 0}
    return {k: _int_or_none(raw[k]) for k in ("num_steps", "topk", "num_draft_tokens") if k in raw}


def _sg_decode_fields(body: str) -> dict | None:
    """`#running-req: 1, ..., gen throughput (token/s): 90.1, #queue-req: 0,` -> {key: value}."""
    out = {}
    for chunk in body.split(", "):
        key, sep, val = chunk.strip().rstrip(",").partition(": ")
        if sep:
            out[key] = val.strip()
    return out


def parse_sglang_log(source: str | Path, *, text: str | None = None, series: str = "", hardware: str = "",
                     engine_version: str = "", settings: dict | None = None) -> ParseResult:
    """SGLang server log -> one record per run (``Decode batch`` lines, every historical variant)."""
    scan = LogScan(str(source), text)
    used = 0
    for n, line, when in scan.clean_lines():
        m = _MARKER.match(line)
        comment = line.lstrip().startswith("#")
        if m:
            scan.boundary(label=m.group(1))
        elif SERVER_ARGS_MARK in line and not comment:
            kwargs = server_args_from_line(line)
            try:
                effective = sglang_settings({dst: kwargs[src] for src, dst in SGLANG_FIELD_NAMES.items() if src in kwargs})
            except ValueError as e:
                scan.bad_line(n, f"server_args line with an unreadable speculative setting ({e})")
                effective = {}
            scan.boundary(settings=effective)
        elif "sglang.launch_server" in line or re.search(r"\bsglang serve\b", line):
            try:
                requested = sglang_settings(_settings_from_kv(line, SGLANG_FIELD_NAMES))
            except ValueError as e:
                scan.bad_line(n, f"launch line with an unreadable speculative setting ({e})")
                requested = {}
            scan.boundary(requested=requested)
        elif comment:
            continue
        elif "is adjusted to speculative_num_steps + 1" in line:
            scan.boundary(note="SGLang rewrote num_draft_tokens to num_steps + 1 (topk == 1)")
        elif "Max running requests is reset to 48" in line:
            scan.boundary(note="max_running_requests reset to 48 by speculative decoding")
        elif "Decode batch" in line:
            m = _SG_DECODE.search(line)
            f = _sg_decode_fields(m.group(1)) if m else None
            thr_key = next((k for k in (f or {}) if k.startswith("gen throughput")), None)
            if not f or "#running-req" not in f or thr_key is None or "#queue-req" not in f:
                scan.bad_line(n, "truncated or malformed Decode batch line")
                continue
            unit = thr_key[thr_key.find("(") + 1:thr_key.rfind(")")]
            try:
                thr = float(f[thr_key]) * _UNIT_SCALE[unit]
                tau = float(f["accept len"]) if "accept len" in f else None
                rate = float(f["accept rate"]) if "accept rate" in f else None
                bs = int(f["#running-req"])
            except (KeyError, ValueError):
                scan.bad_line(n, f"unreadable number or unknown throughput unit '{unit}'")
                continue
            if unit not in ("token/s", "tokens/s", "tok/s"):
                scan.warnings.append(f"line {n}: throughput in {unit}, converted to token/s")
            prev = scan.segs[-1].items
            if prev and (prev[-1][2]["tau"] is None) != (tau is None):
                scan.boundary(note="split where lines switch between speculative and non-speculative")
            scan.segs[-1].items.append((n, when, {"tau": tau, "rate": rate, "tok_s": thr, "bs": bs}))
            used += 1
    if not any(d["tau"] is not None for seg in scan.segs for _, _, d in seg.items):
        scan.warnings.append("no speculative lines ('accept len') found: every run is a baseline")
    series = series or Path(str(source)).stem
    return scan.build_result(lambda seg: seg.items,
                       lambda seg, i: _sg_record(scan, seg, i, series, hardware, engine_version, settings), used,
                       "no SGLang decode statistics found",
                       expected="'Decode batch' lines with '#running-req', 'gen throughput (token/s)' and "
                       "'#queue-req' (plus 'accept len' when speculation is on)",
                       cause="not an SGLang server log, log level above INFO, or a log cut before decoding")


def _sg_rate_definition(items, steps, ndt) -> str:
    """Names of the `accept rate` formulas that reproduce every line's printed rate (both printed to 0.01)."""
    pairs = [(d["tau"], d["rate"]) for d in items if d["rate"] is not None and d["tau"] is not None]
    if not pairs:
        return ""
    hits = []
    for name, fn in _SG_RATE_DEFS.items():
        ok = True
        for tau, rate in pairs:
            v, dv = fn(tau, steps, ndt), fn(tau + 0.005, steps, ndt)
            ok = ok and v is not None and abs(v - rate) <= 0.0051 + abs(dv - v)
        if ok:
            hits.append(name)
    return " or ".join(hits) or "unknown (no known formula reproduces it with these settings)"


def _sg_record(scan, seg, idx, series, hardware, version, settings) -> RunRecord | None:
    items = [d for _, _, d in seg.items]
    spec = items[0]["tau"] is not None
    st = dict(seg.settings or seg.requested)
    st.update(settings or {})
    notes = list(seg.notes)
    if seg.requested and not seg.settings and not settings:
        notes.append("settings from the launch command (requested; SGLang may have rewritten them)")
    diff = {k: (v, seg.settings[k]) for k, v in seg.requested.items() if k in seg.settings and seg.settings[k] != v}
    notes += [f"requested {k}={a}, effective {b}" for k, (a, b) in diff.items()]
    if not spec:
        st = {"num_steps": 0}
    elif st.get("num_steps") == 0:
        scan.warnings.append(f"run {idx}: accept len present but the launch line has no speculation; "
                             "settings dropped")
        st = {}
    bss = [d["bs"] for d in items]
    w = sum(bss) or 1
    tau = sum(d["tau"] * d["bs"] for d in items) / w if spec else None  # weight windows by verify count
    rates = [d["rate"] for d in items if d["rate"] is not None]
    rate = statistics.mean(rates) if rates else None
    if min(bss) != max(bss):
        notes.append(f"running requests varied {min(bss)}-{max(bss)}; tok/s is the median window, aggregate")
    rate_def = _sg_rate_definition(items, st.get("num_steps"), st.get("num_draft_tokens"))
    desc = ("baseline (no speculation)" if not spec else
            " ".join(f"{k}={st[k]}" for k in ("num_steps", "topk", "num_draft_tokens") if k in st) or "speculative")
    return scan.make(idx, seg, engine="sglang", engine_version=seg.version or version,
                     tok_s=statistics.median(d["tok_s"] for d in items), accept_length=tau, accept_rate=rate,
                     accept_rate_definition=rate_def, batch_size=int(statistics.median(bss)),
                     num_steps=st.get("num_steps"), topk=st.get("topk"), num_draft_tokens=st.get("num_draft_tokens"),
                     hardware=hardware, series=series, label=seg.label or f"run {idx}: {desc}", notes="; ".join(notes))


_VL_NUMS = {"mean_len": r"Mean acceptance length: ([\d.]+)", "accepted": r"Accepted: (\d+) tokens",
            "drafted": r"Drafted: (\d+) tokens", "k": r"Number of speculative tokens: (\d+)",
            "v0_accepted": r"Number of accepted tokens: (\d+)", "v0_drafted": r"Number of draft tokens: (\d+)",
            "emitted": r"Number of emitted tokens: (\d+)"}
_VL_POS = re.compile(r"Per-position acceptance rate: ([0-9.]+(?:, [0-9.]+)*)")
_VL_THR = re.compile(r"Avg generation throughput: ([\d.]+) tokens/s(?:, Running: (\d+) reqs)?")


def _vllm_line(line: str) -> dict | None:
    """One ``SpecDecoding metrics:`` / ``Speculative metrics:`` line -> numbers (None if truncated)."""
    d = {k: _num(m.group(1)) for k, rx in _VL_NUMS.items() if (m := re.search(rx, line))}
    m = _VL_POS.search(line)
    if m:
        d["pos"] = [float(x) for x in m.group(1).split(", ")]
    if "Speculative metrics:" in line and "v0_drafted" in d:
        d.update(accepted=d.pop("v0_accepted", None), drafted=d.pop("v0_drafted"))
        return d if d["accepted"] is not None and ("k" not in d or "emitted" in d) else None
    if "accepted" not in d or "drafted" not in d:
        return None
    if "Accepted throughput" in line and ("pos" not in d or "Avg Draft acceptance rate" not in line):
        return None  # current format, cut before its end
    return d


def parse_vllm_log(source: str | Path, *, text: str | None = None, series: str = "", hardware: str = "",
                   engine_version: str = "", num_speculative_tokens: int | None = None) -> ParseResult:
    """vLLM log -> one record per run from ``SpecDecoding metrics:`` (all formats) and throughput lines."""
    scan = LogScan(str(source), text)
    used, k_given = 0, num_speculative_tokens
    for n, line, when in scan.clean_lines():
        m = _MARKER.match(line)
        if m:
            scan.boundary(label=m.group(1))
        elif "Initializing a V1 LLM engine" in line or "Initializing an LLM engine" in line or "vllm serve" in line:
            ver = re.search(r"\(v([\w.+-]+)\)", line)
            k = re.search(r"num_spec(?:ulative)?_tokens['\"]?[=:]\s*(\d+)", line)
            scan.boundary(settings={"k": int(k.group(1))} if k else {}, version=ver.group(1) if ver else "")
        elif "SpecDecoding metrics:" in line or "Speculative metrics:" in line:
            try:
                d = _vllm_line(line)
            except ValueError:                 # a malformed number (e.g. '2.8.0')
                d = None
            if d is None:
                scan.bad_line(n, "truncated or malformed spec-decode metrics line")
            elif d["drafted"]:
                scan.segs[-1].items.append((n, when, d))
                used += 1
        elif (m := _VL_THR.search(line)) and float(m.group(1)) > 0:
            scan.segs[-1].items.append((n, when, {"gen": float(m.group(1)), "running": _num(m.group(2) or "")}))
            used += 1
    series = series or Path(str(source)).stem
    return scan.build_result(lambda seg: any("drafted" in d for _, _, d in seg.items),
                       lambda seg, i: _vllm_record(scan, seg, i, k_given, series, hardware, engine_version), used,
                       "no vLLM speculative-decoding metrics found",
                       expected="'SpecDecoding metrics: ... Accepted: N tokens, Drafted: M tokens ...' or "
                       "'Speculative metrics: ...' lines with drafted tokens > 0",
                       cause="speculation off, --disable-log-stats, or an idle server")


def _vllm_record(scan, seg, idx, k_given, series, hardware, version) -> RunRecord | None:
    spec = [d for _, _, d in seg.items if "drafted" in d]
    thr = [d for _, _, d in seg.items if "gen" in d]
    k = k_given or seg.settings.get("k") or next((d.get("k") or len(d.get("pos", [])) for d in spec
                                                  if d.get("k") or d.get("pos")), None)
    notes = list(seg.notes)
    if "emitted" in spec[0]:  # vLLM V0: counters are cumulative since start -> difference of last and first
        first, last, cum = spec[0], spec[-1], len(spec) > 1
        acc, dra, emi = (last[key] - (first[key] if cum else 0) for key in ("accepted", "drafted", "emitted"))
        rounds = dra // k if k and dra else None
        tau = emi / rounds if rounds else None
        notes.append("vLLM V0 cumulative counters" + (" (difference of first and last line)" if cum else ""))
        pos = None
    else:
        acc, dra = sum(d["accepted"] for d in spec), sum(d["drafted"] for d in spec)
        rounds = dra // k if k else None
        tau = 1 + acc / rounds if rounds else None
        pos_lines = [d for d in spec if d.get("pos")]
        pos = None
        if pos_lines and k and all(len(d["pos"]) == k for d in pos_lines):
            w = [d["drafted"] / k for d in pos_lines]  # per-line rates are per draft round
            pos = [sum(d["pos"][i] * wi for d, wi in zip(pos_lines, w)) / sum(w) for i in range(k)]
        means = [d for d in spec if "mean_len" in d]
        if means and rounds:
            m0 = means[0]
            per_line = m0["accepted"] / (m0["drafted"] / k)
            incl = abs(m0["mean_len"] - (1 + per_line)) < abs(m0["mean_len"] - per_line)
            notes.append("engine 'Mean acceptance length' " + ("includes the bonus token" if incl else
                         "EXCLUDES the bonus token (vLLM 2025-04-24..05-09); tau recomputed from counters"))
    if rounds is None:
        notes.append("num_speculative_tokens unknown: tau not recomputed (pass num_speculative_tokens=)")
    gens = [d["gen"] for d in thr]
    running = [d["running"] for d in thr if d.get("running")]
    return scan.make(idx, seg, engine="vllm", engine_version=seg.version or version,
                     tok_s=statistics.median(gens) if gens else None, accept_length=tau, num_steps=k,
                     topk=1 if k else None, num_draft_tokens=k + 1 if k else None,
                     batch_size=int(statistics.median(running)) if running else None, per_position=pos,
                     drafted=dra, accepted=acc, rounds=rounds, accept_rate=acc / dra if dra else None,
                     accept_rate_definition="accepted/drafted (recomputed from counters)", hardware=hardware,
                     series=series, label=seg.label or f"run {idx}: K={k}", notes="; ".join(notes))

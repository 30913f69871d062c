"""Parsers from SGLang / vLLM logs, /server_info, benchmark JSON and Prometheus text into ``RunRecord``s.

Each returns a ``ParseResult`` (records + lines used + bad lines with reasons + warnings); nothing readable at
all raises ``LogParseError`` naming the file and what was looked for. tau is recomputed from raw counters where
they exist; a printed "accept rate" is kept with the formula it matched. Logs split into runs at launch lines
(``server_args=ServerArgs(...)``, ``sglang.launch_server`` / ``vllm serve``, vLLM engine init) and ``# run: <label>``.
"""
from __future__ import annotations

import json
import re
import statistics
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from .errors import DataError, LogParseError, MissingFileError
from .records import FIELDS, RunRecord, from_dict

MAX_BAD_SHOWN = 10
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)")
_MARKER = re.compile(r"^\s*#+\s*run:\s*(.*?)\s*$")
_KV = re.compile(r"(\w+)=('(?:[^'\\]|\\.)*'|\"[^\"]*\"|[^,()\s]+)")
_FLAG = re.compile(r"--([a-z][\w-]*)[ =]('[^']*'|\"[^\"]*\"|\S+)")
_SG_DECODE = re.compile(r"Decode batch(?: \[\d+\])?[.,]\s+(#running-req.*)$")
_SG_RATE_DEFS = {  # SGLang's logged `accept rate` by period (serving-and-throughput.md A.2)
    "tau/num_steps (2025-10-13 #11441)": lambda t, s, n: t / s if s else None,
    "tau/(num_steps+1) (v0.5.3.post2-v0.5.5.post2)": lambda t, s, n: t / (s + 1) if s is not None else None,
    "tau/num_draft_tokens (v0.5.5.post3-~v0.5.10)": lambda t, s, n: t / n if n else None,
    "(tau-1)/(num_draft_tokens-1) (2026-04-28 onwards)": lambda t, s, n: (t - 1) / (n - 1) if n and n > 1 else None,
}
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


class _Scan:
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

    def finish(self, keep, build, used: int, problem: str, expected: str, cause: str) -> ParseResult:
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


_SG_NAMES = {"speculative_algorithm": "algorithm", "speculative_num_steps": "num_steps",
             "speculative_eagle_topk": "topk", "speculative_num_draft_tokens": "num_draft_tokens"}


def _int_or_none(v):
    return None if v in (None, "None", "null", "") else int(v)


def _sg_settings(raw: dict) -> dict:
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
    scan = _Scan(str(source), text)
    used = 0
    for n, line, when in scan.clean_lines():
        m = _MARKER.match(line)
        comment = line.lstrip().startswith("#")
        if m:
            scan.boundary(label=m.group(1))
        elif "server_args=ServerArgs(" in line and not comment:
            scan.boundary(settings=_sg_settings(_settings_from_kv(line, _SG_NAMES)))
        elif "sglang.launch_server" in line or re.search(r"\bsglang serve\b", line):
            scan.boundary(requested=_sg_settings(_settings_from_kv(line, _SG_NAMES)))
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
    return scan.finish(lambda seg: seg.items,
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
    scan = _Scan(str(source), text)
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
            d = _vllm_line(line)
            if d is None:
                scan.bad_line(n, "truncated or malformed spec-decode metrics line")
            elif d["drafted"]:
                scan.segs[-1].items.append((n, when, d))
                used += 1
        elif (m := _VL_THR.search(line)) and float(m.group(1)) > 0:
            scan.segs[-1].items.append((n, when, {"gen": float(m.group(1)), "running": _num(m.group(2) or "")}))
            used += 1
    series = series or Path(str(source)).stem
    return scan.finish(lambda seg: any("drafted" in d for _, _, d in seg.items),
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


def _sg_info_record(obj: dict, where: str, series: str, hardware: str) -> tuple[RunRecord, list[str]]:
    """SGLang ``/server_info`` dict -> record (lifetime accept length, last window's throughput)."""
    st = _sg_settings({dst: obj[src] for src, dst in _SG_NAMES.items() if src in obj})
    states = [s for s in obj.get("internal_states") or [] if isinstance(s, dict)]
    taus = [s["avg_spec_accept_length"] for s in states if s.get("avg_spec_accept_length")]
    if not taus and obj.get("avg_spec_accept_length"):
        taus = [obj["avg_spec_accept_length"]]  # older servers put it at the top level
    thr = [s["last_gen_throughput"] for s in states if s.get("last_gen_throughput")]
    warn = []
    if st.get("num_steps") and not taus:
        warn.append(f"{where}: speculation on but no avg_spec_accept_length (fewer than 40 decode iterations "
                    "since start or reset?)")
    for key in ("speculative_accept_threshold_single", "speculative_accept_threshold_acc"):
        if isinstance(obj.get(key), (int, float)) and obj[key] < 1:
            warn.append(f"{where}: {key}={obj[key]} < 1 makes verification lossy and inflates acceptance")
    rec = RunRecord(
        engine="sglang", engine_version=str(obj.get("version", "")), accept_length=statistics.mean(taus) if taus
        else None, tok_s=sum(thr) if thr else None, hardware=hardware, series=series, source=where,
        label=f"server_info {' '.join(f'{k}={v}' for k, v in st.items())}", **st,
        notes="avg_spec_accept_length is a lifetime average (includes warm-up, only completed 40-iteration "
              "windows); tok/s is last_gen_throughput of the last window")
    return rec, warn


def _bench_record(obj: dict, where: str, series: str, hardware: str, settings: dict) -> tuple[RunRecord, list]:
    """One bench_speculative / bench_one_batch_server / bench_serving / vllm bench serve result -> record."""
    warn, st = [], dict(settings)
    if {"steps", "topk", "acc_length", "speed"} <= set(obj):  # sglang scripts/playground/bench_speculative.py
        steps, topk, ndt = obj["steps"], obj["topk"], obj["num_draft_tokens"]
        note = "speed is tokens/s per request (1 / p20 step time x acc_length)"
        if steps and topk == 1 and ndt != steps + 1:
            note += f"; requested num_draft_tokens={ndt}, SGLang runs num_steps+1={steps + 1} when topk == 1"
            ndt = steps + 1
        st = {"num_steps": 0} if not steps else {"num_steps": steps, "topk": topk, "num_draft_tokens": ndt}
        return RunRecord(engine="sglang", tok_s=obj["speed"], tok_s_scope="per_request", batch_size=obj["batch_size"],
                         accept_length=obj["acc_length"] if steps else None, source=where, series=series,
                         hardware=hardware, label=f"bench_speculative bs={obj['batch_size']} steps={steps}",
                         notes=note, **st), warn
    if any(k.startswith("spec_decode_") for k in obj):  # vllm bench serve --save-result
        pos = obj.get("spec_decode_per_position_acceptance_rates")
        if pos and max(pos) > 1:
            pos = [p / 100 for p in pos]
            warn.append(f"{where}: per-position acceptance given in percent; converted to fractions")
        drafts, dtoks, acc = (obj.get(f"spec_decode_{k}") for k in ("num_drafts", "draft_tokens", "accepted_tokens"))
        k = len(pos) if pos else (round(dtoks / drafts) if drafts and dtoks else None)
        st = {"num_steps": k, "topk": 1, "num_draft_tokens": k + 1} if k else st
        tau = 1 + acc / drafts if drafts and acc is not None else obj.get("spec_decode_acceptance_length")
        return RunRecord(engine="vllm", tok_s=obj.get("output_throughput"), batch_size=obj.get("max_concurrency"),
                         accept_length=tau, per_position=pos, drafted=dtoks, accepted=acc, rounds=drafts,
                         source=where, series=series, hardware=hardware, label="vllm bench serve",
                         notes="counters are /metrics deltas over the run (warm-up excluded)", **st), warn
    if "last_gen_throughput" in obj or "run_name" in obj:  # sglang bench_one_batch_server --result-filename
        acc = obj.get("acc_length")
        acc = None if acc is None or acc < 1 else acc  # -1: the backend does not expose it
        return RunRecord(engine="sglang", tok_s=obj.get("last_gen_throughput") or obj.get("output_throughput"),
                         batch_size=obj.get("batch_size"), accept_length=acc, source=where, series=series,
                         hardware=hardware, label=f"bench_one_batch_server bs={obj.get('batch_size')}",
                         notes="acc_length comes from /server_info (lifetime average); tok/s = last_gen_throughput",
                         **st), warn
    if "output_throughput" in obj:  # sglang bench_serving --output-file
        conc = obj.get("max_concurrency")
        return RunRecord(engine=str(obj.get("backend") or "sglang"), tok_s=obj["output_throughput"],
                         batch_size=conc, accept_length=obj.get("accept_length"), source=where, series=series,
                         hardware=hardware, label=f"bench_serving concurrency={conc}",
                         notes="accept_length is /server_info's lifetime average (includes warm-up and earlier "
                               "runs)", **st), warn
    raise LogParseError(where, "unrecognised JSON object", expected="a RunRecord, /server_info, or bench JSON",
                        found=sorted(obj)[:12])


def parse_json(source: str | Path, *, text: str | None = None, series: str = "", hardware: str = "",
               settings: dict | None = None) -> ParseResult:
    """JSON / JSON-lines: RunRecords, SGLang /server_info, bench_serving, bench_one_batch_server, vllm bench."""
    scan = _Scan(str(source), text)
    body = "\n".join(scan.lines).strip()
    try:
        objs = [(1, json.loads(body))] if body.startswith(("{", "[")) else None
    except json.JSONDecodeError:
        objs = None  # JSON lines, or a broken file: go line by line
    if objs and isinstance(objs[0][1], list):
        objs = [(1, o) for o in objs[0][1]]
    if objs is None:
        objs = []
        for n, line, _ in scan.clean_lines():
            if line.strip():
                try:
                    objs.append((n, json.loads(line)))
                except json.JSONDecodeError:
                    scan.bad_line(n, "not valid JSON (truncated?)")
    series = series or Path(str(source)).stem
    records = []
    for n, obj in objs:
        where = f"{source}:{n}"
        try:
            if not isinstance(obj, dict):
                raise LogParseError(where, "not a JSON object", expected="{...}", found=type(obj).__name__)
            if "engine" in obj and set(obj) <= set(FIELDS):
                rec, warn = from_dict(obj, where), []
            elif {"internal_states", "speculative_algorithm", "avg_spec_accept_length"} & set(obj):
                rec, warn = _sg_info_record(obj, where, series, hardware)
            else:
                rec, warn = _bench_record(obj, where, series, hardware, settings or {})
        except (LogParseError, DataError, KeyError, TypeError) as e:
            scan.bad_line(n, str(e)[:160])
            continue
        records.append(rec)
        scan.warnings.extend(warn)
    if not records:
        raise LogParseError(str(source), "no run could be read from this JSON",
                            expected="RunRecord lines, /server_info, or bench_serving / bench_one_batch_server / "
                            "bench_speculative / vllm bench serve results", found=f"{len(objs)} objects, "
                            f"{scan.n_bad} bad")
    return scan.result(records, len(records))


_PROM = re.compile(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)")


def _prom_values(text: str) -> dict:
    """Prometheus exposition text -> {(name without _total, position label or None): summed value}."""
    out = {}
    for line in text.splitlines():
        m = _PROM.match(line.strip())
        if not m or line.startswith("#"):
            continue
        name, labels = re.sub(r"_total$", "", m.group(1)), m.group(2) or ""
        pos = re.search(r'position="(\d+)"', labels)
        try:
            key = (name, int(pos.group(1)) if pos else None)
            out[key] = out.get(key, 0.0) + float(m.group(3))
        except ValueError:
            continue
    return out


def parse_prometheus(source: str | Path, *, text: str | None = None, before: str | None = None, series: str = "",
                     hardware: str = "", tok_s: float | None = None) -> ParseResult:
    """vLLM ``vllm:spec_decode_*`` counters (delta against `before` text when given) or SGLang spec gauges."""
    scan = _Scan(str(source), text)
    now, then = _prom_values("\n".join(scan.lines)), _prom_values(before or "")
    val = {key: v - then.get(key, 0.0) for key, v in now.items()}
    drafts = val.get(("vllm:spec_decode_num_drafts", None))
    series = series or Path(str(source)).stem
    note = "delta of two scrapes" if before else "lifetime counters since server start (include warm-up)"
    if drafts:
        dtok = val.get(("vllm:spec_decode_num_draft_tokens", None))
        acc = val.get(("vllm:spec_decode_num_accepted_tokens", None), 0.0)
        per = sorted((p, v) for (n, p), v in val.items() if n == "vllm:spec_decode_num_accepted_tokens_per_pos")
        k = len(per) or (round(dtok / drafts) if dtok else None)
        rec = RunRecord(engine="vllm", tok_s=tok_s, accept_length=1 + acc / drafts, num_steps=k,
                        topk=1 if k else None, num_draft_tokens=k + 1 if k else None,
                        per_position=[v / drafts for _, v in per] or None,
                        rounds=int(drafts), drafted=int(dtok) if dtok else None, accepted=int(acc), series=series,
                        hardware=hardware, source=str(source), label="vllm /metrics", notes=note)
    elif ("sglang:spec_accept_length", None) in now:
        g = {n: v for (n, p), v in now.items() if p is None}
        steps = g.get("sglang:spec_num_steps")
        rec = RunRecord(engine="sglang", tok_s=tok_s or g.get("sglang:gen_throughput"),
                        accept_length=g["sglang:spec_accept_length"] or None,
                        num_steps=int(steps) if steps else None,
                        batch_size=int(g.get("sglang:num_running_reqs", 0)) or None,
                        series=series, hardware=hardware, source=str(source), label="sglang /metrics",
                        notes="gauges hold the last decode-log window only")
    else:
        raise LogParseError(str(source), "no speculative-decoding metrics in this Prometheus text",
                            expected="vllm:spec_decode_num_drafts[_total] etc. or sglang:spec_accept_length",
                            found=f"{len(now)} samples", cause="speculation off, or --enable-metrics not set (SGLang)")
    return scan.result([rec], len(scan.lines))


def parse_file(path: str | Path, **kw) -> ParseResult:
    """Any supported file, recognised by content: JSON, Prometheus text, vLLM log or SGLang log."""
    p = Path(path)
    if not p.is_file():
        raise MissingFileError(str(p), "file not found", expected="a log, JSON or metrics file", found="nothing")
    head = p.read_bytes()[:200_000].decode("utf-8", errors="replace")
    if head.lstrip().startswith(("{", "[")):
        return parse_json(p, **kw)
    if re.search(r"^(vllm|sglang):\w+", head, re.M) or head.lstrip().startswith("# HELP"):
        return parse_prometheus(p, **kw)
    if re.search(r"SpecDecoding metrics:|Speculative metrics:|Avg generation throughput", head):
        return parse_vllm_log(p, **kw)
    return parse_sglang_log(p, **kw)


def read_server(url: str, timeout: float = 5.0, **kw) -> ParseResult:
    """A live server: SGLang ``/server_info`` (or ``/get_server_info``), else vLLM ``/metrics``."""
    base, errors = url.rstrip("/"), []
    for path in ("/server_info", "/get_server_info", "/metrics"):
        try:
            with urllib.request.urlopen(base + path, timeout=timeout) as resp:
                body = resp.read().decode("utf-8", errors="replace")
        except (urllib.error.URLError, OSError, ValueError) as e:
            errors.append(f"{path}: {e}")
            continue
        if path == "/metrics":
            return parse_prometheus(base + path, text=body, **kw)
        return parse_json(base + path, text=body, **kw)
    raise LogParseError(base, "server did not answer", expected="/server_info (SGLang) or /metrics (vLLM)",
                        found="; ".join(errors), cause="wrong URL/port, or the server is not up")

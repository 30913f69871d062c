"""SGLang's decode log read into `RunRecord`s (``Decode batch`` lines, every historical variant; the
``server_args=ServerArgs(...)`` line; the launch line), its Prometheus gauges, and its own JSON outputs
(``/server_info``, bench_speculative, bench_one_batch_server).
    parse_sglang_log("server.log").records[0].accept_length
"""
from __future__ import annotations

import re
import statistics
from pathlib import Path

from ..engine_kit.log_scan import LogScan, ParseResult, RUN_MARKER, parse_call_kwargs, settings_from_kv
from ..engine_kit.records import RunRecord
from .resolver import accept_rate_versions

_SG_DECODE = re.compile(r"Decode batch(?: \[\d+\])?[.,]\s+(#running-req.*)$")
# every `accept rate` formula SGLang ever logged, labelled with its versions (one table: sglang_engine.resolver)
_SG_RATE_DEFS = {f"{f.name} ({versions})": f.fn for versions, f in accept_rate_versions()}
_UNIT_SCALE = {"token/s": 1.0, "tokens/s": 1.0, "tok/s": 1.0, "token/ms": 1000.0, "tokens/ms": 1000.0}
RUN_LOG_MARK = r"Decode batch|server_args=ServerArgs\("   # how parse_file knows an SGLang decode log

SERVER_ARGS_MARK = "server_args=ServerArgs("


def server_args_from_line(line: str) -> dict | None:
    """The fields of SGLang's startup ``server_args=ServerArgs(...)`` log line (None when `line` is not one)."""
    at = line.find(SERVER_ARGS_MARK)
    return None if at < 0 else parse_call_kwargs(line[at + len(SERVER_ARGS_MARK) - 1:])


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
        m = RUN_MARKER.match(line)
        comment = line.lstrip().startswith("#")
        if m:
            scan.boundary(label=m.group(1))
        elif SERVER_ARGS_MARK in line and not comment:
            kwargs = server_args_from_line(line)
            try:
                effective = sglang_settings({dst: kwargs[src] for src, dst in SGLANG_FIELD_NAMES.items()
                                             if src in kwargs})
            except ValueError as e:
                scan.bad_line(n, f"server_args line with an unreadable speculative setting ({e})")
                effective = {}
            scan.boundary(settings=effective)
        elif "sglang.launch_server" in line or re.search(r"\bsglang serve\b", line):
            try:
                requested = sglang_settings(settings_from_kv(line, SGLANG_FIELD_NAMES))
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


# HOME.metrics_mark and .metrics_named
METRICS_MARK, METRICS_NAMED = r"sglang:\w+", "sglang:spec_accept_length"


def metrics_record(now: dict, delta: dict, *, source: str, note: str, series: str, hardware: str,
                   tok_s: float | None, warnings: list) -> RunRecord | None:
    """SGLang's ``sglang:spec_*`` gauges (the last decode-log window) as a record; None when absent."""
    if ("sglang:spec_accept_length", None) not in now:
        return None
    g = {n: v for (n, p), v in now.items() if p is None}
    steps = g.get("sglang:spec_num_steps")
    return RunRecord(engine="sglang", tok_s=tok_s or g.get("sglang:gen_throughput"),
                     accept_length=g["sglang:spec_accept_length"] or None,
                     num_steps=int(steps) if steps else None,
                     batch_size=int(g.get("sglang:num_running_reqs", 0)) or None,
                     series=series, hardware=hardware, source=str(source), label="sglang /metrics",
                     notes="gauges hold the last decode-log window only")


def bench_record(obj: dict, where: str, series: str, hardware: str, settings: dict) -> tuple[RunRecord, list] | None:
    """One of SGLang's own JSON outputs -> (record, warnings): its ``/server_info``, a bench_speculative or a
    bench_one_batch_server result (`HOME.bench_record`); None when `obj` is none of them (`settings`: the launch's,
    for the results that do not carry them)."""
    if {"internal_states", "speculative_algorithm", "avg_spec_accept_length"} & set(obj):
        return _server_info_record(obj, where, series, hardware)
    st = dict(settings)
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
                         notes=note, **st), []
    if "last_gen_throughput" in obj or "run_name" in obj:  # sglang bench_one_batch_server --result-filename
        acc = obj.get("acc_length")
        acc = None if acc is None or acc < 1 else acc  # -1: the backend does not expose it
        return RunRecord(engine="sglang", tok_s=obj.get("last_gen_throughput") or obj.get("output_throughput"),
                         batch_size=obj.get("batch_size"), accept_length=acc, source=where, series=series,
                         hardware=hardware, label=f"bench_one_batch_server bs={obj.get('batch_size')}",
                         notes="acc_length comes from /server_info (lifetime average); tok/s = last_gen_throughput",
                         **st), []
    return None


def _server_info_record(obj: dict, where: str, series: str, hardware: str) -> tuple[RunRecord, list[str]]:
    """SGLang ``/server_info`` dict -> record (lifetime accept length, last window's throughput)."""
    st = sglang_settings({dst: obj[src] for src, dst in SGLANG_FIELD_NAMES.items() if src in obj})
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

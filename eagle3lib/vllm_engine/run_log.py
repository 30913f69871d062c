"""vLLM's decode log read into `RunRecord`s (``SpecDecoding metrics:`` lines of every format, the V0
``Speculative metrics:`` counters, throughput lines), its Prometheus counters and its ``vllm bench serve`` result.
    parse_vllm_log("server.log", num_speculative_tokens=3).records[0].accept_length
"""
from __future__ import annotations

import re
import statistics
from pathlib import Path

from ..engine_kit.log_scan import LogScan, ParseResult, RUN_MARKER, logged_number
from ..engine_kit.records import RunRecord

RUN_LOG_MARK = r"SpecDecoding metrics:|Speculative metrics:|Avg generation throughput"   # parse_file's test
# what its logged accept metrics mean, by version (metric, formula, versions, note; serving-and-throughput.md B.2)
ACCEPT_METRICS = (
    ("Mean acceptance length", "1 + accepted / num_drafts", "≥ 2025-05-09 #17908",
     "2025-04-24 – 05-09 it left out the bonus token"),
    ("Avg Draft acceptance rate", "accepted / drafted = (τ − 1) / K", "all", "not Leviathan's α"),
    ("Per-position acceptance rate[i]", "accepted at position i / num_drafts", "≥ 2025-04-24 #16665",
     "unconditional, non-increasing; τ = 1 + Σ rate_i"),
)

_VL_NUMS = {"mean_len": r"Mean acceptance length: ([\d.]+)", "accepted": r"Accepted: (\d+) tokens",
            "drafted": r"Drafted: (\d+) tokens", "k": r"Number of speculative tokens: (\d+)",
            "v0_accepted": r"Number of accepted tokens: (\d+)", "v0_drafted": r"Number of draft tokens: (\d+)",
            "emitted": r"Number of emitted tokens: (\d+)"}
_VL_POS = re.compile(r"Per-position acceptance rate: ([0-9.]+(?:, [0-9.]+)*)")
_VL_THR = re.compile(r"Avg generation throughput: ([\d.]+) tokens/s(?:, Running: (\d+) reqs)?")


def _vllm_line(line: str) -> dict | None:
    """One ``SpecDecoding metrics:`` / ``Speculative metrics:`` line -> numbers (None if truncated)."""
    d = {k: logged_number(m.group(1)) for k, rx in _VL_NUMS.items() if (m := re.search(rx, line))}
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
        m = RUN_MARKER.match(line)
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
            running = logged_number(m.group(2) or "")
            scan.segs[-1].items.append((n, when, {"gen": float(m.group(1)), "running": running}))
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


# HOME.metrics_mark and .metrics_named
METRICS_MARK, METRICS_NAMED = r"vllm:\w+", "vllm:spec_decode_num_drafts[_total] etc."


def metrics_record(now: dict, delta: dict, *, source: str, note: str, series: str, hardware: str,
                   tok_s: float | None, warnings: list) -> RunRecord | None:
    """vLLM's ``vllm:spec_decode_*`` counters (`delta`: against an earlier scrape when one was given) as a record;
    None when no draft round was counted."""
    val = delta
    drafts = val.get(("vllm:spec_decode_num_drafts", None))
    if not drafts:
        return None
    dtok = val.get(("vllm:spec_decode_num_draft_tokens", None))
    acc = val.get(("vllm:spec_decode_num_accepted_tokens", None), 0.0)
    per_all = [(p, v) for (n, p), v in val.items() if n == "vllm:spec_decode_num_accepted_tokens_per_pos"]
    per = sorted((p, v) for p, v in per_all if p is not None)
    if len(per) < len(per_all):
        warnings.append("a vllm:spec_decode_num_accepted_tokens_per_pos sample without a position label "
                        "was ignored")
    k = len(per) or (round(dtok / drafts) if dtok else None)
    return RunRecord(engine="vllm", tok_s=tok_s, accept_length=1 + acc / drafts, num_steps=k,
                     topk=1 if k else None, num_draft_tokens=k + 1 if k else None,
                     per_position=[v / drafts for _, v in per] or None,
                     rounds=int(drafts), drafted=int(dtok) if dtok else None, accepted=int(acc), series=series,
                     hardware=hardware, source=str(source), label="vllm /metrics", notes=note)


def bench_record(obj: dict, where: str, series: str, hardware: str, settings: dict) -> tuple[RunRecord, list] | None:
    """A ``vllm bench serve --save-result`` result -> (record, warnings) (`HOME.bench_record`); None when `obj` is not
    one (no ``spec_decode_*`` counters)."""
    if not any(k.startswith("spec_decode_") for k in obj):
        return None
    warn, pos = [], obj.get("spec_decode_per_position_acceptance_rates")
    if pos and max(pos) > 1:
        pos = [p / 100 for p in pos]
        warn.append(f"{where}: per-position acceptance given in percent; converted to fractions")
    drafts, dtoks, acc = (obj.get(f"spec_decode_{k}") for k in ("num_drafts", "draft_tokens", "accepted_tokens"))
    k = len(pos) if pos else (round(dtoks / drafts) if drafts and dtoks else None)
    st = {"num_steps": k, "topk": 1, "num_draft_tokens": k + 1} if k else dict(settings)
    tau = 1 + acc / drafts if drafts and acc is not None else obj.get("spec_decode_acceptance_length")
    return RunRecord(engine="vllm", tok_s=obj.get("output_throughput"), batch_size=obj.get("max_concurrency"),
                     accept_length=tau, per_position=pos, drafted=dtoks, accepted=acc, rounds=drafts,
                     source=where, series=series, hardware=hardware, label="vllm bench serve",
                     notes="counters are /metrics deltas over the run (warm-up excluded)", **st), warn

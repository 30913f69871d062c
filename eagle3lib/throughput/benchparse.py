"""Parsers for structured run outputs into ``RunRecord``s: JSON (RunRecords; an engine's own outputs, read by its
home: `EngineHome.bench_record`, SGLang's /server_info and bench scripts, vLLM's bench serve; bench_serving, whose
backend is any engine), Prometheus text (`EngineHome.metrics`); `parse_file` picks a parser by content (an engine's
decode log is read by its home: `EngineHome.run_log`) and `read_server` asks a live server.
"""
from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from pathlib import Path

from ..errors import DataError, LogParseError, MissingFileError
from ..once import file_text, kept_by_file
from ..engine_kit.log_scan import LogScan, ParseResult, prometheus_values
from ..serving.homes import homes
from ..engine_kit.records import FIELDS, RunRecord, from_dict


def _bench_record(obj: dict, where: str, series: str, hardware: str, settings: dict) -> tuple[RunRecord, list]:
    """One benchmark or server JSON object -> record: an engine's own output, read by its home
    (`EngineHome.bench_record`, asked in the list's order), else SGLang's bench_serving result, which names the backend
    it measured (any engine)."""
    for found in homes().values():
        got = found.bench_record(obj, where, series, hardware, settings) if found.bench_record else None
        if got is not None:
            return got
    st = dict(settings)
    if "output_throughput" in obj:  # sglang bench_serving --output-file
        conc = obj.get("max_concurrency")
        return RunRecord(engine=str(obj.get("backend") or "sglang"), tok_s=obj["output_throughput"],
                         batch_size=conc, accept_length=obj.get("accept_length"), source=where, series=series,
                         hardware=hardware, label=f"bench_serving concurrency={conc}",
                         notes="accept_length is /server_info's lifetime average (includes warm-up and earlier "
                               "runs)", **st), []
    raise LogParseError(where, "unrecognised JSON object", expected="a RunRecord, /server_info, or bench JSON",
                        found=sorted(obj)[:12])


def parse_json(source: str | Path, *, text: str | None = None, series: str = "", hardware: str = "",
               settings: dict | None = None) -> ParseResult:
    """JSON / JSON-lines: RunRecords, SGLang /server_info, bench_serving, bench_one_batch_server, vllm bench."""
    scan = LogScan(str(source), text)
    body = "\n".join(scan.lines).strip()
    try:
        objs = [(1, json.loads(body))] if body.startswith(("{", "[")) else None
    except (json.JSONDecodeError, RecursionError):
        objs = None  # JSON lines, or a broken (or absurdly nested) file: go line by line
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
                except RecursionError:
                    scan.bad_line(n, "JSON nested too deeply to read")
    series = series or Path(str(source)).stem
    records = []
    for n, obj in objs:
        where = f"{source}:{n}"
        try:
            if not isinstance(obj, dict):
                raise LogParseError(where, "not a JSON object", expected="{...}", found=type(obj).__name__)
            if "engine" in obj and set(obj) <= set(FIELDS):
                rec, warn = from_dict(obj, where), []
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


def parse_prometheus(source: str | Path, *, text: str | None = None, before: str | None = None, series: str = "",
                     hardware: str = "", tok_s: float | None = None) -> ParseResult:
    """vLLM ``vllm:spec_decode_*`` counters (delta against `before` text when given) or SGLang spec gauges."""
    scan = LogScan(str(source), text)
    now, then = prometheus_values(scan.lines, scan), prometheus_values((before or "").splitlines())
    val = {key: v - then.get(key, 0.0) for key, v in now.items()}
    series = series or Path(str(source)).stem
    note = "delta of two scrapes" if before else "lifetime counters since server start (include warm-up)"
    for found in homes().values():
        rec = found.metrics(now, val, source=str(source), note=note, series=series, hardware=hardware, tok_s=tok_s,
                            warnings=scan.warnings) if found.metrics else None
        if rec is not None:
            return scan.result([rec], len(scan.lines))
    raise LogParseError(str(source), "no speculative-decoding metrics in this Prometheus text",
                        expected=" or ".join(h.metrics_named for h in homes().values() if h.metrics_named),
                        found=f"{len(now)} samples", cause="speculation off, or --enable-metrics not set (SGLang)")


def parse_file(path: str | Path, **kw) -> ParseResult:
    """Any supported file, recognised by content: JSON, Prometheus text, vLLM log or SGLang log; read and parsed once
    per case (`once`) for the same options."""
    p = Path(path)
    if not p.is_file():
        raise MissingFileError(str(p), "file not found", expected="a log, JSON or metrics file", found="nothing")
    return kept_by_file("run file", p, lambda: _parse_file(p, **kw), repr(sorted(kw.items())), copied=True)


def _parse_file(p: Path, **kw) -> ParseResult:
    head = file_text(p)[:200_000]
    body = head.lstrip()
    if body.startswith("{") or re.match(r"\[\s*[\[{\"\]]", body):   # JSON, JSONL or a JSON array; a log's "[2026-.."
        return parse_json(p, **kw)
    known = homes()
    marks = "|".join(f"(?:{h.metrics_mark})" for h in known.values() if h.metrics_mark)
    if (marks and re.search(f"^(?:{marks})", head, re.M)) or head.lstrip().startswith("# HELP"):
        return parse_prometheus(p, **kw)
    found = next((h for h in known.values() if re.search(h.run_log_mark, head)), None)
    # a log no engine's mark names is read by the first engine's reader, whose error says what it looked for
    return (found or next(iter(known.values()))).run_log(p, **kw)


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

"""Serve a draft with the real vLLM and measure its accept length: one OpenAI server, one set of prompts, one τ.

`serve(target, draft, out_dir, prompts=...)` starts ``python -m vllm.entrypoints.openai.api_server`` in the vLLM
venv (`vllm_engine.server`), waits for /health (or for the process to die), sends each prompt to /v1/completions
(greedy), waits until the log's ``SpecDecoding metrics`` lines cover every drafted token /metrics counted (vLLM
logs them every ``VLLM_LOG_STATS_INTERVAL`` s, 10 by default; this sets 1), saves /metrics and stops the server.
τ = 1 + accepted / drafts, from /metrics (`run_log.metrics_record`) and from the log (`run_log.parse_vllm_log`);
a server that refused the draft gives ok=False and the engine's own final exception (`vllm_engine.engine_log`).
Out dir: launch.txt, server.log, metrics.txt, prompts.jsonl, responses.jsonl (each answer's text and, with vLLM's
``return_token_ids``, its token ids: the served traffic, `serving.traffic`), served.json.
    run = serve("data/demo/target", "my_draft", "out/served", prompts="data/demo/data/heldout/heldout.jsonl")
CLI: ``python -m eagle3lib.vllm_engine.serve --target T --draft D --prompts FILE --out DIR`` (one JSON line).
"""
from __future__ import annotations

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import EngineError, LogParseError
from ..jsonfiles import atomic_write, to_json_value
from ..engine_kit.prompts import Prompt, read_prompts
from .env import driver_parser
from .server import VllmServer
from .engine_log import read_vllm_log
from ..engine_kit.log_scan import prometheus_values
from .run_log import metrics_record, parse_vllm_log

NATIVE_ROPE = Path(__file__).resolve().parent / "inside" / "native_rope"   # its sitecustomize
STATS_INTERVAL_S = "1"      # VLLM_LOG_STATS_INTERVAL: how often the server logs SpecDecoding metrics (vLLM: 10 s)


@dataclass(frozen=True)
class ServedRun:
    """One real-vLLM serving run: where its files are, whether it served, and the accept length it measured."""

    out_dir: str
    launch_command: str                 # the exact command (launch.txt), parseable by serving.launch.parse_launch
    log: str                            # server.log (always kept)
    metrics: str | None                 # metrics.txt (a /metrics scrape after the prompts), None when it never served
    ok: bool                            # healthy, every prompt answered, metrics read
    error: str | None                   # the engine's final exception (from the log), or why the run stopped
    accept_length: float | None         # τ = 1 + accepted / drafts, from /metrics (bonus token included)
    log_accept_length: float | None     # τ from the log's SpecDecoding metrics lines (same counters, summed)
    per_position: tuple[float, ...] | None   # accepted at position i / drafts, from /metrics
    counters: dict = field(default_factory=dict)   # num_drafts, num_draft_tokens, num_accepted_tokens
    seconds: dict = field(default_factory=dict)    # startup, requests, stats, total
    pid: int | None = None              # the server process this run started (and stopped)
    port: int | None = None
    n_prompts: int = 0
    n_answered: int = 0
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return to_json_value(asdict(self))


def _complete(server: VllmServer, model: str, p: Prompt, max_tokens: int) -> dict:
    body = {"model": model, "prompt": list(p.token_ids) if p.token_ids is not None else p.text,
            "max_tokens": max_tokens, "temperature": 0, "return_token_ids": True}   # the answer as the engine's ids
    t0 = time.monotonic()
    try:
        ans = server.post("/v1/completions", body)
    except (OSError, ValueError) as e:       # refused / reset (the server died mid-request), or not JSON
        ans = {"error": f"{type(e).__name__}: {e}"}
    row = {"id": p.id, "seconds": round(time.monotonic() - t0, 3), "temperature": body["temperature"]}
    if "choices" in ans:
        ch = ans["choices"][0]
        usage = ans.get("usage") or {}
        row.update(text=ch.get("text"), finish_reason=ch.get("finish_reason"),
                   prompt_tokens=usage.get("prompt_tokens"), completion_tokens=usage.get("completion_tokens"))
        if ch.get("token_ids") is not None:             # what verification checked (serving.traffic reads it)
            row["token_ids"] = ch["token_ids"]
    else:
        row["error"] = ans.get("error", ans)
    return row


def _counters(metrics_text: str) -> tuple[float | None, tuple | None, dict]:
    now = prometheus_values(metrics_text.splitlines())
    rec = metrics_record(now, now, source="metrics.txt", note="lifetime counters since server start", series="",
                         hardware="", tok_s=None, warnings=[])
    if rec is None:
        raise LogParseError("/metrics", "no speculative-decoding counters", expected="vllm:spec_decode_num_drafts > 0",
                            found=f"{len(now)} samples", cause="no draft round yet, or speculation off")
    return rec.accept_length, rec.per_position, {"num_drafts": rec.rounds, "num_draft_tokens": rec.drafted,
                                                  "num_accepted_tokens": rec.accepted}


def _log_tau(log: Path, k: int) -> tuple[float | None, int]:
    """τ and drafted tokens summed over the log's SpecDecoding lines (0 when none yet)."""
    try:
        rec = parse_vllm_log(log, num_speculative_tokens=k).records[-1]
    except LogParseError:
        return None, 0
    return rec.accept_length, rec.drafted or 0


def _wait_stats(server: VllmServer, log: Path, k: int, timeout: float) -> tuple[str, float | None, list[str]]:
    """/metrics text once the log's SpecDecoding lines cover every draft token /metrics counted."""
    start, notes = time.monotonic(), []
    while True:
        text = server.get("/metrics")
        try:
            drafted = _counters(text)[2]["num_draft_tokens"] or 0
        except LogParseError:
            drafted = 0
        tau, logged = _log_tau(log, k)
        waited = time.monotonic() - start
        if drafted and logged == drafted:
            return text, tau, notes
        if not drafted and waited > 3 * float(STATS_INTERVAL_S):
            notes.append("no draft tokens were counted (speculation never ran: max_tokens too small?)")
            return text, None, notes
        if waited > timeout:
            notes.append(f"the log's SpecDecoding lines cover {logged} of {drafted} drafted tokens after "
                         f"{timeout:.0f} s")
            return text, tau if logged else None, notes
        time.sleep(0.5)


@dataclass
class _Run:
    """What one serving run gathered so far (internal)."""

    seconds: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    rows: list = field(default_factory=list)
    error: str | None = None
    metrics: str | None = None
    tau: float | None = None
    log_tau: float | None = None
    per_pos: tuple | None = None
    counters: dict = field(default_factory=dict)


def _phases(server: VllmServer, run: _Run, out: Path, todo: list[Prompt], model: str, k: int, max_tokens: int,
            startup_timeout: float, stats_timeout: float, concurrency: int) -> None:
    """Start-up, requests, stats; each phase records its time; the first failure ends the run with its error."""
    log = out / "server.log"
    t0 = time.monotonic()
    healthy = server.wait_healthy(startup_timeout)
    run.seconds["startup"] = round(time.monotonic() - t0, 2)
    if not healthy:
        run.error = (f"the server did not answer /health within {startup_timeout:.0f} s" if server.running() else
                     _engine_error(log) or f"the server exited with code {server.proc.returncode} before /health "
                                           "(no exception in its log)")
        return
    t0 = time.monotonic()
    with ThreadPoolExecutor(max(1, concurrency)) as pool:
        run.rows = list(pool.map(lambda p: _complete(server, model, p, max_tokens), todo))
    run.seconds["requests"] = round(time.monotonic() - t0, 2)
    failed = [r for r in run.rows if "error" in r]
    if not server.running():
        run.error = _engine_error(log) or f"the server exited with code {server.proc.returncode} during the requests"
        return
    if failed:
        run.error = f"{len(failed)} of {len(run.rows)} requests failed: {str(failed[0]['error'])[:300]}"
        if len(failed) == len(run.rows):
            return
    t0 = time.monotonic()
    try:
        text, run.log_tau, more = _wait_stats(server, log, k, stats_timeout)
    except OSError as e:                               # urllib's URLError is an OSError: the server went away
        run.error = _engine_error(log) or f"/metrics could not be read: {e}"
        return
    run.seconds["stats"] = round(time.monotonic() - t0, 2)
    run.notes += more
    atomic_write(out / "metrics.txt", text)
    run.metrics = str(out / "metrics.txt")
    try:
        run.tau, run.per_pos, run.counters = _counters(text)
    except LogParseError as e:
        run.error = run.error or f"/metrics holds no speculative-decoding counters: {e}"


def serve(target, draft, out_dir, *, prompts, num_speculative_tokens: int = 3, method: str = "eagle3",
          speculative_config: dict | None = None, max_tokens: int = 64, max_model_len: int | None = None,
          dtype: str = "float32", startup_timeout: float = 300.0, stats_timeout: float = 60.0,
          port: int | None = None, n: int | None = None, concurrency: int = 8,
          extra_args: tuple[str, ...] = (), native_rope: bool = False, notes: tuple[str, ...] = ()) -> ServedRun:
    """Serve `draft` beside `target` with the real vLLM, send `prompts` (file, dataset or list), measure τ.

    `speculative_config`: extra keys for vLLM's --speculative-config; `n`: at most this many prompts; `concurrency`:
    requests in flight at once; `extra_args`: more server flags; `native_rope`: RoPE through vLLM's own
    forward_native instead of the CPU build's kernel, which mis-rotates MLA layers (vllm_engine/inside/native_rope;
    the launch command and the notes say so); `notes`: more lines for served.json (the route a host took). The
    server is stopped on every exit."""
    t_start = time.monotonic()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    todo = read_prompts(prompts, n)
    atomic_write(out / "prompts.jsonl", "".join(json.dumps(p.to_dict()) + "\n" for p in todo))
    spec = {"method": method, "model": str(draft), "num_speculative_tokens": int(num_speculative_tokens),
            **(speculative_config or {})}
    args = ["--model", str(target), "--dtype", dtype, "--enforce-eager", "--speculative-config", json.dumps(spec)]
    args += ["--max-model-len", str(max_model_len)] if max_model_len else []
    env = {"VLLM_LOG_STATS_INTERVAL": STATS_INTERVAL_S, **({"PYTHONPATH": str(NATIVE_ROPE)} if native_rope else {})}
    server = VllmServer(args + list(extra_args), out / "server.log", port=port, env=env)
    atomic_write(out / "launch.txt", server.command() + "\n")
    run = _Run()
    with server:
        _phases(server, run, out, todo, str(target), int(spec["num_speculative_tokens"]), max_tokens,
                startup_timeout, stats_timeout, concurrency)
    atomic_write(out / "responses.jsonl", "".join(json.dumps(r) + "\n" for r in run.rows))
    run.seconds["total"] = round(time.monotonic() - t_start, 2)
    served = ServedRun(str(out), server.command(), str(out / "server.log"), run.metrics, run.error is None,
                       run.error, run.tau, run.log_tau, run.per_pos, run.counters, run.seconds, server.pid,
                       server.port, len(todo), sum("error" not in r for r in run.rows),
                       tuple(notes) + tuple(run.notes) + (NATIVE_ROPE_NOTE,) * native_rope)
    atomic_write(out / "served.json", json.dumps(served.to_dict(), indent=1) + "\n")
    return served


NATIVE_ROPE_NOTE = ("RoPE through vLLM's forward_native (native_rope=True), not the CPU kernel: a workaround, "
                    "not the engine as deployed")


def _engine_error(log: Path) -> str | None:
    """The engine's own final exception in the log, as one line (None when the log names none)."""
    try:
        reading = read_vllm_log(log)
    except (LogParseError, OSError):
        return None
    err = reading.root_error
    return f"{err.exception}: {err.message} (server.log line {err.line_no})" if err else None


def main(argv: list[str] | None = None) -> int:
    ap = driver_parser("python -m eagle3lib.vllm_engine.serve", __doc__.split("\n")[0], n=32, max_model_len=None)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--native-rope", action="store_true",
                    help="RoPE through vLLM's forward_native (the CPU kernel mis-rotates MLA layers; a workaround)")
    a = ap.parse_args(argv)
    try:
        run = serve(a.target, a.draft, a.out, prompts=a.prompts, num_speculative_tokens=a.k, max_tokens=a.max_tokens,
                    max_model_len=a.max_model_len, n=a.n, dtype=a.dtype, native_rope=a.native_rope)
    except EngineError as e:
        print(json.dumps({"ok": False, "error": str(e)}))
        return 2
    print(json.dumps(run.to_dict()))
    return 0 if run.ok else 1


if __name__ == "__main__":
    sys.exit(main())

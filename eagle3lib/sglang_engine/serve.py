"""Serve a draft with the real SGLang and measure its accept length: one server, one set of prompts, one τ.

`serve(target, draft, out_dir, prompts=...)` starts ``python -m sglang.launch_server`` in the SGLang venv
(`sglang_engine.server`), waits for /health (or for the process to die), sends each prompt to /generate (greedy,
as token ids), reads /server_info (the effective settings after SGLang's own rewrites, and its
``avg_spec_accept_length``) and stops the server. τ is SGLang's own per-request count, summed: generated tokens
over verify rounds (``completion_tokens`` / ``spec_verify_ct`` of each answer's meta_info). The decode log's
``accept len`` lines and /server_info's average are kept beside it.
Out dir: launch.txt, server.log, server_info.json, prompts.jsonl, responses.jsonl (each answer's token ids: the
served traffic, `serving.traffic`; its verify rounds and accept length), served.json; with `hook=True` also
hook/ (events.jsonl and the fc inputs of each prefill: inside/hook/sitecustomize.py), which `sglang_engine.dump`
turns into a dump.
    run = serve("data/demo/target", "data/demo/draft", "out/served", prompts="data/demo/data/heldout", n=32)
CLI: ``python -m eagle3lib.sglang_engine.serve --target T --draft D --prompts FILE --out DIR`` (one JSON line).
"""
from __future__ import annotations

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..engine_kit.prompts import Prompt, read_prompts
from ..engines.engine_errors import log_lines, root_error, scan_errors
from ..errors import EngineError
from ..jsonfiles import atomic_write, to_json_value
from ..once import file_text
from .env import engine_version
from .server import SglangServer, launch_args

SERVER_INFO = "server_info.json"


@dataclass(frozen=True)
class SglangRun:
    """One real-SGLang serving run: where its files are, whether it served, and the accept length it measured."""

    out_dir: str
    launch_command: str                 # the exact command (launch.txt), parseable by serving.launch.parse_launch
    log: str                            # server.log (always kept)
    server_info: str | None             # server_info.json, None when the server never answered
    ok: bool                            # healthy, every prompt answered
    error: str | None                   # the engine's final exception (from the log), or why the run stopped
    accept_length: float | None         # Σ completion_tokens / Σ spec_verify_ct over the answers (SGLang's count)
    server_info_accept_length: float | None   # /server_info internal_states avg_spec_accept_length
    effective: dict = field(default_factory=dict)   # speculative settings as /server_info reports them
    version: str | None = None          # what the SGLang venv reports (a source build: 0.0.0.dev0)
    counters: dict = field(default_factory=dict)    # completion_tokens, verify_rounds
    seconds: dict = field(default_factory=dict)     # startup, requests, total
    pid: int | None = None              # the server process this run started (and stopped)
    port: int | None = None
    hook: str | None = None             # the hook's folder (events.jsonl, calls/) when it ran
    n_prompts: int = 0
    n_answered: int = 0
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return to_json_value(asdict(self))


EFFECTIVE = ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
             "speculative_num_draft_tokens", "dtype", "device", "attention_backend", "context_length")


def _generate(server: SglangServer, p: Prompt, max_tokens: int) -> dict:
    body = {"sampling_params": {"temperature": 0.0, "max_new_tokens": max_tokens}}
    body.update({"input_ids": list(p.token_ids)} if p.token_ids is not None else {"text": p.text})
    t0 = time.monotonic()
    try:
        ans = server.post("/generate", body)
    except (OSError, ValueError) as e:       # refused / reset (the server died mid-request), or not JSON
        ans = {"error": f"{type(e).__name__}: {e}"}
    row = {"id": p.id, "seconds": round(time.monotonic() - t0, 3),
           "temperature": body["sampling_params"]["temperature"]}
    if "meta_info" in ans and "error" not in ans:
        meta = ans["meta_info"]
        fin = meta.get("finish_reason") or {}
        row.update(text=ans.get("text"), finish_reason=fin.get("type") if isinstance(fin, dict) else fin,
                   prompt_tokens=meta.get("prompt_tokens"), completion_tokens=meta.get("completion_tokens"),
                   spec_verify_ct=meta.get("spec_verify_ct"), spec_accept_length=meta.get("spec_accept_length"))
        if ans.get("output_ids") is not None:           # what verification checked (serving.traffic reads it)
            row["token_ids"] = ans["output_ids"]
    else:
        row["error"] = ans.get("error", ans)
    return row


def counted_accept_length(rows: list[dict]) -> tuple[float | None, dict]:
    """SGLang's accept length over answered requests: Σ completion_tokens / Σ spec_verify_ct (each request's own
    ``spec_accept_length`` is its ratio), with the two sums."""
    done = [r for r in rows if "error" not in r and r.get("spec_verify_ct")]
    tokens = sum(int(r["completion_tokens"] or 0) for r in done)
    rounds = sum(int(r["spec_verify_ct"] or 0) for r in done)
    return (tokens / rounds if rounds else None), {"completion_tokens": tokens, "verify_rounds": rounds}


def _server_info(server: SglangServer, out: Path) -> tuple[dict, str | None]:
    try:
        info = json.loads(server.get("/server_info", timeout=30))
    except (OSError, ValueError):
        return {}, None
    atomic_write(out / SERVER_INFO, json.dumps(info, indent=1, default=str) + "\n")
    return info, str(out / SERVER_INFO)


def _info_tau(info: dict) -> float | None:
    states = info.get("internal_states") or []
    vals = [s.get("avg_spec_accept_length") for s in states if isinstance(s, dict)]
    vals = [v for v in vals if isinstance(v, (int, float))]
    return float(vals[0]) if vals else None


def engine_error(log: Path) -> str | None:
    """The engine's own final exception in the log, as one line (None when the log names none)."""
    try:
        lines = log_lines(file_text(log))
    except OSError:
        return None
    err = root_error(scan_errors(lines))
    return f"{err.exception}: {err.message} (server.log line {err.line_no})" if err else None


def serve(target, draft, out_dir, *, prompts, steps: int = 3, topk: int = 1, ndt: int = 4, max_tokens: int = 64,
          dtype: str = "bfloat16", n: int | None = None, concurrency: int = 4, startup_timeout: float = 420.0,
          port: int | None = None, extra_args: tuple[str, ...] = (), env: dict | None = None, hook: bool = False,
          hide_amx: bool = False, notes: tuple[str, ...] = ()) -> SglangRun:
    """Serve `draft` beside `target` with the real SGLang, send `prompts` (file, dataset or list), measure τ.

    `steps` / `topk` / `ndt`: --speculative-num-steps / -eagle-topk / -num-draft-tokens as a user types them (SGLang
    may rewrite them: /server_info says what ran); `concurrency`: requests in flight at once; `env`: variables the
    server is started with (part of the launch command); `hide_amx`: run as on a CPU without AMX. The server is
    stopped on every exit."""
    t_start = time.monotonic()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    todo = read_prompts(prompts, n)
    atomic_write(out / "prompts.jsonl", "".join(json.dumps(p.to_dict()) + "\n" for p in todo))
    args = launch_args(target, draft, steps=steps, topk=topk, ndt=ndt, dtype=dtype, extra=extra_args)
    if hook:
        args += ["--disable-radix-cache"]       # every prefill covers its whole prompt: one dumped row per token
    server = SglangServer(args, out / "server.log", port=port, env=env, hook=out / "hook" if hook else None,
                          hide_amx=hide_amx)
    atomic_write(out / "launch.txt", server.command() + "\n")
    seconds, rows, error, info, info_path = {}, [], None, {}, None
    with server:
        t0 = time.monotonic()
        healthy = server.wait_healthy(startup_timeout)
        seconds["startup"] = round(time.monotonic() - t0, 2)
        if not healthy:
            error = (f"the server did not answer /health within {startup_timeout:.0f} s" if server.running() else
                     engine_error(out / "server.log") or
                     f"the server exited with code {server.proc.returncode} before /health (no exception in its log)")
        else:
            t0 = time.monotonic()
            with ThreadPoolExecutor(max(1, concurrency)) as pool:
                rows = list(pool.map(lambda p: _generate(server, p, max_tokens), todo))
            seconds["requests"] = round(time.monotonic() - t0, 2)
            failed = [r for r in rows if "error" in r]
            if not server.running():
                error = engine_error(out / "server.log") or \
                    f"the server exited with code {server.proc.returncode} during the requests"
            elif failed:
                error = f"{len(failed)} of {len(rows)} requests failed: {str(failed[0]['error'])[:300]}"
            if server.running():
                info, info_path = _server_info(server, out)
    atomic_write(out / "responses.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    tau, counters = counted_accept_length(rows)
    seconds["total"] = round(time.monotonic() - t_start, 2)
    run = SglangRun(str(out), server.command(), str(out / "server.log"), info_path, error is None, error, tau,
                    _info_tau(info), {k: info[k] for k in EFFECTIVE if k in info}, engine_version(), counters,
                    seconds, server.pid, server.port, str(out / "hook") if hook else None, len(todo),
                    sum("error" not in r for r in rows), tuple(notes))
    atomic_write(out / "served.json", json.dumps(run.to_dict(), indent=1) + "\n")
    return run


def main(argv: list[str] | None = None) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m eagle3lib.sglang_engine.serve", description=__doc__.split("\n")[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--prompts", required=True, help="prompts .jsonl, or a dataset path (any eagle3lib format)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--n", type=int, default=32, help="at most this many prompts (one request each)")
    ap.add_argument("--steps", type=int, default=3, help="--speculative-num-steps")
    ap.add_argument("--topk", type=int, default=1, help="--speculative-eagle-topk")
    ap.add_argument("--ndt", type=int, default=4, help="--speculative-num-draft-tokens")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--hook", action="store_true", help="record the draft's fc inputs and load events (hook/)")
    a = ap.parse_args(argv)
    try:
        run = serve(a.target, a.draft, a.out, prompts=a.prompts, steps=a.steps, topk=a.topk, ndt=a.ndt,
                    max_tokens=a.max_tokens, n=a.n, hook=a.hook)
    except EngineError as e:
        print(json.dumps({"ok": False, "error": str(e)}))
        return 2
    print(json.dumps(run.to_dict()))
    return 0 if run.ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""One real SGLang server, started in the SGLang venv and always stopped again: the process, nothing parsed.

`SglangServer(args, log)` runs ``<sglang python> -m sglang.launch_server <args>`` on 127.0.0.1 as a
`engine_kit.process.ServerProcess` (its own process group: the scheduler and detokenizer it spawns included, stopped by
the id of the process it started). `launch_args(...)` builds an EAGLE-3 launch: target, draft, the three speculative
settings, and on a CPU build the flags it needs (`env.cpu_flags_for_launch`) plus a small KV cache (this machine is
shared). `hook=` puts eagle3lib's in-process hook (inside/hook/sitecustomize.py) on the server's PYTHONPATH, writing
into that folder.
    with SglangServer(launch_args(target, draft, steps=3, topk=1, ndt=4), log=out / "server.log") as srv:
        if srv.wait_healthy(timeout=300): srv.post("/generate", {...})
"""
from __future__ import annotations

import os
from pathlib import Path

from ..engine_kit.process import HOST, ServerProcess, free_port
from ..errors import EngineError
from .env import HOOK_DIR, MAKE_HINT, REPO_ROOT, cpu_env, cpu_flags_for_launch, flavour, side_env, sglang_python, \
    unavailable_reason

LAUNCH_MODULE = "sglang.launch_server"
# shared/engines/sglang-cpu README's serve command, with a KV pool of 32k tokens (the machine is shared); the warm-up
# stays (--skip-server-warmup logs a traceback of its own: "post-warmup freeze_gc failed")
CPU_EXTRA = ("--disable-overlap-schedule", "--mem-fraction-static", "0.3", "--max-total-tokens", "32768",
             "--max-running-requests", "4", "--decode-log-interval", "10")


def launch_args(target, draft, *, steps: int = 3, topk: int = 1, ndt: int = 4, dtype: str = "bfloat16",
                algorithm: str = "EAGLE3", extra: tuple[str, ...] = ()) -> list[str]:
    """The launch_server arguments for `draft` beside `target` (no host / port: the server adds them)."""
    args = ["--model-path", str(target), "--speculative-algorithm", algorithm,
            "--speculative-draft-model-path", str(draft), "--speculative-num-steps", str(steps),
            "--speculative-eagle-topk", str(topk), "--speculative-num-draft-tokens", str(ndt)]
    if flavour() == "cpu":
        args += cpu_flags_for_launch(dtype) + list(CPU_EXTRA)
    else:
        args += ["--dtype", dtype]
    return args + list(extra)


class SglangServer(ServerProcess):
    """The SGLang HTTP server as a child process group: start, wait for /health, HTTP calls, stop by pid."""

    def __init__(self, args: list[str], log: str | os.PathLike, *, port: int | None = None, env: dict | None = None,
                 hook: str | os.PathLike | None = None, hide_amx: bool = False):
        py = sglang_python()
        reason = unavailable_reason()
        if py is None or reason:
            raise EngineError("SGLang server", "the real SGLang cannot run here", expected=MAKE_HINT,
                              found=reason or "no SGLang venv")
        port = int(port or free_port())
        env_set = {**(cpu_env() if flavour() == "cpu" else {}), **(env or {})}
        if hide_amx:        # the route of a CPU without AMX, on any host (engines.facts host row cpu:amx_needed)
            env_set.update({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16", "EAGLE3LIB_HIDE_AMX": "1"})
        hidden = {}
        if hook is not None or hide_amx:
            hidden["PYTHONPATH"] = str(HOOK_DIR)
        if hook is not None:
            Path(hook).mkdir(parents=True, exist_ok=True)
            hidden["EAGLE3LIB_SGLANG_HOOK_OUT"] = str(Path(hook).resolve())
        argv = [str(py), "-m", LAUNCH_MODULE, *map(str, args), "--host", HOST, "--port", str(port)]
        super().__init__(argv, log, port=port, env=side_env({**env_set, **hidden}), env_set=env_set, cwd=REPO_ROOT)
        self.hook = Path(hook) if hook is not None else None

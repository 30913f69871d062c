"""vllm_engine.server: the server process group is stopped by the id of the process it started, also on errors."""
from __future__ import annotations

import os
import time

import pytest

from eagle3lib.engine_kit.process import free_port, group_members
from eagle3lib.vllm_engine.server import VllmServer
from tests.processes import pid_alive


@pytest.fixture
def fake_python(tmp_path, monkeypatch):
    """A stand-in for the vLLM venv's python: ignores its arguments, starts a child in its group, sleeps."""
    exe = tmp_path / "python"
    exe.write_text("#!/bin/sh\nsleep 300 &\necho started\nexec sleep 300\n")
    exe.chmod(0o755)
    monkeypatch.setenv("EAGLE3LIB_VLLM_PYTHON", str(exe))
    return exe


def test_stop_ends_the_whole_group(fake_python, tmp_path):
    """stop() leaves no live process in the group (the child it spawned included); the log is kept."""
    srv = VllmServer(["--model", "m"], tmp_path / "server.log").start()
    time.sleep(0.5)
    assert len(group_members(srv.pid)) == 2 and srv.running()
    srv.stop(grace=5)
    assert not pid_alive(srv.pid) and group_members(srv.pid) == []
    assert "started" in (tmp_path / "server.log").read_text()


def test_context_manager_stops_on_keyboard_interrupt(fake_python, tmp_path):
    """A KeyboardInterrupt inside the block still stops the server before it propagates."""
    srv = VllmServer(["--model", "m"], tmp_path / "server.log")
    with pytest.raises(KeyboardInterrupt):
        with srv:
            raise KeyboardInterrupt
    assert group_members(srv.pid) == []


def test_command_and_health_of_a_dead_server(fake_python, tmp_path):
    """command() shows the variables set and the exact argv; wait_healthy is False once the process is gone."""
    srv = VllmServer(["--speculative-config", '{"method": "eagle3"}'], tmp_path / "l.log", port=free_port(),
                     env={"VLLM_LOG_STATS_INTERVAL": "1"})
    cmd = srv.command()
    assert cmd.startswith("VLLM_CPU_KVCACHE_SPACE=") and "VLLM_LOG_STATS_INTERVAL=1" in cmd
    assert "-m vllm.entrypoints.openai.api_server --speculative-config '{\"method\": \"eagle3\"}'" in cmd
    with srv:
        os.killpg(srv.pid, 9)
        assert srv.wait_healthy(5) is False
    assert not pid_alive(srv.pid)

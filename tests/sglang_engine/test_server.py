"""sglang_engine.server and env: the launch a CPU build needs, the hook and the AMX switch as the server's environment,
and the process group stopped by the id of the process it started (a stand-in python: no SGLang needed)."""
from __future__ import annotations

import time

import pytest

from eagle3lib.engine_kit.process import group_members
from eagle3lib.errors import EngineError
from eagle3lib.sglang_engine import env, server
from eagle3lib.sglang_engine.server import SglangServer, launch_args
from tests.processes import pid_alive


@pytest.fixture
def fake_python(tmp_path, monkeypatch):
    """A stand-in for the SGLang venv's python: ignores its arguments, prints its environment, sleeps."""
    exe = tmp_path / "python"
    exe.write_text("#!/bin/sh\nenv | sort\nsleep 300 &\nexec sleep 300\n")
    exe.chmod(0o755)
    monkeypatch.setenv(env.PYTHON_ENV, str(exe))
    monkeypatch.setattr(server, "unavailable_reason", lambda: "")
    monkeypatch.setattr(server, "flavour", lambda: "cpu")
    monkeypatch.setattr(env, "flavour", lambda: "cpu")
    return exe


def test_a_cpu_launch_carries_what_the_cpu_build_needs(monkeypatch):
    """The CPU build's flags (device, the intel_amx backend, bfloat16) follow the speculative settings as typed."""
    monkeypatch.setattr(server, "flavour", lambda: "cpu")
    args = launch_args("t", "d", steps=1, topk=1, ndt=16)
    line = " ".join(args)
    assert "--speculative-num-steps 1 --speculative-eagle-topk 1 --speculative-num-draft-tokens 16" in line
    assert "--device cpu --attention-backend intel_amx --dtype bfloat16" in line
    monkeypatch.setattr(server, "flavour", lambda: "cuda")
    assert "--device" not in launch_args("t", "d")


def test_the_hook_and_the_amx_switch_reach_the_server_not_the_command(fake_python, tmp_path):
    """The hook folder and its PYTHONPATH are set for the server but are no part of the launch a user would type;
    hiding AMX is (it changes the route): ONEDNN_MAX_CPU_ISA shows in the command."""
    srv = SglangServer(["--model-path", "m"], tmp_path / "server.log", hook=tmp_path / "hook", hide_amx=True)
    cmd = srv.command()
    assert cmd.startswith("SGLANG_USE_CPU_ENGINE=1 ") and "ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16" in cmd
    assert "EAGLE3LIB_SGLANG_HOOK_OUT" not in cmd and "PYTHONPATH" not in cmd
    assert "-m sglang.launch_server --model-path m --host 127.0.0.1 --port" in cmd
    with srv:
        time.sleep(0.5)
        assert len(group_members(srv.pid)) == 2
    seen = (tmp_path / "server.log").read_text()
    assert f"EAGLE3LIB_SGLANG_HOOK_OUT={(tmp_path / 'hook').resolve()}" in seen
    assert f"PYTHONPATH={env.HOOK_DIR}" in seen and "EAGLE3LIB_HIDE_AMX=1" in seen
    assert not pid_alive(srv.pid) and group_members(srv.pid) == []


def test_a_host_without_avx512_bf16_is_told_why(monkeypatch):
    """The host row says what the CPU kernels need; a CPU without it gets the reason, an SGLang venv or not."""
    assert env.host_reason(frozenset({"avx2", "avx512f"})).startswith("this CPU has no avx512_bf16")
    assert env.host_reason(frozenset({"avx512_bf16"})) == ""
    monkeypatch.setattr(server, "unavailable_reason", lambda: "this CPU has no avx512_bf16: ...")
    monkeypatch.setenv(env.PYTHON_ENV, "/bin/sh")
    with pytest.raises(EngineError, match="avx512_bf16"):
        SglangServer(["--model-path", "m"], "server.log")

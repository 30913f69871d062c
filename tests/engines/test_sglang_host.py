"""The SGLang host rows (engines/facts_target.py, topic "host"), checked on the running CPU build: what it needs of the
CPU (avx512_bf16, not AMX) and in which dtype and attention backend it serves EAGLE-3. On a host with AMX the
no-AMX route is taken too, by hiding AMX from oneDNN and from SGLang's probe (the hook's EAGLE3LIB_HIDE_AMX); on a
host without AMX that run is the host's own route. Slow: four server starts; skipped with the reason where SGLang
cannot run."""
from __future__ import annotations

import json

import pytest

from eagle3lib.demo.world import ensure_world
from eagle3lib.engines.facts import fact
from eagle3lib.engines.host import cpu_flags, has_amx
from eagle3lib.sglang_engine.env import flavour, host_reason, unavailable_reason
from eagle3lib.sglang_engine.serve import serve

pytestmark = [pytest.mark.engine, pytest.mark.slow,
              pytest.mark.skipif(bool(unavailable_reason()), reason=unavailable_reason() or "SGLang runs here"),
              pytest.mark.skipif(flavour() != "cpu", reason="the host rows are about SGLang's CPU build")]

N = 12


@pytest.fixture(scope="module")
def world():
    return ensure_world(progress=False)


def _serve(world, out, **kw):
    return serve(world.target, world.draft, out, prompts=world.heldout_data, n=N, max_tokens=32, **kw)


def test_the_cpu_needs_avx512_bf16_not_amx(world, tmp_path):
    """The CPU build serves on this host (it has avx512_bf16: the row's requirement) and serves the same with AMX
    hidden: same accept length within 5%, the same tokens on most prompts (bfloat16 kernels take another path)."""
    assert "avx512_bf16" in cpu_flags() and host_reason() == ""
    assert fact("sglang", "host", "cpu_kernels_need:avx512_bf16").reads is True
    assert fact("sglang", "host", "cpu:amx_needed").reads is False
    own = _serve(world, tmp_path / "own")
    hidden = _serve(world, tmp_path / "no_amx", hide_amx=True)
    assert own.ok and hidden.ok, (own.error, hidden.error)
    assert "ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16" in hidden.launch_command
    assert abs(hidden.accept_length - own.accept_length) < 0.05 * own.accept_length
    toks = lambda r: [json.loads(line).get("token_ids") for line in open(f"{r.out_dir}/responses.jsonl")]  # noqa
    agree = sum(a == b for a, b in zip(toks(own), toks(hidden)))
    assert agree >= N * 3 // 4, f"{agree} of {N} answers identical with AMX {'hidden' if has_amx() else 'absent'}"


def test_float32_is_refused_and_bfloat16_serves(world, tmp_path):
    """--dtype float32 dies at the first forward in the CPU kernels (row cpu:float32 False); bfloat16 serves (the
    other runs of this suite)."""
    assert fact("sglang", "host", "cpu:float32").reads is False and fact("sglang", "host", "cpu:bfloat16").reads
    run = _serve(world, tmp_path / "f32", dtype="float32", startup_timeout=300)
    assert not run.ok and run.n_answered == 0
    log = open(run.log).read()
    assert "not implemented for 'Float'" in log, (run.error, log[-2000:])


def test_eagle_is_refused_on_torch_native(world, tmp_path):
    """--attention-backend torch_native refuses EAGLE at start-up (row cpu:eagle_on_torch_native False): only
    intel_amx serves it on CPU."""
    assert fact("sglang", "host", "cpu:eagle_on_torch_native").reads is False
    run = _serve(world, tmp_path / "tn", extra_args=("--attention-backend", "torch_native"), startup_timeout=300)
    assert not run.ok and run.n_answered == 0
    assert "EAGLE is not supported in decode attention backend torch_native" in open(run.log).read()

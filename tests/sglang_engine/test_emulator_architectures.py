"""The offline engine on tiny random Llama, Qwen3, Qwen3-MoE, DeepSeek-V3 (MLA + MoE) and gpt-oss targets.

Each target is saved and loaded back through `load_target_model`, in float64 (experts looped). The reference is
a greedy loop that re-runs the whole sequence without any cache, so it is independent of the engine's KV handling
(cropping after rejections; gpt-oss's sliding-window layers).
"""
from __future__ import annotations

import pytest
import torch

from eagle3lib.hidden.capture import capture_for_layout, load_target_model
from eagle3lib.model.draft import Eagle3Draft
from eagle3lib.engine_kit.capturespec import CaptureSpec
from eagle3lib.sglang_engine.emulator import SpecEngine
from eagle3lib.sglang_engine.emulator_settings import SpecSettings
from tests.sglang_engine.test_emulator import OracleDraft, _draft_cfg, _expected_rounds, random_draft
from tests.sglang_engine.test_tree import SecondChoiceOracle
from tests.tiny_targets import ARCHS, H, V, exact, save_tiny_target

pytestmark = pytest.mark.slow     # tens of seconds: the full suite (make test-all), not make test

LAYOUT = ("embed", "layer_in.1", "final_prenorm")
N_NEW = 30


# how close a cached pass must come to a fresh one, in float64: transformers' DeepSeek-V3 runs its RMSNorm and its
# router in float32 (modeling_deepseek_v3.py: `hidden_states.to(torch.float32)`, `F.linear(... torch.float32)`), so
# a cached and a fresh pass agree to float32 rounding there (9e-7 seen), which depends on the CPU's kernels
AUX_ATOL = {"deepseek_v3": 1e-5}


def _cfg(**over):
    return _draft_cfg(vocab_size=V, target_hidden_size=H, num_aux_hidden_states=3,
                      eagle_config={"eagle_aux_hidden_state_layer_ids": [-1, 0, 1]}, **over)


@pytest.fixture(scope="module", params=ARCHS)
def case(request, tmp_path_factory):
    """(arch, float64 target loaded through eagle3lib, prompt, uncached greedy continuation of N_NEW + 8 tokens:
    the oracle draft reads past the last emitted token)."""
    model = exact(load_target_model(save_tiny_target(request.param, tmp_path_factory.mktemp(request.param))))
    prompt = torch.randint(0, V, (12,), generator=torch.Generator().manual_seed(3))
    seq = prompt.clone()
    with torch.no_grad():
        for _ in range(N_NEW + 8):
            nxt = model(seq[None], use_cache=False).logits[0, -1].argmax()
            seq = torch.cat([seq, nxt.view(1)])
    return request.param, model, prompt, tuple(seq[len(prompt):].tolist())


@pytest.mark.parametrize("steps", [1, 3])
def test_random_draft_chain_equals_target_greedy(case, steps):
    """Chain drafting with a random draft (d2t offsets) gives exactly the uncached target-only greedy tokens."""
    arch, model, prompt, ref = case
    ref = ref[:N_NEW]
    eng = SpecEngine(model, random_draft(_cfg()), CaptureSpec.from_layout(LAYOUT))
    assert eng.generate(prompt, N_NEW, SpecSettings.baseline()).output_ids == ref
    r = eng.generate(prompt, N_NEW, SpecSettings(steps, 1, steps + 1))
    assert r.output_ids == ref, arch
    assert r.rounds >= 1 and r.finish_reason == "length"


def test_oracle_acceptance_and_rollback_match_a_fresh_pass(case):
    """A draft right except at chosen positions: exact accept lengths, greedy output, and the aux rows handed to the
    draft after accepts and crops equal one fresh no-cache capture (the target KV was rolled back right)."""
    arch, model, prompt, ref = case
    truth = list(prompt.tolist()) + list(ref)
    wrong = {14, 15, 19, 24, 25, 31, 36}
    draft = random_draft(_cfg(draft_vocab_size=V), OracleDraft, truth=truth, wrong=wrong)
    r = SpecEngine(model, draft, CaptureSpec.from_layout(LAYOUT)).generate(prompt, N_NEW, SpecSettings(3, 1, 4),
                                                                          keep_aux=True)
    taus, per_pos = _expected_rounds(len(prompt), N_NEW, 3, wrong)
    assert r.output_ids == ref[:N_NEW]
    assert list(r.accept_lengths) == taus and list(r.accepted_per_position) == per_pos
    assert 1 < r.accept_length < 4
    P = r.aux.shape[0]
    seq = torch.tensor(truth[:P])
    assert torch.equal(r.aux_ids, seq)
    fresh = capture_for_layout(model, seq, LAYOUT)                 # (P, 3H), one pass without a cache
    assert torch.allclose(r.aux, fresh, atol=AUX_ATOL.get(arch, 1e-9)), (arch, (r.aux - fresh).abs().max())
    cache = draft.caches[-1]
    ref_cache = draft.new_cache(1, cache.max_len)
    Eagle3Draft.step(draft, fresh[None], torch.tensor(truth[1:P + 1])[None], torch.arange(P)[None], ref_cache,
                     fuse=True)
    for got, want in zip(cache.layers, ref_cache.layers, strict=True):
        assert torch.allclose(got.k[:, :, :P], want.k[:, :, :P], atol=AUX_ATOL.get(arch, 1e-9))


def test_tree_keeps_greedy_accepts_side_branches_and_rolls_back(case):
    """topk-2 trees (gpt-oss: the verify mask also has the sliding window) give the greedy tokens; with a draft whose
    first choice is wrong at some positions every round accepts 3 via second children, and the aux rows after
    the accepted side branches were moved into place equal one fresh no-cache capture."""
    arch, model, prompt, ref = case
    eng = SpecEngine(model, random_draft(_cfg()), CaptureSpec.from_layout(LAYOUT))
    assert eng.generate(prompt, 24, SpecSettings(3, 4, 8)).output_ids == ref[:24], arch
    truth = list(prompt.tolist()) + list(ref)
    draft = random_draft(_cfg(draft_vocab_size=V), SecondChoiceOracle, truth=truth, wrong={14, 15, 19, 24, 25, 31})
    r = SpecEngine(model, draft, CaptureSpec.from_layout(LAYOUT)).generate(prompt, N_NEW, SpecSettings(2, 2, 7),
                                                                          keep_aux=True)
    assert r.output_ids == ref[:N_NEW] and set(r.accept_lengths) == {3}
    fresh = capture_for_layout(model, r.aux_ids, LAYOUT)
    assert torch.equal(r.aux_ids, torch.tensor(truth[:len(r.aux_ids)]))
    assert torch.allclose(r.aux, fresh, atol=AUX_ATOL.get(arch, 1e-9)), (arch, (r.aux - fresh).abs().max())

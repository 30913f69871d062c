"""Parity with the real speculators `Eagle3DraftModel`: it builds a draft with random weights and saves it with its own
`save_pretrained`; eagle3lib loads that directory with `load_draft` and its logits equal the real TTT forward's at
every step (fp32, relative error < 1e-5). Variants: Llama and Qwen3 (q/k norm, attention bias), 1 and 2 layers,
each with norm_before_residual false and true; four aux slots (more than the default three)."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("speculators", reason="speculators is not installed (tools/bootstrap.sh installs it "
                    "with --no-deps for the parity tests)")
from speculators.config import SpeculatorsConfig, VerifierConfig  # noqa: E402
from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig  # noqa: E402
from speculators.proposals.greedy import GreedyTokenProposalConfig  # noqa: E402
from transformers import LlamaConfig, Qwen3Config  # noqa: E402

from eagle3lib.model.checkpoint import load_draft  # noqa: E402

V, VD, H, K_STEPS, T = 120, 40, 32, 4, 13
AUX_IDS = [1, 3, 5, 6]                      # 4 aux slots: fc is [H, 4H]


def rel_err(a, b):
    return float((a - b).norm() / b.norm().clamp_min(1e-12))


def speculators_draft(layer_type: str, layers: int, norm_before_residual: bool) -> Eagle3DraftModel:
    """The real class with random weights (norms near one), a real draft vocab (VD of the V target ids)."""
    torch.manual_seed(0)
    cls = {"llama": LlamaConfig, "qwen3": Qwen3Config}[layer_type]
    extra = {"attention_bias": True} if layer_type == "qwen3" else {}
    tl = cls(hidden_size=H, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
             num_hidden_layers=layers, vocab_size=V, max_position_embeddings=64, rms_norm_eps=1e-6,
             rope_theta=10000.0, **extra)
    tl._attn_implementation = "sdpa"
    cfg = Eagle3SpeculatorConfig(
        transformer_layer_config=tl, draft_vocab_size=VD, norm_before_residual=norm_before_residual,
        eagle_aux_hidden_state_layer_ids=AUX_IDS,
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3", proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=K_STEPS)],
            default_proposal_method="greedy",
            verifier=VerifierConfig(name_or_path=None, architectures=[cls.__name__.replace("Config", "ForCausalLM")])))
    model = Eagle3DraftModel(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.uniform_(0.5, 1.5) if "norm" in name else p.normal_(0, 0.2)
    kept = torch.randperm(V)[:VD].sort().values                  # target ids of the draft vocab
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[kept] = True
    model.load_vocab_mappings(t2d, kept - torch.arange(VD))      # d2t: offsets, target = draft + d2t[draft]
    return model.eval()


def real_ttt_logits(model: Eagle3DraftModel, aux, ids) -> list[torch.Tensor]:
    """Per-step logits of speculators' own TTT forward (teacher-forced), read off its lm_head; its input ids are the
    next tokens (position t reads token t+1), its default RoPE positions 1 + t."""
    got = []
    hook = model.lm_head.register_forward_hook(lambda m, a, out: got.append(out.detach().clone()))
    nxt = torch.cat([ids[:, 1:], torch.zeros_like(ids[:, :1])], dim=1)
    try:
        with torch.no_grad():
            model(hidden_states=aux, input_ids=nxt, document_ids=torch.zeros_like(ids), ttt_steps=K_STEPS)
    finally:
        hook.remove()
    return got


@pytest.mark.parametrize("norm_before_residual", [False, True])
@pytest.mark.parametrize("layer_type,layers", [("llama", 1), ("llama", 2), ("qwen3", 1), ("qwen3", 2)])
def test_speculators_checkpoint_loads_and_matches_every_ttt_step(tmp_path, layer_type, layers, norm_before_residual):
    model = speculators_draft(layer_type, layers, norm_before_residual)
    model.save_pretrained(tmp_path / "draft")
    loaded = load_draft(tmp_path / "draft")
    cfg = loaded.cfg
    assert (cfg.dialect, cfg.num_hidden_layers, cfg.layer_type, cfg.qk_norm, cfg.num_aux) == (
        "speculators", layers, layer_type, layer_type == "qwen3", len(AUX_IDS))
    assert cfg.norm_before_residual == norm_before_residual and cfg.attention_bias == (layer_type == "qwen3")
    assert loaded.format == "speculators" and set(loaded.report.status) == {"ok"} and not loaded.taken_from_target
    torch.manual_seed(1)
    aux, ids = torch.randn(1, T, len(AUX_IDS) * H), torch.randint(0, V, (1, T))
    real = real_ttt_logits(model, aux, ids)
    with torch.no_grad():
        ours = loaded.model.ttt_forward(aux, ids, K_STEPS, position_offset=1)
    assert len(real) == len(ours) == K_STEPS
    errs = [rel_err(o, r) for o, r in zip(ours, real)]
    assert max(errs) < 1e-5, errs
    assert torch.equal(loaded.model.d2t, model.d2t) and torch.equal(loaded.model.t2d, model.t2d)

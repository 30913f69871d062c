"""Parity with the real SpecForge `LlamaForCausalLMEagle3`: it builds a draft with random weights, which is saved
the way SpecForge's SGLang exporter does (`specforge.export.to_sglang`: state dict without the embedding, its
WEIGHT_MAPS / serving-key check, HF `save_pretrained`, legacy RoPE fields); eagle3lib loads that directory with
`load_draft` (embedding from a tiny target directory) and its logits equal those of SpecForge's own TTT loop
(`OnlineEagle3Model.forward`: project_hidden_states once, then embed_input_ids / backbone / compute_logits per step
with its cache_hidden, input ids shifted left each step) at every step (fp32, relative error < 1e-5).
SpecForge 0.2.0 models one decoder layer (`midlayer`) and three aux slots, so there is no multi-layer variant."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

pytest.importorskip("specforge", reason="SpecForge is not installed (tools/bootstrap.sh installs it with --no-deps "
                    "for the parity tests)")
from specforge.export.checkpoint_io import apply_legacy_rope_scaling  # noqa: E402
from specforge.export.to_sglang import WEIGHT_MAPS, _serving_state  # noqa: E402
from specforge.modeling.draft.llama3_eagle import LlamaForCausalLMEagle3  # noqa: E402
from specforge.utils import padding  # noqa: E402
from transformers import LlamaConfig  # noqa: E402

from eagle3lib.model.checkpoint import load_draft  # noqa: E402

V, VD, H, K_STEPS, B, T = 120, 40, 32, 4, 2, 11
AUX_IDS = [1, 3, 5]                        # SpecForge's fc is fixed at 3 aux slots (output-of-layer ids)


@pytest.fixture(autouse=True)
def _eager():
    """SpecForge wraps RMSNorm and RoPE in torch.compile; run them eagerly (CPU inductor takes minutes)."""
    import torch._dynamo
    with torch._dynamo.config.patch(disable=True):
        yield


def rel_err(a, b):
    return float((a - b).norm() / b.norm().clamp_min(1e-12))


def specforge_draft(**flags) -> LlamaForCausalLMEagle3:
    """The real class with random weights (norms near one) and a real draft vocab (VD of the V target ids)."""
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=H, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                      num_hidden_layers=1, vocab_size=V, max_position_embeddings=64, rms_norm_eps=1e-6,
                      rope_theta=10000.0, tie_word_embeddings=False)
    cfg.draft_vocab_size = VD
    cfg.eagle_config = {"eagle_aux_hidden_state_layer_ids": AUX_IDS, "use_aux_hidden_state": True}
    for k, v in flags.items():
        setattr(cfg, k, v)
    model = LlamaForCausalLMEagle3(cfg, attention_backend="sdpa")
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.uniform_(0.5, 1.5) if "norm" in name else p.normal_(0, 0.2)
        kept = torch.randperm(V)[:VD].sort().values             # target ids of the draft vocab
        model.t2d.zero_()[kept] = True
        model.d2t.copy_(kept - torch.arange(VD))                 # offsets: target = draft + d2t[draft]
    return model.eval()


def save_like_specforge(model: LlamaForCausalLMEagle3, out) -> None:
    """specforge.export.to_sglang.export_to_sglang after materialising the draft: drop the embedding, check the
    serving keys, save_pretrained, mirror the legacy RoPE fields."""
    full = {k: v for k, v in model.state_dict().items() if "embed" not in k.lower()}
    model.save_pretrained(str(out), state_dict=_serving_state(full, WEIGHT_MAPS[type(model).__name__]))
    apply_legacy_rope_scaling(str(out))


def target_dir(model: LlamaForCausalLMEagle3, out):
    """A tiny target directory holding the embedding the draft was trained with (SpecForge freezes the target's)."""
    out.mkdir()
    (out / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 8,
                                                 "hidden_size": H, "vocab_size": V}))
    save_file({"model.embed_tokens.weight": model.embed_tokens.weight.detach().clone(),
               "model.norm.weight": torch.ones(H), "lm_head.weight": torch.randn(V, H)}, str(out / "model.safetensors"))
    return out


def real_ttt_logits(model: LlamaForCausalLMEagle3, aux, ids) -> list[torch.Tensor]:
    """SpecForge's TTT loop (OnlineEagle3Model.forward, sdpa backend) for `ids` already shifted to the next token."""
    hidden = model.project_hidden_states(aux)
    position_ids = torch.arange(T)[None].expand(B, T)
    mask = model.prepare_decoder_attention_mask(attention_mask=torch.ones(B, T, dtype=torch.bool),
                                                hidden_states=hidden, batch_size=B, seq_length=T,
                                                past_key_values_length=0)
    cache_hidden, out = [[], []], []
    with torch.no_grad():
        for _ in range(K_STEPS):
            emb = model.embed_input_ids(ids).to(hidden.dtype)
            hidden = model.backbone(input_embeds=emb, hidden_states=hidden, cache_hidden=cache_hidden,
                                    attention_mask=mask, position_ids=position_ids, past_key_values=None,
                                    use_cache=True)
            out.append(model.compute_logits(hidden))
            ids = padding(ids, left=False)
    return out


@pytest.mark.parametrize("flags", [{}, {"fc_norm": True}])
def test_specforge_checkpoint_loads_and_matches_every_ttt_step(tmp_path, flags):
    model = specforge_draft(**flags)
    save_like_specforge(model, tmp_path / "draft")
    loaded = load_draft(tmp_path / "draft", target=target_dir(model, tmp_path / "target"))
    cfg = loaded.cfg
    assert (cfg.dialect, cfg.num_hidden_layers, cfg.layer_type, cfg.num_aux, cfg.aux_layer_ids) == (
        "specforge", 1, "llama", 3, tuple(AUX_IDS))
    assert cfg.fc_norm == bool(flags.get("fc_norm")) and not cfg.norm_output
    assert loaded.format == "specforge" and loaded.taken_from_target == ("embed_tokens.weight",)
    assert set(loaded.report.status) == {"ok", "from_target"}
    torch.manual_seed(1)
    aux, ids = torch.randn(B, T, 3 * H), torch.randint(0, V, (B, T))
    real = real_ttt_logits(model, aux, padding(ids, left=False))
    with torch.no_grad():
        ours = loaded.model.ttt_forward(aux, ids, K_STEPS)
    errs = [rel_err(o, r) for o, r in zip(ours, real, strict=True)]
    assert max(errs) < 1e-5, errs
    assert torch.equal(loaded.model.d2t, model.d2t) and torch.equal(loaded.model.t2d, model.t2d)

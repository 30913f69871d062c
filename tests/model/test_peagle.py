"""P-EAGLE forward: its structure (depth 0 is EAGLE-3 step 0, causality, the mask inputs), and parity with the real
speculators `PEagleDraftModel` and SpecForge `OnlinePEagleModel` training forwards (fp32, every depth)."""
from __future__ import annotations

import importlib
import sys
import types

import pytest
import torch

from eagle3lib.errors import ConfigError
from eagle3lib.model.checkpoint import load_draft
from eagle3lib.model.config import DraftConfig
from eagle3lib.model.draft import Eagle3Draft
from eagle3lib.model.peagle import PEagleDraft, draft_for, resolve_mask_token_id

K = 4


def _peagle_cfg(tiny_cfg_dict, **kw):
    return DraftConfig.from_dict({**tiny_cfg_dict, "architectures": ["PEagleDraftModel"], "mask_token_id": 7, **kw})


def _random(model, seed=1):
    """Random weights everywhere (norm weights near 1), so every tensor matters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            p.copy_(1 + 0.1 * noise if name.endswith("norm.weight") else 0.2 * noise)
    return model.eval()


def test_draft_for_builds_the_model_the_config_describes(tiny_cfg_dict):
    cfg = _peagle_cfg(tiny_cfg_dict)
    d = draft_for(cfg)
    assert isinstance(d, PEagleDraft) and d.mask_token_id == 7
    assert tuple(d.mask_hidden.shape) == (1, 1, cfg.fc_in_features)
    assert type(draft_for(DraftConfig.from_dict(tiny_cfg_dict))) is Eagle3Draft


def test_depth_0_is_eagle3_step_0_and_later_depths_see_only_the_past(tiny_cfg_dict):
    """Depth 0 equals the EAGLE-3 step 0 of the same weights; no depth at anchor t reads a position after t; the
    depths >= 1 read mask_hidden and the mask token, depth 0 neither."""
    cfg = _peagle_cfg(tiny_cfg_dict)
    d = _random(PEagleDraft(cfg))
    T = 9
    aux, ids = torch.randn(1, T, cfg.fc_in_features), torch.randint(0, cfg.vocab_size, (1, T))
    with torch.no_grad():
        out = d.parallel_forward(aux, ids, K)
        step0 = d.ttt_forward(aux, ids, 1)[0]
        assert torch.allclose(out[0][:, :T - 1], step0[:, :T - 1], atol=1e-5)
        aux2, ids2 = aux.clone(), ids.clone()
        aux2[:, 5:] += 1.0
        ids2[:, 6:] = (ids2[:, 6:] + 1) % cfg.vocab_size                    # token t+1 of anchor 5 onward
        out2 = d.parallel_forward(aux2, ids2, K)
        for a, b in zip(out, out2):
            assert torch.allclose(a[:, :5], b[:, :5], atol=1e-6) and not torch.allclose(a[:, 5:], b[:, 5:])
        other_mask = d.parallel_forward(aux, ids, K, mask_token_id=8)
        d.mask_hidden.add_(0.5)
        other_hidden = d.parallel_forward(aux, ids, K)
    for changed in (other_mask, other_hidden):
        assert torch.equal(changed[0], out[0])
        assert all(not torch.allclose(changed[k], out[k]) for k in range(1, K))


def test_scored_rows_only_and_top1_ids(tiny_cfg_dict):
    cfg = _peagle_cfg(tiny_cfg_dict)
    d = _random(PEagleDraft(cfg))
    aux, ids = torch.randn(2, 7, cfg.fc_in_features), torch.randint(0, cfg.vocab_size, (2, 7))
    scored = torch.rand(K, 2, 7) > 0.5
    with torch.no_grad():
        full = d.parallel_forward(aux, ids, K)
        top = d.parallel_forward(aux, ids, K, return_logits=False, scored=scored)
    for k in range(K):
        assert torch.equal(top[k][scored[k]], full[k].argmax(-1)[scored[k]])
        assert bool((top[k][~scored[k]] == -1).all())


def test_unknown_mask_token_is_an_error_naming_the_key(tiny_cfg_dict):
    cfg = DraftConfig.from_dict({**tiny_cfg_dict, "architectures": ["PEagleDraftModel"]})
    d = PEagleDraft(cfg)
    with pytest.raises(ConfigError, match="mask_token_id"):
        d.parallel_forward(torch.zeros(1, 3, cfg.fc_in_features), torch.zeros(1, 3, dtype=torch.long), 2)


def test_mask_token_resolution_follows_specforge_order(tiny_cfg_dict):
    cfg = DraftConfig.from_dict({**tiny_cfg_dict, "architectures": ["PEagleDraftModel"]})
    tok = type("Tok", (), {"mask_token_id": None, "pad_token_id": 3, "eos_token_id": 2, "unk_token_id": None,
                           "__len__": lambda self: cfg.vocab_size - 4})()
    assert resolve_mask_token_id(cfg, tok)[0] == cfg.vocab_size - 4            # an unused embedding row first
    tok.__class__.__len__ = lambda self: cfg.vocab_size
    assert resolve_mask_token_id(cfg, tok)[0] == 3                             # then pad
    assert resolve_mask_token_id(_peagle_cfg(tiny_cfg_dict), tok) == (7, "config")
    assert resolve_mask_token_id(cfg, None)[0] is None


# ---------------------------------------------------------------- parity with the real implementations

def _relative_error(mine, ref):
    return float((mine - ref).abs().max() / ref.abs().max())


def _compare(loaded, logits, anchor, depth, hidden, spec_ids, mask_token_id=None):
    """eagle3lib's forward on the same inputs, in its alignment (token t+1 at t: one token in front), against the
    real forward's logits at its sampled (anchor, depth) rows; every depth must be among them."""
    T = spec_ids.shape[1]
    ids = torch.cat([torch.zeros(1, 1, dtype=torch.long), spec_ids], dim=1)      # (1, T) -> (1, T+1)
    aux = torch.cat([hidden, hidden.new_zeros(1, 1, hidden.shape[-1])], dim=1)   # (1, T, k*Ht) -> (1, T+1, k*Ht)
    with torch.no_grad():
        mine = torch.stack(loaded.model.parallel_forward(aux, ids, K, mask_token_id=mask_token_id))[:, 0, :T]
    assert set(depth.tolist()) == set(range(K))
    for d in range(K):
        rows = depth == d
        assert _relative_error(mine[d, anchor[rows]], logits[0, rows]) < 1e-5, f"depth {d}"


def _inputs(T, width, vocab, seed=0):
    g = torch.Generator().manual_seed(seed)
    loss_mask = torch.ones(1, T)
    loss_mask[0, :3] = 0                       # a prompt: (speculators samples anchor -1 when position 0 is trained)
    return (torch.randn(1, T, width, generator=g), torch.randint(0, vocab, (1, T), generator=g), loss_mask)


def _full_grid(seq_length, num_depths=K, **_):
    """Every anchor at every depth (the replay's rows), in the (anchor_pos, depth) form COD sampling returns."""
    anchor = torch.cat([torch.arange(seq_length - d) for d in range(num_depths)])
    depth = torch.cat([torch.full((seq_length - d,), d) for d in range(num_depths)])
    return anchor, depth


@pytest.mark.parametrize("variant", [{}, {"norm_before_residual": True}, {"fc_norm": True}, {"grid": True},
                                     {"layers": 3}, {"layers": 2, "grid": True}])
def test_parity_with_speculators_peagle(tmp_path, monkeypatch, variant):
    """speculators' PEagleDraftModel (random weights, saved in its own format) and eagle3lib's load of it give the
    same logits at every sampled (anchor, depth) of its training forward; "grid": every anchor at every depth."""
    pytest.importorskip("speculators.models.peagle", reason="speculators (the [parity] extra) is not installed")
    from transformers import LlamaConfig
    from speculators.config import SpeculatorsConfig, VerifierConfig
    from speculators.losses.utils import resolve_loss_config
    from speculators.models.peagle import PEagleDraftModel, PEagleSpeculatorConfig
    from speculators.proposals.greedy import GreedyTokenProposalConfig
    core = importlib.import_module("speculators.models.peagle.core")
    tl = LlamaConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                     num_hidden_layers=variant.get("layers", 1), vocab_size=50, max_position_embeddings=128,
                     rms_norm_eps=1e-6)
    tl._attn_implementation = "eager"          # CPU: a dense mask from P-EAGLE's own mask_mod instead of flex
    flags = {k: v for k, v in variant.items() if k not in ("grid", "layers")}
    cfg = PEagleSpeculatorConfig(
        transformer_layer_config=tl, draft_vocab_size=40, mask_token_id=7, eagle_aux_hidden_state_layer_ids=[1, 2, 3],
        speculators_config=SpeculatorsConfig(
            algorithm="peagle", proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=K)],
            default_proposal_method="greedy", verifier=VerifierConfig(name_or_path=None,
                                                                      architectures=["LlamaForCausalLM"])), **flags)
    real = _random(PEagleDraftModel(cfg))
    with torch.no_grad():
        t2d = torch.zeros(50, dtype=torch.bool)
        t2d[torch.randperm(50, generator=torch.Generator().manual_seed(2))[:40]] = True
        real.t2d.copy_(t2d)
        real.d2t.copy_(t2d.nonzero().flatten() - torch.arange(40))
    real.save_pretrained(tmp_path / "spec")
    loaded = load_draft(tmp_path / "spec")
    assert isinstance(loaded.model, PEagleDraft) and loaded.cfg.parallel_drafting and loaded.format == "speculators"
    assert len(loaded.model.decoder_layers) == variant.get("layers", 1)
    assert torch.equal(loaded.model.d2t, real.d2t) and loaded.model.mask_token_id == 7
    seen = {}
    sample = _full_grid if variant.get("grid") else core.generate_cod_sample_indices
    monkeypatch.setattr(core, "generate_cod_sample_indices",
                        lambda *a, **kw: seen.setdefault("rows", sample(*a, **kw)))
    real.lm_head.register_forward_hook(lambda mod, i, o: seen.__setitem__("logits", o.detach()))
    T = 20
    hidden, spec_ids, loss_mask = _inputs(T, 96, 50)
    torch.manual_seed(0)
    with torch.no_grad():
        real(hidden, spec_ids, torch.zeros(1, T, dtype=torch.long), loss_mask=loss_mask,
             verifier_last_hidden_states=torch.randn(1, T, 32), loss_config=resolve_loss_config("kl_div", "eager"),
             num_depths=K, down_sample_ratio=0.9, down_sample_ratio_min=0.5)
    anchor, depth = seen["rows"]
    _compare(loaded, seen["logits"], anchor, depth, hidden, spec_ids)


@pytest.mark.parametrize("layers", [1, 4])
def test_parity_with_specforge_peagle(tmp_path, monkeypatch, layers):
    """SpecForge's PEagleDraftModel (random weights, save_pretrained) run by its OnlinePEagleModel training forward
    and eagle3lib's load of it give the same logits at every sampled (anchor, depth). CPU stand-ins: flex attention
    uncompiled, and the triton loss module replaced when triton is missing (the logits come before the loss)."""
    pytest.importorskip("specforge.modeling.draft.peagle", reason="SpecForge (the [parity] extra) is not installed")
    from torch.nn.attention.flex_attention import flex_attention
    from transformers import LlamaConfig
    if importlib.util.find_spec("triton") is None and "specforge.core.loss" not in sys.modules:
        stub = types.ModuleType("specforge.core.loss")

        class LogSoftmaxLoss:                  # soft cross-entropy, the loss SpecForge's triton kernel computes
            @staticmethod
            def apply(logits, target_p, mask):
                return -(target_p * torch.log_softmax(logits.float(), -1) * mask).sum(-1).mean()
        stub.LogSoftmaxLoss = LogSoftmaxLoss
        monkeypatch.setitem(sys.modules, "specforge.core.loss", stub)
    sfp = importlib.import_module("specforge.modeling.draft.peagle")
    sfm = importlib.import_module("specforge.algorithms.peagle.model")
    monkeypatch.setattr(sfp, "compile_friendly_flex_attention", flex_attention)
    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                      num_hidden_layers=layers, vocab_size=50, max_position_embeddings=128, rms_norm_eps=1e-6,
                      draft_vocab_size=50, target_hidden_size=24)
    real = _random(sfp.PEagleDraftModel(cfg))
    real.save_pretrained(tmp_path / "sf")
    loaded = load_draft(tmp_path / "sf")
    assert isinstance(loaded.model, PEagleDraft) and loaded.cfg.dialect == "specforge"
    assert loaded.cfg.mask_token_id is None and loaded.cfg.target_hidden_size == 24
    assert len(loaded.model.decoder_layers) == layers
    seen = {}
    monkeypatch.setattr(sfm, "generate_cod_sample_indices",
                        lambda *a, _real=sfm.generate_cod_sample_indices, **kw: seen.setdefault("rows", _real(*a, **kw)))
    real.lm_head.register_forward_hook(lambda mod, i, o: seen.__setitem__("logits", o.detach()))
    T = 20
    hidden, spec_ids, loss_mask = _inputs(T, 72, 50)
    online = sfm.OnlinePEagleModel(real, mask_token_id=7, num_depths=K, down_sample_ratio=0.9,
                                   down_sample_ratio_min=0.5)
    torch.manual_seed(0)
    with torch.no_grad():
        online(input_ids=spec_ids, attention_mask=torch.ones(1, T), target=torch.randn(1, T, 50),
               loss_mask=loss_mask, hidden_states=hidden)
    anchor, depth = seen["rows"]
    _compare(loaded, seen["logits"], anchor, depth, hidden, spec_ids, mask_token_id=7)

"""Tests for eagle3lib.model.variants: the same trained weights under other config values."""
from __future__ import annotations

import pytest
import torch

from eagle3lib.errors import ConfigError
from eagle3lib.model.config import DraftConfig
from eagle3lib.model.draft import Eagle3Draft
from eagle3lib.model.layers import DraftMLP, activation
from eagle3lib.model.variants import rebuilt, reshape_text, reshaped, shape_implied


def draft(d: dict) -> Eagle3Draft:
    m = Eagle3Draft(DraftConfig.from_dict(d))
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.2)
    return m.eval()


def step0(m: Eagle3Draft) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    aux = torch.randn(1, 6, m.cfg.num_aux * m.cfg.target_hidden_size, generator=g).to(m.lm_head.weight.dtype)
    ids = torch.randint(0, m.cfg.vocab_size, (1, 6), generator=g)
    with torch.no_grad():
        return m.ttt_forward(aux, ids, num_steps=1)[0][0]


def test_rebuilt_shares_the_weights_and_changes_only_the_computation(tiny_cfg_dict):
    m = draft(tiny_cfg_dict)
    same = rebuilt(m)
    assert torch.equal(step0(same.model), step0(m)) and same.added == () == same.unused
    assert same.model.fc.weight.data_ptr() == m.fc.weight.data_ptr()          # shared, not copied
    nbr = rebuilt(m, norm_before_residual=True)
    assert nbr.model.cfg.norm_before_residual and not m.cfg.norm_before_residual
    assert not torch.allclose(step0(nbr.model), step0(m))
    theta = rebuilt(m, rope_theta=1e6)
    assert not torch.allclose(step0(theta.model), step0(m))


def test_a_flag_switched_on_adds_its_module_at_init_or_from_the_checkpoint(tiny_cfg_dict):
    m = draft(tiny_cfg_dict)
    on = rebuilt(m, norm_before_fc=True)
    assert on.added == ("input_norm.weight",)
    assert torch.equal(on.model.input_norm.weight, torch.ones(4 * 32))       # an engine's init of a missing weight
    trained = torch.full((4 * 32,), 2.0)
    given = rebuilt(m, extra={"input_norm.weight": trained}, norm_before_fc=True)
    assert given.added == () and torch.equal(given.model.input_norm.weight, trained)
    off = rebuilt(given.model, norm_before_fc=False)
    assert off.unused == ("input_norm.weight",)


def test_a_rebuilt_draft_allocates_only_what_the_change_adds(tiny_cfg_dict, monkeypatch):
    """Built on the meta device: the embedding, fc and lm_head are never allocated or initialised again (a whole
    float32 draft beside a bf16 one stopped case (b) at 16 GB); an added norm is real, in the model's dtype, on its
    device; every tensor of the model is shared."""
    m = draft(tiny_cfg_dict).to(torch.bfloat16)
    inits = []
    for cls in (torch.nn.Linear, torch.nn.Embedding):      # a real (not meta) weight initialised is one allocated
        monkeypatch.setattr(cls, "reset_parameters", lambda self: self.weight.is_meta or inits.append(self))
    on = rebuilt(m, norm_before_fc=True, fc_norm=True)
    assert inits == []
    assert on.added == ("fc_norm.0.weight", "fc_norm.1.weight", "fc_norm.2.weight", "fc_norm.3.weight",
                        "input_norm.weight")
    assert not any(t.is_meta for t in [*on.model.parameters(), *on.model.buffers()])
    assert on.model.input_norm.weight.dtype == torch.bfloat16 and bool((on.model.fc_norm[2].weight == 1).all())
    ptrs = {t.data_ptr() for t in m.state_dict().values()}
    assert all(v.data_ptr() in ptrs for k, v in on.model.state_dict().items() if k not in on.added)
    assert step0(on.model).dtype == torch.bfloat16


def test_only_fields_that_keep_every_tensor_shape_change(tiny_cfg_dict):
    with pytest.raises(ConfigError, match="hidden_size"):
        rebuilt(draft(tiny_cfg_dict), hidden_size=64)


def test_the_mlp_runs_the_configs_activation(tiny_cfg_dict):
    silu = DraftMLP(DraftConfig.from_dict(tiny_cfg_dict))
    gelu = DraftMLP(DraftConfig.from_dict(dict(tiny_cfg_dict, hidden_act="gelu")))
    gelu.load_state_dict(silu.state_dict())
    x = torch.randn(2, 3, 32)
    assert not torch.allclose(silu(x), gelu(x))
    ref = gelu.down_proj(torch.nn.functional.gelu(gelu.gate_proj(x)) * gelu.up_proj(x))
    assert torch.allclose(gelu(x), ref)
    with pytest.raises(ConfigError, match="hidden_act"):
        activation("swishy")


def test_a_field_that_sizes_tensors_is_implied_by_the_checkpoints_shapes_and_runs_with_its_tensors(tiny_cfg_dict):
    """num_key_value_heads written wrong: the checkpoint's k_proj / v_proj shapes give the trained value, and the
    draft rebuilt with it runs the checkpoint's own tensors (the loader's stand-ins replaced)."""
    trained = draft(tiny_cfg_dict)
    kv = tiny_cfg_dict["num_key_value_heads"]
    shipped_cfg = DraftConfig.from_dict(dict(tiny_cfg_dict, num_key_value_heads=2 * kv))
    shapes = {k: tuple(v.shape) for k, v in trained.state_dict().items()}
    assert shape_implied(shipped_cfg, shapes) == {"num_key_value_heads": kv}
    assert shape_implied(trained.cfg, shapes) == {}                                    # shapes agree: nothing implied
    (key, was, now), *_ = reshaped(shipped_cfg, {"num_key_value_heads": kv})
    assert key.endswith("k_proj.weight") and was[0] == 2 * now[0]
    assert "`num_key_value_heads` " + str(2 * kv) in reshape_text(shipped_cfg, {"num_key_value_heads": kv})
    stand_in = Eagle3Draft(shipped_cfg).eval()                                        # what a loader runs instead
    sd = trained.state_dict()
    stand_in.load_state_dict({k: v for k, v in sd.items() if tuple(v.shape) == tuple(stand_in.state_dict()[k].shape)},
                             strict=False)
    extra = {k: v for k, v in sd.items() if tuple(v.shape) != tuple(stand_in.state_dict()[k].shape)}
    fixed = rebuilt(stand_in, extra=extra, num_key_value_heads=kv)
    assert fixed.added == () and torch.allclose(step0(fixed.model), step0(trained))

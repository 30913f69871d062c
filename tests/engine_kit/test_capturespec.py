"""CaptureSpec (which boundaries an engine feeds the draft, padding) and HiddenTap on a tiny random Llama."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from eagle3lib.errors import LayoutError
from eagle3lib.layout import boundary_names
from eagle3lib.engine_kit.capturespec import PAD_POLICIES, CaptureSpec, HiddenTap, decoder_parts
from tests.hidden.test_capture import H, L, tiny_llama


@pytest.fixture(scope="module")
def model():
    return tiny_llama()


@pytest.fixture(scope="module")
def ids():
    return torch.randint(0, 100, (2, 9), generator=torch.Generator().manual_seed(3))


@pytest.fixture(scope="module")
def hf_states(model, ids):
    with torch.no_grad():
        return model(ids, output_hidden_states=True).hidden_states


# ---------------------------------------------------------------- construction

def test_from_ids_in_each_convention():
    out = CaptureSpec.from_ids([-1, 1, 3], "output")
    assert out.slots == ("embed", "layer_in.2", "layer_in.4")
    assert out.label == "output-of-layer ids [-1, 1, 3]" and out.pad_policy == "error" and out.engine is None
    inp = CaptureSpec.from_ids([0, 2, 4], "input")
    assert inp.slots == out.slots and inp.label == "input-of-layer ids [0, 2, 4]"
    assert CaptureSpec.from_ids([5, 1], "input", label="mine").label == "mine"
    assert CaptureSpec.from_ids([5, 1], "input").slots == ("layer_in.5", "layer_in.1")   # given order kept


def test_from_ids_errors():
    with pytest.raises(LayoutError, match=r"CaptureSpec\.from_ids\(\[-2, 1\], 'output'\): an id names no "
                                          r"boundary.*found \[-2, 1\]"):
        CaptureSpec.from_ids([-2, 1], "output")
    with pytest.raises(LayoutError, match=r"CaptureSpec\.from_ids\(\[-1\], 'input'\)"):
        CaptureSpec.from_ids([-1], "input")
    with pytest.raises(LayoutError, match=r"setting convention: unknown convention.*found hf.*final_postnorm"):
        CaptureSpec.from_ids([0], "hf")


def test_from_layout_and_post_init_checks():
    s = CaptureSpec.from_layout("embed, layer_out.2, final_postnorm")
    assert s.slots == ("embed", "layer_in.3", "final_postnorm") and s.label == "[embed, layer_in.3, final_postnorm]"
    assert CaptureSpec(slots=["layer_in.0", "out.1"]).slots == ("embed", "layer_in.2")
    with pytest.raises(LayoutError, match=r"setting pad_policy: unknown padding policy.*found 'pad'"):
        CaptureSpec.from_layout("embed", pad_policy="pad")
    with pytest.raises(LayoutError, match=r"give either slots or an engine rule.*found slots=None, engine=None"):
        CaptureSpec()
    with pytest.raises(LayoutError, match=r"give either slots or an engine rule.*engine='vllm'"):
        CaptureSpec(slots=("embed",), engine="vllm")
    with pytest.raises(LayoutError, match=r"no slots.*found \(\)"):
        CaptureSpec.from_layout("")
    with pytest.raises(LayoutError, match=r"boundary 'low': unknown boundary name"):
        CaptureSpec.from_layout("embed,low")
    assert PAD_POLICIES == ("error", "zeros", "repeat_last")


def test_with_pad_returns_a_new_spec():
    s = CaptureSpec.from_ids([1, 2], "input")
    z = s.with_pad("zeros")
    assert (z.pad_policy, s.pad_policy) == ("zeros", "error") and z.slots == s.slots and z.label == s.label
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.pad_policy = "zeros"
    with pytest.raises(LayoutError, match="unknown padding policy"):
        s.with_pad("nope")


# ---------------------------------------------------------------- resolution

def test_layout_of_explicit_slots():
    assert CaptureSpec.from_ids([0, 3, 6], "input").layout(L) == ("embed", "layer_in.3", "final_prenorm")
    normed = CaptureSpec(slots=("layer_in.2", "layer_in.6"), final_norm=True)
    assert normed.layout(L) == ("layer_in.2", "final_postnorm")
    with pytest.raises(LayoutError, match=r"capture input-of-layer ids \[7\]: asks for a boundary the 6-layer "
                                          r"target does not have.*found 7"):
        CaptureSpec.from_ids([7], "input").layout(L)


def test_kimi_target_captures_for_an_mla_draft_with_the_deepseek_first_id_rule():
    """A Kimi-K2.5 target (KimiK25ForConditionalGeneration) captures in its DeepSeek-V3 language model: an MLA
    draft's ids [2, 30, 58] (capture-before convention) are fed as inputs of layers 2/30/58, not 3/31/59, and
    output-of-layer ids [1, 29, 57] as the same boundaries; before v0.5.12 every id got +1."""
    from eagle3lib.engines.capture_rules import FIRST_ID_RULE_TARGETS
    kimi = "KimiK25ForConditionalGeneration"
    assert any(kimi.startswith(p) and "deepseek_v2.py" in f for p, f, _ in FIRST_ID_RULE_TARGETS)
    new = CaptureSpec.sglang([2, 30, 58], "0.5.23", target_arch=kimi)
    assert new.engine == "sglang-first-id" and new.layout(61) == ("layer_in.2", "layer_in.30", "layer_in.58")
    assert CaptureSpec.sglang([1, 29, 57], "0.5.23", target_arch=kimi).layout(61) == new.layout(61)
    old = CaptureSpec.sglang([2, 30, 58], "0.5.6", target_arch=kimi)
    assert old.layout(61) == ("layer_in.3", "layer_in.31", "layer_in.59")


def test_layout_of_engine_rules():
    """SGLang adds +1 to every id before v0.5.12, then only when ids[0] == 1; vLLM never; both ascending."""
    L32 = 32
    old = CaptureSpec.sglang([1, 15, 28], "0.5.6")
    assert old.engine == "sglang" and old.ids == (1, 15, 28)
    assert old.layout(L32) == ("layer_in.2", "layer_in.16", "layer_in.29")
    assert CaptureSpec.sglang([2, 16, 29], "0.5.6").layout(L32) == ("layer_in.3", "layer_in.17", "layer_in.30")
    new = CaptureSpec.sglang([2, 16, 29], "0.5.12")
    assert new.engine == "sglang-first-id" and new.layout(L32) == ("layer_in.2", "layer_in.16", "layer_in.29")
    assert CaptureSpec.sglang([1, 15, 28], "0.5.12").layout(L32) == ("layer_in.2", "layer_in.16", "layer_in.29")
    llama = CaptureSpec.sglang([2, 16, 29], "0.5.12", target_arch="LlamaForCausalLM")
    assert llama.engine == "sglang" and llama.layout(L32) == ("layer_in.3", "layer_in.17", "layer_in.30")
    assert CaptureSpec.sglang([2], "0.5.12", target_arch="DeepseekV3ForCausalLM").engine == "sglang-first-id"
    assert CaptureSpec.sglang([28, 1, 15]).layout(L32) == ("layer_in.2", "layer_in.16", "layer_in.29")
    assert CaptureSpec.sglang(None).layout(L32) == ("layer_in.2", "layer_in.16", "layer_in.29")
    vllm = CaptureSpec.vllm([29, 2, 16, 2])
    assert vllm.engine == "vllm" and vllm.label == "vLLM ids [29, 2, 16, 2]"
    assert vllm.layout(L32) == ("layer_in.2", "layer_in.16", "layer_in.29")
    assert CaptureSpec.vllm(None).label == "vLLM ids default"
    assert CaptureSpec.vllm(None).layout(L32) == ("layer_in.2", "layer_in.16", "layer_in.29")
    assert CaptureSpec.vllm([0, 32]).layout(L32) == ("embed", "final_prenorm")
    assert dataclasses.replace(CaptureSpec.vllm([0, 32]), final_norm=True).layout(L32) == ("embed", "final_postnorm")
    with pytest.raises(LayoutError, match=r"capture vLLM ids \[40\]: asks for a boundary the 32-layer target"):
        CaptureSpec.vllm([40]).layout(L32)


# ---------------------------------------------------------------- padding

def states(k: int, B: int = 1, T: int = 2, h: int = 3) -> list[torch.Tensor]:
    return [torch.full((B, T, h), float(i + 1)) for i in range(k)]


def test_check_and_fit_with_every_policy():
    s = CaptureSpec.from_ids([1, 2, 3], "input")
    assert s.check(3, 3) is None
    assert torch.equal(s.fit(states(3), 3), torch.cat(states(3), dim=-1))
    with pytest.raises(LayoutError, match=r"setting pad_policy='error': captures 2 slots but the draft's fc "
                                          r"takes 4"):
        s.fit(states(2), 4)
    with pytest.raises(LayoutError, match=r"captures more slots than the draft's fc takes \(expected at most 2 "
                                          r"slots, found 3\)"):
        s.with_pad("zeros").fit(states(3), 2)
    z = s.with_pad("zeros").fit(states(2), 4)
    assert z.shape == (1, 2, 12)
    assert z[0, 0].tolist() == [1.0] * 3 + [2.0] * 3 + [0.0] * 6
    r = s.with_pad("repeat_last").fit(states(2), 4)
    assert r[0, 1].tolist() == [1.0] * 3 + [2.0] * 6 + [2.0] * 3


def test_zero_padding_equals_an_fc_cut_to_its_first_blocks():
    """zeros into an fc over m slots == the same fc with only its first k column blocks."""
    g = torch.Generator().manual_seed(0)
    fc = torch.nn.Linear(4 * 3, 5, bias=False)
    with torch.no_grad():
        fc.weight.copy_(torch.randn(5, 12, generator=g))
    got = [torch.randn(1, 2, 3, generator=g) for _ in range(3)]
    padded = fc(CaptureSpec.from_layout("layer_in.1", pad_policy="zeros").fit(got, 4))
    cut = torch.cat(got, dim=-1) @ fc.weight[:, :9].T
    assert torch.allclose(padded, cut, atol=1e-6)


# ---------------------------------------------------------------- decoder parts and the tap

def test_decoder_parts(model):
    layers, norm = decoder_parts(model)
    assert layers is model.model.layers and norm is model.model.norm and len(layers) == L
    assert decoder_parts(model.model) == (model.model.layers, model.model.norm)
    with pytest.raises(LayoutError, match=r"target model Linear: no decoder stack found"):
        decoder_parts(torch.nn.Linear(2, 2))


def test_tap_equals_hf_hidden_states(model, ids, hf_states):
    """embed = hs[0], layer_in.i = hs[i], final_postnorm = hs[L]; final_prenorm is the norm's input."""
    names = boundary_names(L)
    with HiddenTap(model, names) as tap, torch.no_grad():
        model(ids)
        got = tap.take(names)
    assert len(got) == L + 2 and all(t.shape == (2, 9, H) for t in got)
    assert torch.equal(got[0], hf_states[0])
    for i in range(1, L):
        assert torch.equal(got[i], hf_states[i]), i
    assert torch.equal(got[-1], hf_states[L])
    assert not torch.allclose(got[-2], got[-1], atol=1e-3)
    assert torch.allclose(model.model.norm(got[-2]), got[-1], atol=1e-6)


def test_tap_takes_a_spec_layout_in_fc_order(model, ids, hf_states):
    spec = CaptureSpec.from_ids([3, -1, 1], "output", pad_policy="zeros")
    layout = spec.layout(L)
    assert layout == ("layer_in.4", "embed", "layer_in.2")
    with HiddenTap(model, layout + layout) as tap, torch.no_grad():
        assert tap.names == layout                           # duplicates hooked once
        model(ids)
        fc_in = spec.fit(tap.take(layout), 4)
    assert fc_in.shape == (2, 9, 4 * H)
    assert torch.equal(fc_in[..., :H], hf_states[4]) and torch.equal(fc_in[..., H:2 * H], hf_states[0])
    assert torch.equal(fc_in[..., 2 * H:3 * H], hf_states[2]) and not fc_in[..., 3 * H:].any()


def test_tap_keeps_the_latest_forward_and_unhooks_on_exit(model, ids, hf_states):
    pre = [len(layer._forward_pre_hooks) for layer in model.model.layers]
    norm_hooks = (len(model.model.norm._forward_pre_hooks), len(model.model.norm._forward_hooks))
    tap = HiddenTap(model, ["layer_in.3", "final_prenorm", "final_postnorm"])
    with tap, torch.no_grad():
        assert len(model.model.layers[3]._forward_pre_hooks) == pre[3] + 1
        model(ids[:1, :4])
        model(ids)                                           # the last forward wins
        assert torch.equal(tap.take(["layer_in.3"])[0], hf_states[3])
        with pytest.raises(LayoutError, match=r"hooks did not fire for some boundaries \(expected \['embed'\], "
                                              r"found \['final_postnorm', 'final_prenorm', 'layer_in.3'\]"):
            tap.take(["embed"])
    assert [len(layer._forward_pre_hooks) for layer in model.model.layers] == pre
    assert (len(model.model.norm._forward_pre_hooks), len(model.model.norm._forward_hooks)) == norm_hooks
    with torch.no_grad():
        model(ids[:1, :4])                                   # after exit: no longer recorded
    assert tap.take(["layer_in.3"])[0].shape == (2, 9, H)

"""vLLM's dialect of the MLA draft (model/mla_vllm.py; vllm deepseek_eagle3.py @ 03590193) on checkpoints the tests
write themselves: `Eagle3DeepseekV2/V3ForCausalLM` configs, `layers.<i>.*` for every layer with vLLM's unused
later-layer `hidden_norm`, its fused `fused_qkv_a_proj` / `gate_up_proj` and `draft_id_to_target_id`.

The forward of a multi-layer draft (layer 0 reads 2H, layers >= 1 are plain pre-norm MLA layers reading H) is
checked against a reference on transformers' DeepSeek-V3 blocks: test_mla.py's SGLang layer 0, then
`DeepseekV3DecoderLayer`s (dense MLP) whose unmodified `DeepseekV3Attention` reads H, as deepseek_eagle3.py builds
`DeepseekV2MLAAttention(input_size=hidden_size)` for layer_idx > 0.
"""
from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as dv3

from eagle3lib.errors import CheckpointError
from eagle3lib.model.checkpoint import load_draft, save_draft, validate
from eagle3lib.model.config import DraftConfig
from tests.model.test_mla import (H, HT, K_AUX, V, YARN, SglangMlaDraft, hf_config, mla_dict, random_draft, rel_err,
                                  ttt_mask)

V3 = "Eagle3DeepseekV3ForCausalLM"


def vllm_raw(layers: int = 1, arch: str = V3, fields: dict | None = None, **variant) -> dict:
    """A config.json as vLLM's deepseek_eagle3 reads it: fc from num_aux_hidden_states, ids at the top level;
    `variant` as test_mla.mla_dict takes it, `fields` overrides keys."""
    d = mla_dict(**variant)
    del d["eagle_config"]
    d.update(architectures=[arch], num_hidden_layers=layers, num_aux_hidden_states=K_AUX,
             eagle_aux_hidden_state_layer_ids=[2, 4, 6], **(fields or {}))
    return d


def vllm_state(draft, fused: bool = False) -> dict[str, torch.Tensor]:
    """The draft's tensors under vLLM's names: layers.<i>.* for every layer, each with a hidden_norm (every
    DeepseekV2Eagle3DecoderLayer builds one); fused=True: as vLLM's modules hold them (stacked rows, d2t renamed)."""
    sd = {k.replace("midlayer.", "layers.0."): v.clone() for k, v in draft.state_dict().items()}
    for i in range(1, draft.cfg.num_hidden_layers):
        sd[f"layers.{i}.hidden_norm.weight"] = torch.rand(H) + 0.5           # built, never read
    if fused:
        for i in range(draft.cfg.num_hidden_layers):
            p = f"layers.{i}."
            sd[p + "self_attn.fused_qkv_a_proj.weight"] = torch.cat(
                [sd.pop(p + "self_attn.q_a_proj.weight"), sd.pop(p + "self_attn.kv_a_proj_with_mqa.weight")])
            sd[p + "mlp.gate_up_proj.weight"] = torch.cat([sd.pop(p + "mlp.gate_proj.weight"),
                                                           sd.pop(p + "mlp.up_proj.weight")])
        sd["draft_id_to_target_id"] = sd.pop("d2t")
    return sd


def write(folder, raw: dict, sd: dict):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(raw))
    save_file({k: v.contiguous() for k, v in sd.items()}, str(folder / "model.safetensors"))
    return folder


def outputs(model, K: int = 3):
    g = torch.Generator().manual_seed(1)
    aux, ids = torch.randn(2, 7, K_AUX * HT, generator=g), torch.randint(0, V, (2, 7), generator=g)
    with torch.no_grad():
        return model.ttt_forward(aux, ids, K)


def test_config_reads_both_class_names_as_vllm_mla():
    """Eagle3DeepseekV3ForCausalLM (vLLM's alias) is an MLA draft of the vllm dialect, with a warning that SGLang
    has no such class; V2 with top-level ids is the vllm dialect too; fc slots come from num_aux_hidden_states."""
    v3 = DraftConfig.from_dict(vllm_raw())
    assert v3.mla is not None and v3.dialect == "vllm" and v3.num_aux == K_AUX
    assert (v3.aux_layer_ids, v3.aux_ids_convention) == ((2, 4, 6), "input")
    assert any("alias" in w and "SGLang has no class" in w for w in v3.warnings)
    v2 = DraftConfig.from_dict(vllm_raw(arch="Eagle3DeepseekV2ForCausalLM"))
    assert v2.mla == v3.mla and v2.dialect == "vllm" and not any("alias" in w for w in v2.warnings)


def test_config_warns_what_vllm_reads_differently():
    """In the vllm dialect: attention_factor 1.0 (vLLM 0.32.0 runs deepseek_llama_scaling), an
    apply_yarn_scaling vLLM does not read, a null q_lora_rank (its load fails), an fc vLLM cannot size; rope_theta
    without rope_scaling is what vLLM 0.32.0 rotates with (no warning: the running engine built base 50000)."""
    w = DraftConfig.from_dict(vllm_raw(fields={"rope_theta": 50000.0})).warnings
    assert not any("θ=10000" in x or "rope" in x for x in w)
    yarn = DraftConfig.from_dict(vllm_raw(scaling=YARN, fields={"rope_theta": 50000.0})).warnings
    assert not any("deepseek_llama_scaling" in x or "original_max_position" in x for x in yarn)
    llama = DraftConfig.from_dict(vllm_raw(scaling={**YARN, "attention_factor": 1.0})).warnings
    assert any("attention_factor is 1.0" in x and "deepseek_llama_scaling" in x for x in llama)
    off = DraftConfig.from_dict(vllm_raw(scaling={**YARN, "apply_yarn_scaling": False})).warnings
    assert any("apply_yarn_scaling" in x and "does not read" in x for x in off)
    assert any("fused_qkv_a_proj" in x for x in DraftConfig.from_dict(vllm_raw(q_lora=None)).warnings)
    four = {k: v for k, v in vllm_raw().items() if k != "num_aux_hidden_states"}
    four["eagle_aux_hidden_state_layer_ids"] = [0, 2, 4, 6]
    assert any("num_aux_hidden_states" in x for x in DraftConfig.from_dict(four).warnings)


@pytest.mark.parametrize("arch", ["Eagle3DeepseekV2ForCausalLM", V3])
@pytest.mark.parametrize("fused", [False, True])
def test_vllm_checkpoint_equals_the_sglang_naming(tmp_path, arch, fused):
    """A one-layer draft in vLLM's names (split or fused) loads to the same tensors and TTT logits as the same
    weights in SGLang's names and config; validate reports every tensor ok."""
    raw = vllm_raw(arch=arch, scaling=YARN, fc_norm=True, norm_output=True)
    draft = random_draft(DraftConfig.from_dict(raw))
    ours = load_draft(write(tmp_path / "vllm", raw, vllm_state(draft, fused)))
    sglang = load_draft(save_draft(draft, mla_dict(scaling=YARN, fc_norm=True, norm_output=True),
                                   tmp_path / "sglang", include_embed=True))
    assert set(ours.report.status) == {"ok"} and ours.format == ("vllm" if fused else "speculators")
    assert ours.cfg.architecture == arch and ours.cfg.mla == sglang.cfg.mla
    for k, v in sglang.model.state_dict().items():
        assert torch.equal(ours.model.state_dict()[k], v), k
    assert all(torch.equal(a, b) for a, b in zip(outputs(ours.model), outputs(sglang.model)))


@pytest.mark.parametrize("fused", [False, True])
def test_multi_layer_vllm_checkpoint_validates_and_round_trips(tmp_path, fused):
    """A 3-layer vLLM checkpoint: no missing / unexpected key (the later layers' unused hidden_norm is dropped and
    says why), the draft's own tensors; save_draft(format='vllm') writes layers.<i>.* and a vLLM config that loads
    back to the same outputs."""
    raw = vllm_raw(layers=3, scaling=YARN)
    draft = random_draft(DraftConfig.from_dict(raw))
    loaded = load_draft(write(tmp_path / "in", raw, vllm_state(draft, fused)))
    assert set(loaded.report.status) == {"ok"}
    dropped = {old for old, new, _ in loaded.renames if new is None}
    assert dropped == {"layers.1.hidden_norm.weight", "layers.2.hidden_norm.weight"}
    assert all("only layer 0 reads it" in who for _, new, who in loaded.renames if new is None)
    for k, v in draft.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[k], v), k
    out = save_draft(loaded.model, loaded.cfg, tmp_path / "out", format="vllm", include_embed=True)
    written = json.loads((out / "config.json").read_text())
    assert (written["architectures"], written["num_hidden_layers"], written["num_aux_hidden_states"]) == ([V3], 3, 3)
    assert written["eagle_aux_hidden_state_layer_ids"] == [2, 4, 6] and "eagle_config" not in written
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    assert "layers.0.self_attn.kv_a_proj_with_mqa.weight" in keys and not any("midlayer" in k for k in keys)
    again = load_draft(out)
    assert again.cfg.dialect == "vllm" and set(again.report.status) == {"ok"}
    assert all(torch.equal(a, b) for a, b in zip(outputs(again.model), outputs(draft)))


def test_wrong_shaped_kv_a_proj_with_mqa_is_named(tmp_path):
    """A layer-0 kv_a_proj_with_mqa reading H (a later layer's width) instead of 2H is refused naming the key and
    both shapes; so is a fused_qkv_a_proj whose rows do not add up, and one under a null q_lora_rank."""
    raw = vllm_raw(layers=2)
    draft = random_draft(DraftConfig.from_dict(raw))
    sd = vllm_state(draft)
    sd["layers.0.self_attn.kv_a_proj_with_mqa.weight"] = torch.zeros(12 + 8, H)
    assert validate({k.replace("layers.0.", "midlayer."): v for k, v in sd.items()},
                    DraftConfig.from_dict(raw)).set_index("key").loc[
        "midlayer.self_attn.kv_a_proj_with_mqa.weight", "status"] == "shape_mismatch"
    with pytest.raises(CheckpointError, match=r"kv_a_proj_with_mqa.*\[20, 64\].*\[20, 32\]"):
        load_draft(write(tmp_path / "bad", raw, sd))
    fused = vllm_state(draft, fused=True)
    fused["layers.1.self_attn.fused_qkv_a_proj.weight"] = torch.zeros(16 + 12, H)       # k_pe rows missing
    with pytest.raises(CheckpointError, match=r"layers\.1\.self_attn\.fused_qkv_a_proj.*16 \+ 20 = 36.*\[28, 32\]"):
        load_draft(write(tmp_path / "bad_fused", raw, fused))
    no_q = vllm_raw(q_lora=None)
    sd = vllm_state(random_draft(DraftConfig.from_dict(no_q)))
    sd["layers.0.self_attn.fused_qkv_a_proj.weight"] = torch.cat([torch.zeros(16, 2 * H),
                                                                  sd.pop("layers.0.self_attn.kv_a_proj_with_mqa.weight")])
    with pytest.raises(CheckpointError, match="fused_qkv_a_proj.*q_lora_rank"):
        load_draft(write(tmp_path / "no_q", no_q, sd))


class VllmMlaDraft(SglangMlaDraft):
    """deepseek_eagle3's DeepseekV2Eagle3Model on transformers' blocks: test_mla's layer 0 (2H), then dense
    DeepseekV3DecoderLayers whose attention reads H; norm and feedback as DeepseekV2Eagle3Model.forward."""

    def __init__(self, raw: dict):
        super().__init__(raw)
        L = raw["num_hidden_layers"]
        hf = hf_config(raw, L)
        self.layers = nn.ModuleDict({str(i): dv3.DeepseekV3DecoderLayer(hf, layer_idx=i) for i in range(1, L)})

    def copy_from(self, draft):
        sd = {k: v for k, v in draft.state_dict().items() if k != "t2d"}
        mine = {k.replace("midlayer.", ""): v for k, v in sd.items()}        # layers.N.* are the same names
        missing, unexpected = self.load_state_dict(mine, strict=False)
        assert not unexpected and all(m.startswith("rotary.") for m in missing), (missing, unexpected)
        return self

    def ttt(self, aux, ids, steps: int, feed: str = "teacher"):
        """Logits of TTT steps 0..steps-1: every layer recomputed over the rows of steps 0..k with the TTT mask."""
        B, T = ids.shape
        padded = torch.nn.functional.pad(ids, (0, steps + 1))
        h, inputs, hs, out = self.fuse(aux), [], [], []
        t = torch.arange(T)
        for k in range(steps):
            tok = padded[:, 1 + k:T + 1 + k] if k == 0 or feed == "teacher" else out[-1].argmax(-1) + \
                self.d2t[out[-1].argmax(-1)]
            inputs.append(torch.cat([self.input_layernorm(self.embed_tokens(tok)), self.hidden_norm(h)], dim=-1))
            hs.append(h)
            pos = torch.cat([t + j for j in range(k + 1)])[None].expand(B, -1)
            mask = ttt_mask(T, k)
            rows = torch.cat(inputs, dim=1)                                     # (B, (k+1)T, 2H)
            cos_sin = self.rotary(rows, pos)
            r = self.self_attn(rows, cos_sin, mask)[0] + torch.cat(hs, dim=1)   # layer 0: residual = h
            r = r + self.mlp(self.post_attention_layernorm(r))
            for layer in self.layers.values():                                  # layers >= 1 read H
                r = layer(r, attention_mask=mask, position_embeddings=cos_sin)
            r = r[:, k * T:]                                                    # step k's rows
            normed = self.norm(r)
            out.append(self.lm_head(normed))
            h = normed if self.norm_output else r
        return out


@pytest.mark.parametrize("q_lora,scaling,eagle31", [(16, YARN, False), (None, None, True), (16, None, True)])
def test_multi_layer_ttt_equals_transformers_reference(q_lora, scaling, eagle31):
    """A 3-layer MLA draft's TTT logits (teacher and draft feed) equal the DeepSeek-V3 reference (fp32, rel err
    < 1e-5), and KV-cached step() over the prefix equals TTT step 0."""
    raw = vllm_raw(layers=3, q_lora=q_lora, scaling=scaling, fc_norm=eagle31, norm_output=eagle31)
    draft = random_draft(DraftConfig.from_dict(raw))
    ref = VllmMlaDraft(raw).copy_from(draft).eval()
    B, T, K = 2, 8, 3
    aux, ids = torch.randn(B, T, K_AUX * HT), torch.randint(0, V, (B, T))
    with torch.no_grad():
        for feed in ("teacher", "draft"):
            ours, theirs = draft.ttt_forward(aux, ids, K, feed=feed), ref.ttt(aux, ids, K, feed=feed)
            for k in range(K):
                assert rel_err(ours[k], theirs[k]) < 1e-5, (feed, k)
        step, _ = draft.step(aux, torch.nn.functional.pad(ids, (0, 1))[:, 1:], torch.arange(T)[None].expand(B, -1),
                             draft.new_cache(B, 16), fuse=True)
    assert rel_err(step, ours[0]) < 1e-5

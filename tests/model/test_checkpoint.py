"""Checkpoints in every format: exact key names, round trips, validation report, strict loading, bad input."""
from __future__ import annotations

import json
import os

import pytest
import torch
from safetensors.torch import save_file

from eagle3lib.model.formats import detect_format
from eagle3lib.model.checkpoint import (canonicalize, expected_tensors, load_draft, param_table,
                                       save_draft, validate)
from eagle3lib.model.config import DraftConfig
from eagle3lib.model.draft import Eagle3Draft
from eagle3lib.errors import CheckpointError, MissingFileError, UnsafeFileError
from eagle3lib.model.vocab import build_vocab_map


def _trained_like(cfg):
    """A draft with random weights and a real (non-default) vocab map."""
    d = Eagle3Draft(cfg)
    with torch.no_grad():
        for p in d.parameters():
            p.normal_(0, 0.1)
    counts = torch.randint(0, 100, (cfg.vocab_size,))
    d2t, t2d = build_vocab_map(counts, cfg.draft_vocab_size)
    d.d2t.copy_(d2t), d.t2d.copy_(t2d)
    return d.eval()


@pytest.fixture
def world(tmp_path, tiny_cfg_dict):
    """A tiny target dir (embedding only matters) and a SpecForge-format draft without embed_tokens."""
    cfg = DraftConfig.from_dict(tiny_cfg_dict)
    draft = _trained_like(cfg)
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 6,
                                                    "hidden_size": 32, "vocab_size": 120}))
    save_file({"model.embed_tokens.weight": draft.embed_tokens.weight.detach().clone(),
               "model.norm.weight": torch.ones(32), "lm_head.weight": torch.randn(120, 32)},
              str(target / "model.safetensors"))
    sf = save_draft(draft, tiny_cfg_dict, tmp_path / "specforge")
    return cfg, draft, target, sf


def _same_outputs(a, b):
    aux, ids = torch.randn(1, 6, a.cfg.fc_in_features), torch.randint(0, a.cfg.vocab_size, (1, 6))
    with torch.no_grad():
        return all(torch.allclose(x, y, atol=1e-6) for x, y in zip(a.ttt_forward(aux, ids, 2), b.ttt_forward(aux, ids, 2)))


def test_specforge_keys_and_load(world):
    """SpecForge format: midlayer.*, d2t, t2d and no embed_tokens; loading takes the embedding from the target."""
    cfg, draft, target, sf = world
    from safetensors import safe_open
    with safe_open(str(sf / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    assert "midlayer.self_attn.q_proj.weight" in keys and {"fc.weight", "d2t", "t2d", "lm_head.weight"} <= keys
    assert not any("embed" in k for k in keys)
    loaded = load_draft(sf, target=target)
    assert loaded.format == "specforge" and loaded.taken_from_target == ("embed_tokens.weight",)
    assert set(loaded.report.status) == {"ok", "from_target"}
    assert _same_outputs(loaded.model, draft)


@pytest.mark.parametrize("fmt", ["speculators", "modelopt", "eagle_bin", "sharded", "sglang_prefixed",
                                 "modelopt_internal"])
def test_round_trip_every_format(world, tmp_path, fmt, tiny_cfg_dict):
    """format -> load -> save -> load gives the same draft outputs, for every writer's key names."""
    cfg, draft, target, sf = world
    sd = {k: v for k, v in draft.state_dict().items() if k != "embed_tokens.weight"}
    d = tmp_path / fmt
    d.mkdir()
    if fmt in ("speculators", "modelopt"):
        save_draft(draft, cfg if fmt == "speculators" else tiny_cfg_dict, d, format=fmt)
        from safetensors import safe_open
        with safe_open(str(d / "model.safetensors"), "pt") as f:
            keys = set(f.keys())
        assert "layers.0.self_attn.q_proj.weight" in keys and not any(k.startswith("midlayer") for k in keys)
        assert ("t2d" in keys) == (fmt == "speculators")
    else:
        (d / "config.json").write_text(json.dumps(tiny_cfg_dict))
        if fmt == "eagle_bin":
            torch.save(sd, d / "pytorch_model.bin")
        elif fmt == "sharded":
            names = sorted(sd)
            a, b = names[: len(names) // 2], names[len(names) // 2:]
            save_file({k: sd[k].contiguous() for k in a}, str(d / "model-00001-of-00002.safetensors"))
            save_file({k: sd[k].contiguous() for k in b}, str(d / "model-00002-of-00002.safetensors"))
            wm = {k: "model-00001-of-00002.safetensors" for k in a} | {k: "model-00002-of-00002.safetensors" for k in b}
            (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wm}))
        elif fmt == "sglang_prefixed":
            save_file({("model." + k if k != "lm_head.weight" else k): v.contiguous() for k, v in sd.items()},
                      str(d / "model.safetensors"))
        else:   # ModelOpt internal names (Dec-2025 EagleModule)
            ren = {"midlayer.hidden_norm.weight": "eagle_module.hidden_norm.weight",
                   "midlayer.input_layernorm.weight": "eagle_module.input_embeds_norm.weight",
                   "lm_head.weight": "eagle_module.eagle_lm_head.weight"}
            out = {ren.get(k, "eagle_module." + k.replace("midlayer.", "layers.0.")): v.contiguous()
                   for k, v in sd.items() if k != "t2d"}
            save_file(out, str(d / "model.safetensors"))
    first = load_draft(d, target=target)
    assert _same_outputs(first.model, draft)
    again = load_draft(save_draft(first.model, first.cfg, tmp_path / (fmt + "_resaved")), target=target)
    assert _same_outputs(again.model, draft)


def test_detect_format_and_canonicalize():
    """Key maps: layers.0 -> midlayer, ModelOpt names, SGLang prefix, vLLM d2t name."""
    sd = {"layers.0.self_attn.q_proj.weight": 1, "eagle_module.input_embeds_norm.weight": 2,
          "model.fc.weight": 3, "draft_id_to_target_id": 4, "aux_norm_mid.weight": 5}
    sd = {k: torch.tensor(v) for k, v in sd.items()}
    out, renames = canonicalize(sd)
    assert set(out) == {"midlayer.self_attn.q_proj.weight", "midlayer.input_layernorm.weight", "fc.weight", "d2t",
                        "fc_norm.1.weight"}
    assert len(renames) == 5
    assert detect_format(["layers.0.mlp.up_proj.weight"]) == "speculators"
    with pytest.raises(CheckpointError, match="same canonical name"):
        canonicalize({"midlayer.norm.weight": torch.ones(1), "layers.0.norm.weight": torch.ones(1)})


def test_validation_report_lists_every_problem(world):
    """Missing, unexpected, shape-mismatched and dtype-odd tensors are all reported, with a slot-count hint."""
    cfg, draft, *_ = world
    sd = {k: v for k, v in draft.state_dict().items() if k != "embed_tokens.weight"}
    del sd["midlayer.mlp.up_proj.weight"]
    sd["fc.weight"] = torch.zeros(32, 96)
    sd["d2t"] = sd["d2t"].int()
    sd["layers.1.foo"] = torch.zeros(2)
    rep = validate(sd, cfg).set_index("key")
    assert rep.loc["midlayer.mlp.up_proj.weight", "status"] == "missing"
    assert rep.loc["fc.weight", "status"] == "shape_mismatch" and "3 aux slots" in rep.loc["fc.weight", "note"]
    assert rep.loc["d2t", "status"] == "dtype_odd" and rep.loc["layers.1.foo", "status"] == "unexpected"
    assert rep.loc["embed_tokens.weight", "status"] == "from_target"


def test_wrong_shape_raises_with_key_expected_found(world, tmp_path, tiny_cfg_dict):
    """A tensor of the wrong shape names the file, key, expected and found shapes."""
    cfg, draft, target, sf = world
    sd = {k: v.contiguous() for k, v in draft.state_dict().items() if k != "embed_tokens.weight"}
    sd["fc.weight"] = torch.zeros(32, 96)
    d = tmp_path / "bad"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(tiny_cfg_dict))
    save_file(sd, str(d / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"key 'fc.weight'.*expected \[32, 128\], found \[32, 96\]"):
        load_draft(d, target=target)


def _saved(tmp_path, tiny_cfg_dict, sd, name):
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(tiny_cfg_dict))
    save_file({k: v.contiguous() for k, v in sd.items()}, str(d / "model.safetensors"))
    return d


def test_fill_loads_a_draft_missing_tensors_as_an_engine_runs_it(world, tmp_path, tiny_cfg_dict):
    """missing="fill": a renamed MLP tensor, a mis-shaped fc and a lost lm_head each stand in (a seeded random init;
    the head also as vLLM's borrow of the target's first Vd rows), each recorded with file, key, expected, found and
    cause; the same draft refused by default; the same stand-in on every load."""
    cfg, draft, target, _ = world
    sd = {k: v for k, v in draft.state_dict().items() if k != "embed_tokens.weight"}
    sd["midlayer.mlp.gate.weight"] = sd.pop("midlayer.mlp.gate_proj.weight")
    sd["fc.weight"] = torch.full((32, 96), 0.5)
    del sd["lm_head.weight"]
    d = _saved(tmp_path, tiny_cfg_dict, sd, "broken")
    with pytest.raises(CheckpointError, match="key 'fc.weight'"):
        load_draft(d, target=target)
    a = load_draft(d, target=target, missing="fill")
    got = {f.key: f for f in a.filled}
    assert set(got) == {"midlayer.mlp.gate_proj.weight", "fc.weight", "lm_head.weight"}
    assert got["fc.weight"].found == (32, 96) and got["fc.weight"].expected == (32, 128)
    assert got["lm_head.weight"].cause == "lm_head_missing" and got["fc.weight"].cause == "weights_dropped"
    assert got["midlayer.mlp.gate_proj.weight"].found is None and got["lm_head.weight"].fill == "random"
    assert "key 'fc.weight': expected [32, 128], found [32, 96]" in got["fc.weight"].sentence()
    assert got["fc.weight"].file.endswith("model.safetensors")
    b = load_draft(d, target=target, missing="fill")
    assert torch.equal(a.model.fc.weight, b.model.fc.weight)
    assert not torch.equal(a.model.fc.weight, torch.zeros(32, 128))
    sliced = load_draft(d, target=target, missing="fill", lm_head="target_sliced")
    from eagle3lib.model.target import load_target_tensor
    head = load_target_tensor(target, "lm_head")
    assert torch.equal(sliced.model.lm_head.weight, head[:cfg.draft_vocab_size])
    assert next(f for f in sliced.filled if f.key == "lm_head.weight").fill == "target_sliced"
    # the found tensor in the expected shape, zeros past it (FILLS "padded": what SGLang's CPU loader runs)
    pad = got["fc.weight"].padded
    assert tuple(pad.shape) == (32, 128) and torch.equal(pad[:, :96], torch.full((32, 96), 0.5))
    assert torch.equal(pad[:, 96:], torch.zeros(32, 32))
    assert got["midlayer.mlp.gate_proj.weight"].padded is None and got["lm_head.weight"].padded is None


def test_padded_into_puts_a_smaller_tensor_first_and_refuses_a_larger_one():
    from eagle3lib.model.checkpoint import padded_into
    t = torch.arange(1.0, 7.0).reshape(2, 3)
    out = padded_into(t, (4, 3))
    assert torch.equal(out[:2], t) and torch.equal(out[2:], torch.zeros(2, 3))
    assert padded_into(t, (1, 3)) is None and padded_into(t, (6,)) is None
    assert padded_into(t.long(), (4, 3)) is None


def test_d2t_wrong_length(world, tmp_path, tiny_cfg_dict):
    """d2t of the wrong length is refused with both lengths."""
    cfg, draft, target, _ = world
    sd = {k: v.contiguous() for k, v in draft.state_dict().items() if k != "embed_tokens.weight"}
    sd["d2t"] = sd["d2t"][:-3].contiguous()
    d = tmp_path / "badd2t"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(tiny_cfg_dict))
    save_file(sd, str(d / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"d2t.*expected \[40\], found \[37\]"):
        load_draft(d, target=target)
    f = load_draft(d, target=target, missing="fill")          # zero offsets stand in, named
    assert [(x.key, x.found, x.fill, x.cause) for x in f.filled] == [("d2t", (37,), "zeros", "d2t_mapping")]
    assert int(f.model.d2t.abs().sum()) == 0


def test_missing_vocab_map_loads_but_is_flagged(world, tmp_path, tiny_cfg_dict):
    """A draft saved without d2t/t2d loads with an identity map and the vocab check says why that is wrong."""
    cfg, draft, target, _ = world
    sd = {k: v.contiguous() for k, v in draft.state_dict().items() if k not in ("embed_tokens.weight", "d2t", "t2d")}
    d = tmp_path / "nod2t"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(tiny_cfg_dict))
    save_file(sd, str(d / "model.safetensors"))
    loaded = load_draft(d, target=target)
    bad = [f for f in loaded.vocab if not f.ok]
    assert bad and bad[0].check == "d2t present" and "collapses" in bad[0].detail
    assert torch.equal(loaded.model.d2t, torch.zeros(40, dtype=torch.long))


def test_pickled_object_is_refused_and_not_run(world, tmp_path, tiny_cfg_dict):
    """A .bin holding a pickled object that would run code is refused; the code does not run."""
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    d = tmp_path / "evil"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(tiny_cfg_dict))
    torch.save({"fc.weight": Evil()}, d / "pytorch_model.bin")
    with pytest.raises(UnsafeFileError, match="pytorch_model.bin"):
        load_draft(d, target=world[2])
    assert not marker.exists()


@pytest.mark.parametrize("damage", ["truncate", "zero", "header"])
def test_corrupt_safetensors(world, tmp_path, damage):
    """Truncated, empty and corrupt safetensors files give a CheckpointError naming the file."""
    *_, sf = world
    f = sf / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes({"truncate": data[: len(data) // 2], "zero": b"", "header": b"\xff" * 8 + data[8:]}[damage])
    with pytest.raises(CheckpointError, match="model.safetensors"):
        load_draft(sf, target=world[2])


def test_target_without_embedding(world, tmp_path):
    """A target directory without an embedding tensor is named, with the keys it does have."""
    cfg, draft, target, sf = world
    save_file({"lm_head.weight": torch.zeros(120, 32)}, str(target / "model.safetensors"))
    with pytest.raises(CheckpointError, match="no embed tensor"):
        load_draft(sf, target=target)
    with pytest.raises(CheckpointError, match="no target was given"):
        load_draft(sf)
    with pytest.raises(MissingFileError):
        load_draft(sf, target=tmp_path / "nowhere")


def test_sharded_index_with_missing_shard(world, tmp_path, tiny_cfg_dict):
    """An index pointing at a missing shard names the shard."""
    d = tmp_path / "shard"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(tiny_cfg_dict))
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"fc.weight": "model-1.safetensors"}}))
    with pytest.raises(MissingFileError, match="model-1.safetensors"):
        load_draft(d, target=world[2])


def test_bf16_load_keeps_vocab_dtypes(world):
    """Loading in bf16 casts weights only; d2t stays int64 and t2d bool."""
    cfg, draft, target, sf = world
    m = load_draft(sf, target=target, dtype=torch.bfloat16).model
    assert m.fc.weight.dtype == torch.bfloat16 and m.d2t.dtype == torch.int64 and m.t2d.dtype == torch.bool
    table = param_table(m)
    assert table.iloc[-1]["numel"] == sum(p.numel() for p in m.parameters()) + m.d2t.numel() + m.t2d.numel()


MLA_RAW = {"architectures": ["Eagle3DeepseekV2ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 32,
           "intermediate_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 120,
           "draft_vocab_size": 40, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 64,
           "q_lora_rank": 16, "kv_lora_rank": 12, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 6,
           "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                            "original_max_position_embeddings": 16},
           "fc_norm": True, "norm_output": True, "num_aux_hidden_states": 3,
           "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 5], "use_aux_hidden_state": True}}


def test_mla_expected_tensors_are_the_checkpoint_names():
    """An MLA draft expects SGLang's / DeepSeek's MLA names and shapes (q_lora_rank set and null)."""
    from eagle3lib.model.checkpoint import expected_tensors
    exp = {k: s for k, (s, _) in expected_tensors(DraftConfig.from_dict(MLA_RAW)).items()}
    att = {k.split("self_attn.")[1]: s for k, s in exp.items() if "self_attn." in k}
    assert att == {"q_a_proj.weight": (16, 64), "q_a_layernorm.weight": (16,), "q_b_proj.weight": (4 * 16, 16),
                   "kv_a_proj_with_mqa.weight": (12 + 8, 64), "kv_a_layernorm.weight": (12,),
                   "kv_b_proj.weight": (4 * (8 + 6), 12), "o_proj.weight": (32, 4 * 6)}
    assert {"fc_norm.0.weight", "fc.weight", "midlayer.mlp.gate_proj.weight", "norm.weight"} <= set(exp)
    no_q_lora = expected_tensors(DraftConfig.from_dict(dict(MLA_RAW, q_lora_rank=None)))
    assert no_q_lora["midlayer.self_attn.q_proj.weight"][0] == (4 * 16, 64)
    assert not any("q_a_" in k or "q_b_" in k for k in no_q_lora)


@pytest.mark.parametrize("fmt", ["specforge", "speculators", "sglang_prefixed"])
def test_mla_round_trip(tmp_path, fmt):
    """MLA drafts load as a direct copy (midlayer.*, Kimi's layers.0.*, SGLang's model.* names) and save_draft
    round-trips them with an SGLang-dialect config."""
    cfg = DraftConfig.from_dict(MLA_RAW)
    draft = _trained_like(cfg)
    d = tmp_path / fmt
    if fmt == "sglang_prefixed":
        d.mkdir()
        (d / "config.json").write_text(json.dumps(MLA_RAW))
        save_file({("model." + k if k != "lm_head.weight" else k): v.contiguous()
                   for k, v in draft.state_dict().items()}, str(d / "model.safetensors"))
    else:
        save_draft(draft, cfg, d, format=fmt, include_embed=True)
        written = json.loads((d / "config.json").read_text())
        assert written["architectures"] == ["Eagle3DeepseekV2ForCausalLM"] and written["kv_lora_rank"] == 12
    loaded = load_draft(d)
    assert loaded.cfg.mla == cfg.mla and set(loaded.report.status) == {"ok"}
    for k, v in draft.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[k], v), k
    assert _same_outputs(loaded.model, draft)
    again = load_draft(save_draft(loaded.model, loaded.cfg, tmp_path / "again", include_embed=True))
    assert _same_outputs(again.model, draft)


def test_mla_wrong_latent_shape_names_key(tmp_path):
    """A kv_b_proj trained for another kv_lora_rank is refused naming the key, expected and found shapes."""
    cfg = DraftConfig.from_dict(MLA_RAW)
    sd = _trained_like(cfg).state_dict()
    sd["midlayer.self_attn.kv_b_proj.weight"] = torch.zeros(4 * 14, 10)
    save_draft(sd, MLA_RAW, tmp_path / "bad", include_embed=True)
    with pytest.raises(CheckpointError, match=r"kv_b_proj.*\[56, 12\].*\[56, 10\]"):
        load_draft(tmp_path / "bad")


@pytest.mark.parametrize("over", [{"num_hidden_layers": 3},
                                  {"num_hidden_layers": 2, "model_type": "qwen3", "attention_bias": True}])
@pytest.mark.parametrize("fmt", ["specforge", "speculators"])
def test_multi_layer_and_qwen3_keys_round_trip(world, tmp_path, tiny_cfg_dict, over, fmt):
    """Layer 0 is midlayer.* (layers.0.* in speculators), later layers layers.N.* in both formats, Qwen3 adds the
    q/k norms and biases: expected_tensors names them all, and save -> load gives the same outputs."""
    cfg = DraftConfig.from_dict(dict(tiny_cfg_dict, **over))
    draft = _trained_like(cfg)
    draft.embed_tokens.weight.data.copy_(world[1].embed_tokens.weight)                 # the target's embedding
    exp = expected_tensors(cfg)
    L = cfg.num_hidden_layers
    assert {f"layers.{i}.input_layernorm.weight" for i in range(1, L)} <= set(exp)
    assert exp["layers.1.self_attn.q_proj.weight"][0] == (32, 32)                      # later layers read H
    assert exp["midlayer.self_attn.q_proj.weight"][0] == (32, 64)                      # the first one 2H
    assert not any(k.startswith(("layers.0.", f"layers.{L}.")) for k in exp)
    if cfg.qk_norm:
        assert exp["layers.1.self_attn.k_norm.weight"][0] == (8,) and "midlayer.self_attn.o_proj.bias" in exp
    out = save_draft(draft, cfg, tmp_path / fmt, format=fmt)
    from safetensors import safe_open
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    first = "layers.0." if fmt == "speculators" else "midlayer."
    assert {k.replace("midlayer.", first, 1) for k in exp if k != "embed_tokens.weight"} == keys
    loaded = load_draft(out, target=world[2])
    assert (loaded.cfg.num_hidden_layers, loaded.cfg.qk_norm) == (L, cfg.qk_norm)
    assert set(loaded.report.status) == {"ok", "from_target"}
    assert _same_outputs(loaded.model, draft)


def test_layer_count_and_architecture_mismatches_are_named(world, tiny_cfg_dict):
    """A 2-layer Qwen3 checkpoint read with a 1-layer Llama config: its layer 1 and q/k norms are reported
    unexpected with the config field to fix; read with a 3-layer config, layer 2 is missing."""
    cfg2 = DraftConfig.from_dict(dict(tiny_cfg_dict, num_hidden_layers=2, model_type="qwen3"))
    sd = {k: v for k, v in _trained_like(cfg2).state_dict().items() if k != "embed_tokens.weight"}
    rep = validate(sd, DraftConfig.from_dict(tiny_cfg_dict)).set_index("key")
    assert rep.loc["layers.1.mlp.up_proj.weight", "status"] == "unexpected"
    assert "num_hidden_layers=1" in rep.loc["layers.1.mlp.up_proj.weight", "note"]
    assert "model_type should be 'qwen3'" in rep.loc["midlayer.self_attn.q_norm.weight", "note"]
    rep3 = validate(sd, DraftConfig.from_dict(dict(tiny_cfg_dict, num_hidden_layers=3, model_type="qwen3")))
    missing = set(rep3[rep3.status == "missing"].key)
    assert "layers.2.self_attn.q_proj.weight" in missing and not any(k.startswith("layers.1.") for k in missing)


def test_a_later_layers_sglang_norm_name_is_its_input_layernorm():
    """SGLang (>= PR #24663) calls a later layer's input norm hidden_norm: it maps to layers.N.input_layernorm;
    a checkpoint with both names is refused, naming the key."""
    out, renames = canonicalize({"model.layers.2.hidden_norm.weight": torch.ones(2),
                                 "layers.0.hidden_norm.weight": torch.ones(2)})
    assert set(out) == {"layers.2.input_layernorm.weight", "midlayer.hidden_norm.weight"}
    assert ("model.layers.2.hidden_norm.weight", "layers.2.input_layernorm.weight") in [r[:2] for r in renames]
    with pytest.raises(CheckpointError, match="hidden_norm and input_layernorm"):
        canonicalize({"layers.1.hidden_norm.weight": torch.ones(1), "layers.1.input_layernorm.weight": torch.ones(1)})


# ---------------------------------------------------------------- P-EAGLE: mask_hidden, the trained embedding

def _peagle(tiny_cfg_dict):
    from eagle3lib.model.peagle import PEagleDraft
    raw = {**tiny_cfg_dict, "architectures": ["PEagleDraftModel"], "mask_token_id": 7}
    cfg = DraftConfig.from_dict(raw)
    d = PEagleDraft(cfg)
    with torch.no_grad():
        for p in d.parameters():
            p.normal_(0, 0.1)
    return raw, cfg, d.eval()


@pytest.mark.parametrize("fmt,layer_key", [("speculators", "layers.0.mlp.up_proj.weight"),
                                           ("specforge", "layers.0.mlp.up_proj.weight")])
def test_peagle_round_trip_keeps_mask_hidden_and_the_trained_embedding(tmp_path, tiny_cfg_dict, fmt, layer_key):
    """save_draft writes mask_hidden and embed_tokens (P-EAGLE trains it) and SpecForge's layers.0 names; loading
    it back gives the same P-EAGLE forward, without a target."""
    from safetensors import safe_open
    raw, cfg, d = _peagle(tiny_cfg_dict)
    out = save_draft(d, cfg, tmp_path / fmt, format=fmt)
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    assert {"mask_hidden", "embed_tokens.weight", layer_key} <= keys and not any("midlayer" in k for k in keys)
    loaded = load_draft(out)
    assert loaded.cfg.parallel_drafting and loaded.cfg.mask_token_id == 7
    assert torch.equal(loaded.model.mask_hidden, d.mask_hidden)
    aux, ids = torch.randn(1, 6, cfg.fc_in_features), torch.randint(0, cfg.vocab_size, (1, 6))
    with torch.no_grad():
        assert all(torch.equal(a, b) for a, b in zip(loaded.model.parallel_forward(aux, ids, 3),
                                                     d.parallel_forward(aux, ids, 3)))


def test_peagle_mask_hidden_missing_or_misshapen_is_named(tmp_path, tiny_cfg_dict):
    raw, cfg, d = _peagle(tiny_cfg_dict)
    sd = {k: v.contiguous() for k, v in d.state_dict().items()}
    rep = validate({k: v for k, v in sd.items() if k != "mask_hidden"}, cfg)
    assert rep.set_index("key").loc["mask_hidden", "status"] == "missing"
    bad = dict(sd, mask_hidden=torch.zeros(1, 1, 2 * cfg.target_hidden_size))
    row = validate(bad, cfg).set_index("key").loc["mask_hidden"]
    assert row.status == "shape_mismatch" and "holds 2 aux slots" in row.note
    (tmp_path / "d").mkdir()
    save_file(bad, str(tmp_path / "d" / "model.safetensors"))
    (tmp_path / "d" / "config.json").write_text(json.dumps(raw))
    with pytest.raises(CheckpointError, match="mask_hidden"):
        load_draft(tmp_path / "d")


def test_mask_hidden_under_a_plain_eagle3_config_is_flagged_as_p_eagle(tiny_cfg_dict):
    raw, cfg, d = _peagle(tiny_cfg_dict)
    rep = validate(dict(d.state_dict()), DraftConfig.from_dict(tiny_cfg_dict)).set_index("key")
    assert rep.loc["mask_hidden", "status"] == "unexpected" and "P-EAGLE" in rep.loc["mask_hidden", "note"]

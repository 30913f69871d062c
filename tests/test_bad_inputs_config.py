"""Bad-input corpus, part 2: draft and target config.json, draft checkpoints, d2t/t2d, layer layouts."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from eagle3lib.model import checkpoint, config, target, vocab
from eagle3lib import layout
from eagle3lib.model.config import DraftConfig
from eagle3lib.model.draft import Eagle3Draft
from eagle3lib.errors import CheckpointError, ConfigError, LayoutError, MissingFileError, VocabError
from tests.conftest import TINY_SPECFORGE
from tests.test_bad_inputs import Case, ids, run_case

V, VD = TINY_SPECFORGE["vocab_size"], TINY_SPECFORGE["draft_vocab_size"]   # 120, 40


def _config(body, name: str = "config.json"):
    """Builder: a config file from a dict (edited copy of the tiny SpecForge config) or raw text."""
    def build(tmp: Path) -> dict:
        p = tmp / name
        p.write_bytes(body if isinstance(body, bytes) else
                      (body if isinstance(body, str) else json.dumps(body)).encode())
        return {"path": str(p)}
    return build


def _edited(**changes) -> dict:
    """The tiny SpecForge config with keys changed (value None deletes the key)."""
    d = copy.deepcopy(TINY_SPECFORGE)
    for k, v in changes.items():
        if v is None:
            d.pop(k, None)
        else:
            d[k] = v
    return d


def _good_state() -> dict:
    """A consistent tiny draft state dict (no embedding), with a real d2t/t2d."""
    cfg = DraftConfig.from_dict(TINY_SPECFORGE)
    sd = {k: v.clone() for k, v in Eagle3Draft(cfg).state_dict().items() if k != "embed_tokens.weight"}
    sd["d2t"], sd["t2d"] = vocab.build_vocab_map(torch.arange(V, 0, -1), VD)
    return sd


def _target_dir(tmp: Path) -> Path:
    t = tmp / "target"
    t.mkdir(exist_ok=True)
    (t / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 6,
                                               "hidden_size": 32, "vocab_size": V}))
    save_file({"model.embed_tokens.weight": torch.zeros(V, 32), "model.norm.weight": torch.ones(32)},
              str(t / "model.safetensors"))
    return t


def _draft(mutate):
    """Builder: draft dir (config + model.safetensors) after mutate(state dict), and a target dir."""
    def build(tmp: Path) -> dict:
        d = tmp / "draft"
        d.mkdir()
        sd = _good_state()
        mutate(sd)
        save_file(sd, str(d / "model.safetensors"))
        (d / "config.json").write_text(json.dumps(TINY_SPECFORGE))
        return {"dir": str(d), "path": str(d / "model.safetensors"), "target": str(_target_dir(tmp))}
    return build


def _set(key, value):
    return lambda sd: sd.__setitem__(key, value)


def _target(body):
    """Builder: a target dir whose config.json is `body` (dict, text or bytes) and which has no weights."""
    def build(tmp: Path) -> dict:
        p = _config(body)(tmp)["path"]
        return {"path": p, "dir": str(tmp)}
    return build


def _vocab(d2t, t2d=None):
    """Builder: d2t/t2d tensors in the context (no file: validate_vocab is called on tensors)."""
    return lambda tmp: {"d2t": d2t, "t2d": t2d}


def _validate(c):
    return vocab.validate_vocab(c["d2t"], c["t2d"], V, VD, where="draft model.safetensors")


_D2T_OK, _T2D_OK = vocab.build_vocab_map(torch.arange(V) * 37 % V, VD)  # a non-trivial valid map
load_cfg = config.load_config

CASES = [
    Case("config_not_json", "config", _config('{"hidden_size": 32,\n "vocab_size": 120,\n'),
         lambda c: load_cfg(c["path"]), ConfigError, ("{path}", "line 3", "not valid JSON", "expected JSON",
                                                        "found")),
    Case("config_binary_garbage", "config", _config(b"\x00\xff\xfe\x80PK\x03\x04"), lambda c: load_cfg(c["path"]),
         ConfigError, ("{path}", "line 1 column 1", "not valid JSON")),
    Case("config_json_array", "config", _config([TINY_SPECFORGE]), lambda c: load_cfg(c["path"]), ConfigError,
         ("{path}", "not a JSON object", "found list")),
    Case("config_missing_hidden_size", "config", _config(_edited(hidden_size=None)), lambda c: load_cfg(c["path"]),
         ConfigError, ("{path}", "key 'hidden_size'", "required field missing", "a int", "found nothing")),
    Case("config_missing_vocab_size_speculators", "config",
         _config({"architectures": ["Eagle3Speculator"], "speculators_config": {},
                  "transformer_layer_config": {"hidden_size": 32, "num_attention_heads": 4}}),
         lambda c: load_cfg(c["path"]), ConfigError,
         ("{path}", "key 'transformer_layer_config.vocab_size'", "required field missing")),
    Case("config_speculators_layer_config_not_object", "config",
         _config({"architectures": ["Eagle3Speculator"], "transformer_layer_config": [32, 4]}),
         lambda c: load_cfg(c["path"]), ConfigError, ("{path}", "'transformer_layer_config'", "not an object",
                                                       "found list")),
    Case("config_hidden_size_string", "config", _config(_edited(hidden_size="32")), lambda c: load_cfg(c["path"]),
         ConfigError, ("{path}", "key 'hidden_size'", "wrong type", "an integer", "'32'")),
    Case("config_zero_heads", "config", _config(_edited(num_attention_heads=0, num_key_value_heads=None)),
         lambda c: load_cfg(c["path"]), ConfigError, ("{path}", "key 'num_attention_heads'", "found 0")),
    Case("config_kv_heads_string", "config", _config(_edited(num_key_value_heads="2")),
         lambda c: load_cfg(c["path"]), ConfigError, ("{path}", "key 'num_key_value_heads'", "'2'")),
    Case("config_kv_heads_not_divisor", "config", _config(_edited(num_key_value_heads=3)),
         lambda c: load_cfg(c["path"]), ConfigError, ("{path}", "key 'num_key_value_heads'", "a divisor of 4",
                                                       "found 3")),
    Case("config_draft_vocab_string", "config", _config(_edited(draft_vocab_size="40k")),
         lambda c: load_cfg(c["path"]), ConfigError, ("{path}", "key 'draft_vocab_size'", "'40k'")),
    Case("config_max_positions_string", "config", _config(_edited(max_position_embeddings="2k")),
         lambda c: load_cfg(c["path"]), ConfigError, ("{path}", "key 'max_position_embeddings'", "'2k'")),
    Case("config_architectures_not_strings", "config", _config(_edited(architectures=[7])),
         lambda c: load_cfg(c["path"]), ConfigError, ("{path}", "key 'architectures'", "[7]")),
    Case("config_layer_ids_not_integers", "config",
         _config(_edited(eagle_config={"eagle_aux_hidden_state_layer_ids": ["1", "3"]})),
         lambda c: load_cfg(c["path"]), ConfigError,
         ("{path}", "eagle_config.eagle_aux_hidden_state_layer_ids", "[int, ...]", "['1', '3']")),
    Case("config_rope_theta_negative", "config", _config(_edited(rope_theta=-10000)),
         lambda c: load_cfg(c["path"]), ConfigError, ("{path}", "key 'rope_theta'", "> 0", "-10000")),
    Case("config_rope_scaling_not_object", "config", _config(_edited(rope_scaling="linear")),
         lambda c: load_cfg(c["path"]), ConfigError, ("{path}", "key 'rope_scaling'", "'linear'")),
    Case("config_mla_missing_kv_lora_rank", "config",
         _config(_edited(architectures=["Eagle3DeepseekV2ForCausalLM"], q_lora_rank=16, qk_rope_head_dim=8,
                         qk_nope_head_dim=8, v_head_dim=6)),
         lambda c: load_cfg(c["path"]), ConfigError,
         ("{path}", "key 'kv_lora_rank'", "required field of an MLA draft missing", "found nothing")),
    Case("config_mla_odd_rope_dim", "config",
         _config(_edited(architectures=["Eagle3DeepseekV2ForCausalLM"], q_lora_rank=16, kv_lora_rank=12,
                         qk_rope_head_dim=7, qk_nope_head_dim=8, v_head_dim=6)),
         lambda c: load_cfg(c["path"]), ConfigError, ("{path}", "key 'qk_rope_head_dim'", "must be even", "found 7")),
    Case("config_missing_file", "config", lambda tmp: {"path": str(tmp / "config.json")},
         lambda c: load_cfg(c["path"]), MissingFileError, ("{path}", "draft config.json not found", "no such file")),
    Case("target_config_missing_layers", "target", _target({"hidden_size": 32, "vocab_size": V}),
         lambda c: target.load_target_info(c["dir"]), ConfigError,
         ("{path}", "key 'num_hidden_layers'", "required target field missing", "missing ['num_hidden_layers']")),
    Case("target_config_json_array", "target", _target([1, 2]), lambda c: target.load_target_info(c["dir"]),
         ConfigError, ("{path}", "not a JSON object", "list")),
    Case("target_config_binary_garbage", "target", _target(b"\xff\xfe\x00\x01"),
         lambda c: target.load_target_info(c["dir"]), ConfigError, ("{path}", "not valid JSON")),
    Case("target_config_layers_string", "target",
         _target({"num_hidden_layers": "six", "hidden_size": 32, "vocab_size": V}),
         lambda c: target.load_target_info(c["dir"]), ConfigError, ("{path}", "key 'num_hidden_layers'", "'six'")),
    Case("target_without_embedding", "target",
         lambda tmp: (save_file({"lm_head.weight": torch.zeros(4, 2)}, str(tmp / "model.safetensors")),
                      {"dir": str(tmp)})[1],
         lambda c: target.load_target_tensor(c["dir"], "embed"), CheckpointError,
         ("{dir}", "no embed tensor", "model.embed_tokens.weight", "['lm_head.weight']")),
    Case("draft_fc_wrong_width", "checkpoint", _draft(_set("fc.weight", torch.zeros(32, 96))),
         lambda c: checkpoint.load_draft(c["dir"], target=c["target"]), CheckpointError,
         ("{path}", "key 'fc.weight'", "shape mismatch", "[32, 128]", "[32, 96]", "fc reads 3 aux slots")),
    Case("draft_lm_head_wrong_rows", "checkpoint", _draft(_set("lm_head.weight", torch.zeros(39, 32))),
         lambda c: checkpoint.load_draft(c["dir"], target=c["target"]), CheckpointError,
         ("{path}", "key 'lm_head.weight'", "[40, 32]", "[39, 32]")),
    Case("draft_tensor_missing", "checkpoint", _draft(lambda sd: sd.pop("midlayer.mlp.down_proj.weight")),
         lambda c: checkpoint.load_draft(c["dir"], target=c["target"]), CheckpointError,
         ("{path}", "key 'midlayer.mlp.down_proj.weight'", "tensor missing", "[32, 64]", "found nothing")),
    Case("draft_d2t_wrong_length", "checkpoint", _draft(_set("d2t", torch.zeros(39, dtype=torch.long))),
         lambda c: checkpoint.load_draft(c["dir"], target=c["target"]), CheckpointError,
         ("{path}", "key 'd2t'", "wrong length", "[40]", "[39]")),
    Case("draft_two_copies_of_a_tensor", "checkpoint",
         _draft(lambda sd: sd.__setitem__("layers.0.mlp.down_proj.weight", sd["midlayer.mlp.down_proj.weight"].clone())),
         lambda c: checkpoint.load_draft(c["dir"], target=c["target"]), CheckpointError,
         ("key 'midlayer.mlp.down_proj.weight'", "same canonical name", "one tensor per name")),
    Case("draft_no_embedding_no_target", "checkpoint", _draft(lambda sd: None),
         lambda c: checkpoint.load_draft(c["dir"]), CheckpointError,
         ("{dir}", "no embed_tokens.weight", "a target directory", "target=None")),
    Case("target_embedding_wrong_width", "checkpoint",
         lambda tmp: {**_draft(lambda sd: None)(tmp),
                      "_": save_file({"model.embed_tokens.weight": torch.zeros(V, 16)},
                                     str(tmp / "target" / "model.safetensors"))},
         lambda c: checkpoint.load_draft(c["dir"], target=c["target"]), CheckpointError,
         ("{target}", "target embedding", "[120, 32]", "[120, 16]")),
    Case("d2t_wrong_length", "vocab", _vocab(_D2T_OK[:-1], None), _validate, VocabError,
         ("draft model.safetensors", "d2t shape", "[39]", "40 rows")),
    Case("d2t_float_dtype", "vocab", _vocab(_D2T_OK.float(), _T2D_OK), _validate, VocabError,
         ("draft model.safetensors", "d2t dtype", "torch.float32", "int64")),
    Case("d2t_out_of_range", "vocab", _vocab(_D2T_OK + torch.tensor([0] * (VD - 1) + [500]), None), _validate,
         VocabError, ("mapped ids in range", "outside 0..119", "draft ids [39]")),
    Case("d2t_all_zeros", "vocab", _vocab(torch.zeros(VD, dtype=torch.long), None), _validate, VocabError,
         ("d2t not all zeros", "draft id i -> target id i")),
    Case("d2t_arange_default", "vocab", _vocab(torch.arange(VD), None), _validate, VocabError,
         ("d2t not arange", "target id 2i")),
    Case("d2t_absolute_ids_as_offsets", "vocab", _vocab(torch.arange(VD) + 79, None), _validate, VocabError,
         ("absolute target ids", "absolute_to_offsets")),
    Case("d2t_duplicate_targets", "vocab", _vocab(torch.tensor([5, 4] + [0] * (VD - 2)), None), _validate,
         VocabError, ("mapped ids unique", "already used target id")),
    Case("t2d_inconsistent_with_d2t", "vocab", _vocab(_D2T_OK, _T2D_OK.roll(1)), _validate, VocabError,
         ("t2d consistent with d2t", "different vocab builds")),
    Case("t2d_wrong_count", "vocab", _vocab(None, torch.arange(V) < 100),
         lambda c: vocab.validate_vocab(None, c["t2d"], V, V), VocabError, ("t2d count", "marks 100 ids", "has 120")),
    Case("t2d_wrong_length", "vocab", _vocab(_D2T_OK, _T2D_OK[:-1]), _validate, VocabError,
         ("t2d shape", "[119]", "120 ids")),
    Case("layout_unknown_boundary", "layout", lambda tmp: {}, lambda c: layout.parse_layout("embed,layer_7,final"),
         LayoutError, ("boundary 'layer_7'", "unknown boundary name", "layer_in.<i>", "found layer_7")),
    Case("layout_id_beyond_target", "layout", lambda tmp: {}, lambda c: layout.from_ids([2, 16, 33], "output", 32),
         LayoutError, ("layer id 33", "output-of-layer", "-1..31", "found 33")),
    Case("layout_name_not_a_string", "layout", lambda tmp: {}, lambda c: layout.parse_layout(["embed", 5]),
         LayoutError, ("5", "boundary name")),
    Case("layout_id_not_an_integer", "layout", lambda tmp: {}, lambda c: layout.from_ids(["2", "x"], "input", 8),
         LayoutError, ("'x'", "integer")),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_configs_checkpoints_vocab(case, tmp_path):
    """Each bad config, checkpoint, vocab map or layout gives a documented error naming key, expected, found."""
    run_case(case, tmp_path)

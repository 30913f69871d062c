"""The corpus of real public EAGLE-3 draft configs (tests/model/corpus/<name>/: config.json as its writer wrote it,
source.json naming where it was read and the writer's documented semantics), each rebuilt tiny here.

`shrink(raw)` keeps every key of the writer's config and only makes the sizes small; `writer_tensors(name, raw)`
names and shapes the tensors the way the writer's own code saves them (source.json "tensors" and
"trained"), never through eagle3lib's reading; `build_draft` writes config.json + model.safetensors; `build_target`
a tiny Llama target with the real target's layer count (so the config's layer ids name the same boundaries), and
`training_data` SpecForge-style samples whose slots are the target's states at the writer's trained boundaries.
"""
from __future__ import annotations

import copy
import json
import zlib
from pathlib import Path

import torch
import transformers
from safetensors.torch import save_file

CORPUS = Path(__file__).parent / "corpus"
NAMES = tuple(sorted(p.name for p in CORPUS.iterdir() if (p / "config.json").is_file()))
H, I, NH, HD, V, VD = 32, 64, 4, 8, 128, 64      # the tiny sizes every draft and target is rebuilt with
MLA = {"q_lora_rank": 16, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8}


def raw_config(name: str) -> dict:
    return json.loads((CORPUS / name / "config.json").read_text())


def source(name: str) -> dict:
    return json.loads((CORPUS / name / "source.json").read_text())


def shrink(raw: dict) -> dict:
    """The writer's config with the same keys, tiny sizes (in the top level and the layer config it nests)."""
    out = copy.deepcopy(raw)
    for body in (out, out.get("transformer_layer_config")):
        if not isinstance(body, dict):
            continue
        nh, nkv, vocab = body.get("num_attention_heads"), body.get("num_key_value_heads"), body.get("vocab_size")
        sizes = {"hidden_size": H, "intermediate_size": I, "num_attention_heads": NH, "head_dim": HD,
                 "num_key_value_heads": NH if nkv == nh else NH // 2, "vocab_size": V}
        body.update({k: v for k, v in sizes.items() if body.get(k) is not None})
        body.update({k: v for k, v in MLA.items() if body.get(k) is not None})
    for where in (out, out.get("transformer_layer_config") or {}):
        if where.get("draft_vocab_size") is not None:
            where["draft_vocab_size"] = V if where["draft_vocab_size"] == (raw.get("vocab_size") or
                                                                           (raw.get("transformer_layer_config") or
                                                                            {}).get("vocab_size")) else VD
        if where.get("target_hidden_size") is not None:
            where["target_hidden_size"] = H
    return out


def _body(cfg: dict) -> dict:
    return cfg.get("transformer_layer_config") or cfg


def writer_tensors(name: str, cfg: dict) -> dict[str, tuple]:
    """{key: shape or dtype-tagged shape} of the tensors the writer saves for the (tiny) config `cfg`: names from
    source.json "tensors" (the writer's scheme), shapes from the writer's documented architecture."""
    side = source(name)
    t, scheme = side["trained"], side["tensors"]
    b = _body(cfg)
    nh, nkv = b["num_attention_heads"], b.get("num_key_value_heads") or b["num_attention_heads"]
    hd = b.get("head_dim") or H // nh
    vocab = b["vocab_size"]
    vd = cfg.get("draft_vocab_size") or b.get("draft_vocab_size") or vocab
    k = t["slots"]
    bias = bool(b.get("attention_bias"))
    layer0 = scheme.get("layer0", {"specforge": "midlayer.", "angelslim": "midlayer.", "torchspec": "midlayer."}
                        .get(scheme["scheme"], "layers.0."))
    out: dict[str, tuple] = {}
    for i in range(t["layers"]):
        p, width = (layer0, 2 * H) if i == 0 else (f"layers.{i}.", H)
        out[p + "input_layernorm.weight"] = (H,)
        out[p + "post_attention_layernorm.weight"] = (H,)
        if i == 0:
            out[p + "hidden_norm.weight"] = (H,)
        a = p + "self_attn."
        if t["attention"] == "MLA":
            qk = MLA["qk_nope_head_dim"] + MLA["qk_rope_head_dim"]
            out.update({a + "q_a_proj.weight": (MLA["q_lora_rank"], width), a + "q_a_layernorm.weight":
                        (MLA["q_lora_rank"],), a + "q_b_proj.weight": (nh * qk, MLA["q_lora_rank"]),
                        a + "kv_a_proj_with_mqa.weight": (MLA["kv_lora_rank"] + MLA["qk_rope_head_dim"], width),
                        a + "kv_a_layernorm.weight": (MLA["kv_lora_rank"],),
                        a + "kv_b_proj.weight": (nh * (MLA["qk_nope_head_dim"] + MLA["v_head_dim"]),
                                                 MLA["kv_lora_rank"]),
                        a + "o_proj.weight": (H, nh * MLA["v_head_dim"])})
        else:
            for proj, rows in (("q", nh * hd), ("k", nkv * hd), ("v", nkv * hd)):
                out[f"{a}{proj}_proj.weight"] = (rows, width)
                if bias:
                    out[f"{a}{proj}_proj.bias"] = (rows,)
            out[a + "o_proj.weight"] = (H, nh * hd)
            if bias:
                out[a + "o_proj.bias"] = (H,)
        out.update({p + "mlp.gate_proj.weight": (I, H), p + "mlp.up_proj.weight": (I, H),
                    p + "mlp.down_proj.weight": (H, I)})
    if t["fed"] == "aux":
        out["fc.weight"] = (H, k * H)
        if scheme.get("fc_bias"):
            out["fc.bias"] = (H,)
    if t["flags"]["fc_norm"]:
        out.update({f"fc_norm.{i}.weight": (H,) for i in range(k)})
    if t["flags"]["norm_before_fc"]:
        out["input_norm.weight"] = (k * H,)
    if t["parallel"]:
        out["mask_hidden"] = (1, 1, k * H)
    out["norm.weight"] = (H,)
    out["lm_head.weight"] = (vd, H)
    maps = scheme.get("vocab_maps", {"modelopt": "d2t_reduced", "torchspec": "reduced", "speculators": "reduced"}
                      .get(scheme["scheme"], "always"))
    if maps == "always" or (maps in ("reduced", "d2t_reduced") and vd < vocab):
        out["d2t"] = ("int64", vd)
        if maps != "d2t_reduced":
            out["t2d"] = ("bool", vocab)
    if scheme["scheme"] in ("torchspec", "speculators", "specforge_peagle"):
        out["embed_tokens.weight"] = (vocab, H)      # saved by these writers (the target's copy here)
    return out


def target_rope(raw: dict) -> dict:
    """The RoPE fields a draft config copies from its target (the tiny target is given the same)."""
    b = _body(raw)
    out = {"rope_theta": b.get("rope_theta", 10000.0)}
    if b.get("rope_scaling"):
        out["rope_scaling"] = dict(b["rope_scaling"])
    return out


def build_target(folder: Path, num_layers: int, seed: int = 0, **rope) -> Path:
    """A tiny random Llama target of `num_layers` layers (hidden 32, vocab 128) with the RoPE fields `rope`,
    saved with save_pretrained."""
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=V, hidden_size=H, intermediate_size=I, num_hidden_layers=num_layers,
                                   num_attention_heads=NH, num_key_value_heads=NH // 2, head_dim=HD,
                                   max_position_embeddings=256, eos_token_id=None, pad_token_id=None,
                                   bos_token_id=None, tie_word_embeddings=False, **rope)
    cfg._attn_implementation = "eager"
    model = transformers.LlamaForCausalLM(cfg)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.2)
    model.eval().save_pretrained(folder)
    return Path(folder)


def build_draft(name: str, folder: Path, target: Path, seed: int = 1) -> Path:
    """config.json (the writer's keys, tiny sizes) and model.safetensors (the writer's tensor names) in `folder`."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cfg = shrink(raw_config(name))
    g = torch.Generator().manual_seed(seed)
    sd = {}
    embed = None
    for key, shape in writer_tensors(name, cfg).items():
        if shape and shape[0] == "int64":
            vd, vocab = shape[1], _body(cfg)["vocab_size"]
            kept = torch.sort(torch.randperm(vocab, generator=g)[:vd]).values if vd < vocab else torch.arange(vd)
            sd[key] = kept - torch.arange(vd)                 # offsets: target id = draft id + d2t[draft id]
            sd["_kept"] = kept
        elif shape and shape[0] == "bool":
            continue
        elif key == "embed_tokens.weight":
            if embed is None:
                from safetensors.torch import load_file
                embed = load_file(str(target / "model.safetensors"))["model.embed_tokens.weight"]
            sd[key] = embed.clone()
        elif "norm" in key and len(shape) == 1:
            sd[key] = 1 + 0.1 * torch.randn(shape, generator=g)
        else:
            sd[key] = 0.2 * torch.randn(shape, generator=g)
    kept = sd.pop("_kept", None)
    if "t2d" in writer_tensors(name, cfg):
        t2d = torch.zeros(_body(cfg)["vocab_size"], dtype=torch.bool)
        t2d[kept] = True
        sd["t2d"] = t2d
    save_file({k: v.contiguous() for k, v in sd.items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return folder


def world(name: str, root: Path) -> tuple[Path, Path]:
    """(draft dir, target dir) of config `name` rebuilt under `root`; targets are shared by layer count and RoPE."""
    raw = raw_config(name)
    L = source(name)["target"]["num_layers"]
    rope = target_rope(raw)
    target = Path(root) / ("target_%d_%08x" % (L, zlib.crc32(json.dumps(rope, sort_keys=True).encode())))
    if not (target / "config.json").is_file():
        build_target(target, L, **rope)
    draft = Path(root) / name
    if not (draft / "config.json").is_file():
        build_draft(name, draft, target)
    return draft, target


def training_data(folder: Path, target: Path, boundaries, n: int = 3, T: int = 12, seed: int = 2) -> Path:
    """SpecForge-style training samples (`data_*.ckpt`: input_ids, loss_mask, hidden_states [1, T, k*H],
    aux_hidden_states, hidden_state) whose slots are the target's states at `boundaries` (embed / layer_in.i /
    final_prenorm / final_postnorm), recaptured with transformers' own output_hidden_states."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model = transformers.AutoModelForCausalLM.from_pretrained(target).eval()
    L = model.config.num_hidden_layers
    g = torch.Generator().manual_seed(seed)
    for j in range(n):
        ids = torch.randint(0, V, (1, T), generator=g)
        with torch.no_grad():
            out = model(ids, output_hidden_states=True)
            pre = {}
            hook = model.model.norm.register_forward_hook(lambda m, i, o: pre.setdefault("x", i[0]))
            model(ids)
            hook.remove()
        hs = out.hidden_states                                # [embed, in.1 .. in.L-1, final post-norm]

        def state(b):
            if b == "embed":
                return hs[0]
            if b == "final_postnorm":
                return hs[L]
            if b == "final_prenorm":
                return pre["x"]
            return hs[int(b.split(".")[1])]
        aux = torch.cat([state(b) for b in boundaries], dim=-1)
        torch.save({"input_ids": ids, "loss_mask": torch.ones(1, T, dtype=torch.long), "aux_hidden_state": aux,
                    "hidden_state": hs[L]}, folder / f"data_{j}.ckpt")
    return folder


# ---- the generated neighbour set: one field moved to where another writer puts it -------------------------------
NESTS = ("eagle_config", "transformer_layer_config", "speculators_config")
NESTED_IDS, TOP_IDS = "eagle_config.eagle_aux_hidden_state_layer_ids", "eagle_aux_hidden_state_layer_ids"


def _get(raw: dict, key: str):
    obj = raw
    for part in key.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def _move(raw: dict, src: str, dst: str, value=None) -> dict:
    """A copy of `raw` with the field at `src` removed and written at `dst` (as `value`, else the same value)."""
    out = copy.deepcopy(raw)
    value = _get(raw, src) if value is None else value
    *path, name = src.split(".")
    obj = out
    for part in path:
        obj = obj[part]
    del obj[name]
    *path, name = dst.split(".")
    obj = out
    for part in path:
        obj = obj.setdefault(part, {})
    obj[name] = value
    return out


def ids_for(boundaries, convention: str, num_layers: int) -> list[int]:
    """The ids a writer of `convention` ("input" / "output" of layer) writes for `boundaries` (plain arithmetic)."""
    idx = [0 if b == "embed" else num_layers if b == "final_prenorm" else int(b.split(".")[1]) for b in boundaries]
    return [i - 1 for i in idx] if convention == "output" else idx


def neighbours(raw: dict, trained=None, num_layers: int | None = None) -> list[tuple[str, dict]]:
    """(what moved, config) for each field of `raw` moved to a place another writer puts it: a variant flag to
    every other place of dialects.FLAG_PLACES (the top level, eagle_config, and the nested objects this config
    has); the layer ids between eagle_config (SpecForge / SGLang, output-of-layer) and the top level (vLLM /
    speculators, input-of-layer), written as that place's writer writes the `trained` boundaries; rope_theta into
    transformers 5's rope_parameters; draft_vocab_size between the top level and speculators'
    transformer_layer_config."""
    from eagle3lib.model.dialects import FLAG_PLACES
    out = []
    for flag, places in FLAG_PLACES.items():
        held = [p for p in places if _get(raw, p) is not None]
        if len(held) != 1:
            continue
        for dst in places:
            nest = dst.rpartition(".")[0]
            if dst != held[0] and (not nest or nest == "eagle_config" or nest in raw) and \
                    dst.rpartition(".")[2] == held[0].rpartition(".")[2]:
                out.append((f"{held[0]} -> {dst}", _move(raw, held[0], dst)))
    nested, top = _get(raw, NESTED_IDS), _get(raw, TOP_IDS)
    if trained and "final_postnorm" not in trained:
        if nested and top is None:
            out.append((f"{NESTED_IDS} -> {TOP_IDS} (as vLLM writes them)",
                        _move(raw, NESTED_IDS, TOP_IDS, ids_for(trained, "input", num_layers))))
        if top and nested is None:
            out.append((f"{TOP_IDS} -> {NESTED_IDS} (as SpecForge writes them)",
                        _move(raw, TOP_IDS, NESTED_IDS, ids_for(trained, "output", num_layers))))
    body = "transformer_layer_config." if isinstance(raw.get("transformer_layer_config"), dict) else ""
    if _get(raw, body + "rope_theta") is not None and _get(raw, body + "rope_parameters") is None \
            and not _get(raw, body + "rope_scaling"):
        moved = _move(raw, body + "rope_theta", body + "rope_parameters.rope_theta")
        _get(moved, body + "rope_parameters")["rope_type"] = "default"
        out.append((f"{body}rope_theta -> {body}rope_parameters.rope_theta", moved))
    if body and raw.get("draft_vocab_size") is not None:
        out.append(("draft_vocab_size -> transformer_layer_config.draft_vocab_size",
                    _move(raw, "draft_vocab_size", "transformer_layer_config.draft_vocab_size")))
    return out

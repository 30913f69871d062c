"""Draft checkpoints: declarative key maps between formats, a validation report, strict loading, saving.

Canonical names are the EAGLE/SpecForge/SGLang on-disk names (`fc.weight`, `midlayer.*`, `norm.weight`,
`lm_head.weight`, `d2t`, `t2d`, optional `embed_tokens.weight`, `fc_norm.{i}.weight`, `input_norm.weight`; P-EAGLE
drafts add `mask_hidden` (1, 1, k*Ht), model/peagle.py).
Multi-layer drafts: layer 0 is always `midlayer.*`; layers N >= 1 are `layers.N.*` under the HF decoder-layer names
(`input_layernorm`, `self_attn.{q,k,v,o}_proj`, `post_attention_layernorm`, `mlp.*`; Qwen3 adds `self_attn.q_norm` /
`k_norm`) in every format, as speculators writes them and vLLM / SGLang (>= PR #24663, `midlayer` -> `layers.0`)
read them. Other formats are mapped onto them by the regex rules in TO_CANONICAL; saving maps back with the save rules of
`formats.FORMATS` (the one table of formats: detection, save map, config dialect).
MLA drafts in vLLM's dialect (model/mla_vllm.py) also drop its unused `layers.N.hidden_norm` (N >= 1, DROPPED) and
split its fused `fused_qkv_a_proj` / `gate_up_proj` back into the checkpoint's names (STACKED).
A draft missing a tensor (or holding one of the wrong shape) is refused by default; ``missing="fill"`` loads it the
way an engine that does not refuse it would run it (`FILLS`): the tensor at a seeded random init (the init engines
keep for a key they never loaded), or a reduced-vocab lm_head as the first Vd rows of the target's (vLLM's borrow),
each fill recorded in ``loaded.filled`` (file, key, expected, found, what stands in, the cause id).
Usage:  loaded = load_draft(draft_dir, target=target_dir); loaded.report  (a DataFrame)
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch
from safetensors.torch import save_file

from .config import DraftConfig, config_to_dict, load_config
from .draft import Eagle3Draft, FedAsIs
from .layers import Rotary
from .formats import FORMATS, MLA_WRITER, detect_format
from .mla_vllm import DROPPED as VLLM_MLA_DROPPED, unstack
from .peagle import draft_for
from ..errors import CheckpointError
from .safefiles import load_state_dict, weight_files
from .target import load_target_tensor
from .vocab import VocabFinding, check_vocab, t2d_from_d2t

# (pattern, replacement, who writes it) applied in order: any format -> canonical names.
TO_CANONICAL: tuple[tuple[str, str, str], ...] = (
    (r"^eagle_module\.", "", "ModelOpt (internal prefix)"),
    (r"^model\.", "", "SGLang in-memory / HF-prefixed"),
    (r"^layers\.0\.", "midlayer.", "speculators / vLLM / ModelOpt 2026"),
    (r"^layers\.([1-9]\d*)\.hidden_norm\.", r"layers.\1.input_layernorm.", "SGLang >= PR #24663 (a later layer's "
     "input norm)"),
    (r"^hidden_norm\.weight$", "midlayer.hidden_norm.weight", "ModelOpt Dec-2025"),
    (r"^input_embeds_norm\.weight$", "midlayer.input_layernorm.weight", "ModelOpt Dec-2025"),
    (r"^eagle_lm_head\.weight$", "lm_head.weight", "ModelOpt Dec-2025"),
    (r"^aux_norm_low\.", "fc_norm.0.", "SGLang legacy"),
    (r"^aux_norm_mid\.", "fc_norm.1.", "SGLang legacy"),
    (r"^aux_norm_high\.", "fc_norm.2.", "SGLang legacy"),
    (r"^draft_id_to_target_id$", "d2t", "vLLM in-memory"),
)
_FLOAT_OK = (torch.float32, torch.float16, torch.bfloat16)
# a draft fed the final state (use_aux_hidden_state false) has no fc: engines skip the keys (vllm llama_eagle3.py
# load_weights; the engines.facts row use_aux_hidden_state@eagle_config), so does the load
NO_FC_DROPPED = ((r"^(model\.|eagle_module\.)?fc\.", "no fc: use_aux_hidden_state false (vllm llama_eagle3.py "
                  "skips fc.*)"),)


def canonicalize(sd: dict[str, torch.Tensor], drop: tuple[tuple[str, str], ...] = ()
                 ) -> tuple[dict[str, torch.Tensor], list[tuple[str, str | None, str]]]:
    """(state dict under canonical names, [(old, new, rule source)] for every rename; new is None for a key matched
    by a (pattern, source) of `drop`: a tensor the format holds but no forward reads)."""
    out, renames = {}, []
    for key, t in sd.items():
        gone = next((who for pattern, who in drop if re.search(pattern, key)), None)
        if gone is not None:
            renames.append((key, None, gone))
            continue
        new, who = key, None
        for pattern, repl, source in TO_CANONICAL:
            if re.search(pattern, new):
                new, who = re.sub(pattern, repl, new), source
        if new in out:
            raise CheckpointError(f"key '{key}'", "two checkpoint keys map to the same canonical name",
                                  expected="one tensor per name", found=new,
                                  cause="a checkpoint holding two copies under different writers' names "
                                  "(midlayer.* and layers.0.*, or a later layer's hidden_norm and input_layernorm)")
        out[new] = t
        if new != key:
            renames.append((key, new, who))
    return out, renames


def as_trained(cfg: DraftConfig, shapes: dict) -> DraftConfig:
    """`cfg` with what the checkpoint shows was trained and the config does not say: an fc bias of width H
    (`shapes`: {canonical name: shape}; NVIDIA's Llama-4 Maverick draft ships feature_fusion.bias as fc.bias)."""
    b = shapes.get("fc.bias")
    if b is None or cfg.bias or cfg.fc_bias or not cfg.use_aux_hidden_state or tuple(b) != (cfg.hidden_size,):
        return cfg
    return dataclasses.replace(cfg, fc_bias=True, warnings=cfg.warnings + (
        "fc.bias in the checkpoint but no `bias: true` in the config: the draft was trained with an fc bias (loaded "
        "here); SGLang and vLLM size fc from the config's `bias` (check 9 says what each does with the key)",))


def expected_tensors(cfg: DraftConfig) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """{canonical name: (shape, dtype)} of a draft built from cfg (built on the meta device: no memory)."""
    with torch.device("meta"):
        model = draft_for(cfg)
    return {k: (tuple(v.shape), v.dtype) for k, v in model.state_dict().items()}


HEALTHY = ("ok", "from_target", "not_needed", "derived")     # statuses of `validate` that are no problem


def validate(sd: dict[str, torch.Tensor], cfg: DraftConfig) -> pd.DataFrame:
    """One row per tensor: status ok / from_target / not_needed (a full-vocab draft's d2t, t2d) / derived (t2d from
    d2t) / missing / unexpected / shape_mismatch / dtype_odd (`HEALTHY`: the first four)."""
    rows = []
    exp = expected_tensors(cfg)
    for key, (shape, dtype) in exp.items():
        t = sd.get(key)
        row = {"key": key, "expected_shape": list(shape), "found_shape": None, "dtype": None, "note": ""}
        if t is None:
            if key == "embed_tokens.weight":
                row.update(status="from_target", note="P-EAGLE trains its embedding (embed_requires_grad): the "
                           "target's is a stand-in" if cfg.parallel_drafting else
                           "drafts usually ship without it; taken from the target")
            elif key == "lm_head.weight" and cfg.draft_vocab_size == cfg.vocab_size:
                row.update(status="from_target", note="full-vocab draft: lm_head from the target (SGLang)")
            elif key in ("d2t", "t2d") and cfg.draft_vocab_size == cfg.vocab_size:
                row.update(status="not_needed", note="full-vocab draft: draft id i is target id i, no map "
                           "(SGLang, vLLM and TensorRT-LLM run it without one)")
            elif key == "t2d" and "d2t" in sd:
                row.update(status="derived", note="t2d is training-only (every engine skips it): derived from d2t")
            elif key in ("d2t", "t2d"):
                row.update(status="missing", note="vocab map absent: see the vocab checks")
            else:
                row.update(status="missing", note="engines would keep a random init for this tensor")
        else:
            row.update(found_shape=list(t.shape), dtype=str(t.dtype).replace("torch.", ""))
            if tuple(t.shape) != shape:
                row.update(status="shape_mismatch", note=_shape_hint(key, tuple(t.shape), shape, cfg))
            elif dtype.is_floating_point and t.dtype not in _FLOAT_OK:
                row.update(status="dtype_odd", note=f"expected a float dtype, found {t.dtype}")
            elif key == "d2t" and t.dtype != torch.int64 or key == "t2d" and t.dtype != torch.bool:
                row.update(status="dtype_odd", note=f"expected {'int64' if key == 'd2t' else 'bool'}")
            else:
                row.update(status="ok")
        rows.append(row)
    for key in sorted(set(sd) - set(exp)):
        t = sd[key]
        rows.append({"key": key, "expected_shape": None, "found_shape": list(t.shape),
                     "dtype": str(t.dtype).replace("torch.", ""), "status": "unexpected",
                     "note": _unexpected_hint(key, cfg)})
    cols = ["key", "status", "expected_shape", "found_shape", "dtype", "note"]
    return pd.DataFrame(rows, columns=cols)


def _unexpected_hint(key: str, cfg: DraftConfig) -> str:
    """Why a checkpoint tensor has no place in the draft the config describes."""
    later = re.match(r"^layers\.(\d+)\.", key)
    if later and int(later.group(1)) >= cfg.num_hidden_layers:
        return (f"decoder layer {later.group(1)}, but the config says num_hidden_layers={cfg.num_hidden_layers}: "
                "set it to the checkpoint's layer count")
    if re.search(r"\.(q_norm|k_norm)\.weight$", key) and not cfg.qk_norm:
        return "a Qwen3 per-head q/k norm, but the config's layers are Llama: its model_type should be 'qwen3'"
    if key.endswith(".bias"):
        return "a bias the config does not switch on (attention_bias / mlp_bias / bias)"
    if key == "mask_hidden":
        return ("a P-EAGLE tensor, but the config does not say P-EAGLE (speculators_model_type 'peagle', "
                "PEagleDraftModel or parallel_drafting): it is replayed as plain EAGLE-3")
    return "old SGLang drops unknown names silently; vLLM refuses them"


def _shape_hint(key: str, found: tuple, expected: tuple, cfg: DraftConfig) -> str:
    if key == "fc.weight" and len(found) == 2 and found[1] % cfg.target_hidden_size == 0:
        return (f"fc reads {found[1] // cfg.target_hidden_size} aux slots of {cfg.target_hidden_size}, the config "
                f"says {cfg.num_aux}: set num_aux_hidden_states / the layer-id list to match the trained fc")
    if key == "lm_head.weight":
        return f"lm_head has {found[0]} rows, draft_vocab_size is {cfg.draft_vocab_size}"
    if key == "d2t":
        return f"d2t has {found} entries, the draft vocab has {cfg.draft_vocab_size}"
    if key == "mask_hidden":
        n = math.prod(found)
        return (f"mask_hidden holds {n / cfg.target_hidden_size:g} aux slots of {cfg.target_hidden_size}, fc reads "
                f"{cfg.num_aux}: it is fed through fc, so it must be (1, 1, {cfg.fc_in_features})")
    return "config and weights disagree"


# what stands in for a tensor the checkpoint lacks (or holds in the wrong shape) when loading with missing="fill"
FILLS = {"random": "a seeded random init (what an engine keeps for a key it never loaded)",
         "target_sliced": "the target's lm_head, its first draft_vocab_size rows (vLLM's borrow of a missing head)",
         "zeros": "zero offsets (no usable d2t: draft id i is read as target id i)",
         "padded": "the checkpoint's tensor in its leading rows, zeros past them (SGLang's CPU loader of a q/k/v "
                   "shard the checkpoint holds shorter than the config sizes it)"}


@dataclass(frozen=True)
class Filled:
    """One tensor the checkpoint lacked or held in the wrong shape, and what stands in for it."""
    file: str
    key: str
    expected: tuple[int, ...]
    found: tuple[int, ...] | None        # None: absent
    fill: str                            # a FILLS key
    cause: str                           # causes.CATALOGUE id: lm_head_missing, weights_dropped or d2t_mapping
    padded: torch.Tensor | None = field(default=None, compare=False, repr=False)   # the found tensor in the
    #                                    expected shape, zeros past it (where it fits inside): FILLS "padded"

    def sentence(self) -> str:
        got = "nothing" if self.found is None else list(self.found)
        return (f"{self.file}, key '{self.key}': expected {list(self.expected)}, found {got}; replayed with "
                f"{FILLS[self.fill]} ({self.cause})")

    def to_dict(self) -> dict:
        return {"file": self.file, "key": self.key, "expected": list(self.expected),
                "found": list(self.found) if self.found is not None else None, "fill": self.fill,
                "cause": self.cause}


def random_init(key: str, shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The init a module gives `key` when nothing is loaded into it, seeded by the key (reproducible): norms ones,
    matrices Kaiming-uniform as nn.Linear, embeddings N(0, 1), biases and the rest zeros."""
    g = torch.Generator().manual_seed(zlib.crc32(key.encode()))
    if len(shape) == 1 and "norm" in key:
        return torch.ones(shape, dtype=dtype)
    if len(shape) == 2 and "embed" in key:
        return torch.randn(shape, generator=g, dtype=dtype)
    if len(shape) == 2:
        w = torch.empty(shape, dtype=dtype)
        return torch.nn.init.kaiming_uniform_(w, a=5 ** 0.5, generator=g)
    return torch.zeros(shape, dtype=dtype)


def padded_into(t: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor | None:
    """`t` in a zero tensor of `shape`, at its leading rows / columns, when it fits inside (same rank, no dimension
    larger); None otherwise."""
    if t.dim() != len(shape) or any(a > b for a, b in zip(t.shape, shape)) or not t.is_floating_point():
        return None
    out = torch.zeros(shape, dtype=t.dtype)
    out[tuple(slice(0, n) for n in t.shape)] = t
    return out


def _fill(sd, report, cfg, file: str, target, lm_head: str) -> list[Filled]:
    """Put a stand-in into `sd` for every missing or mis-shaped tensor of `report` (d2t / t2d aside)."""
    out = []
    for r in report[report.status.isin(["shape_mismatch", "missing"]) & ~report.key.isin(["d2t", "t2d"])].itertuples():
        orig = sd.get(r.key) if r.status == "shape_mismatch" else None
        shape = tuple(r.expected_shape)
        found = tuple(r.found_shape) if r.found_shape is not None else None
        head = r.key == "lm_head.weight"
        how = lm_head if head and target is not None else "random"
        if how == "target_sliced":
            full = load_target_tensor(target, "lm_head")
            if tuple(full.shape[1:]) != shape[1:] or full.shape[0] < shape[0]:
                how = "random"
            else:
                sd[r.key] = full[: shape[0]].clone()
        if how == "random":
            sd[r.key] = random_init(r.key, shape)
        out.append(Filled(file, r.key, shape, found, how, "lm_head_missing" if head else "weights_dropped",
                          padded=padded_into(orig, shape) if orig is not None else None))
    return out


@dataclass(frozen=True)
class LoadedDraft:
    """A draft loaded strictly, with everything the audit shows."""
    model: Eagle3Draft
    cfg: DraftConfig
    report: pd.DataFrame
    vocab: list[VocabFinding]
    files: list[str]
    format: str
    renames: list[tuple[str, str, str]] = field(default_factory=list)
    taken_from_target: tuple[str, ...] = ()
    filled: tuple[Filled, ...] = ()          # tensors that stand in for missing / mis-shaped ones (missing="fill")


MISSING = ("raise", "fill")


def load_draft(path: str | Path, target: str | Path | None = None, device: str = "cpu",
               dtype: torch.dtype | None = None, *, missing: str = "raise", lm_head: str = "random") -> LoadedDraft:
    """Load a draft of any format; embedding (and lm_head if absent) from `target`. Raises CheckpointError on
    missing or mis-shaped tensors, naming the key, the expected and the found shape; with ``missing="fill"`` each
    such tensor is replaced as an engine would run it (`lm_head`: "random" or "target_sliced" for a reduced-vocab
    head, FILLS) and recorded in `filled`."""
    if missing not in MISSING or lm_head not in FILLS:
        raise CheckpointError("load_draft", "unknown option", expected=f"missing in {MISSING}, lm_head in "
                              f"{tuple(FILLS)}", found=f"missing={missing!r}, lm_head={lm_head!r}")
    path = Path(path)
    cfg = load_config(path)
    files = weight_files(path)
    raw_sd = load_state_dict(path)
    drop = (VLLM_MLA_DROPPED if cfg.mla else ()) + (() if cfg.use_aux_hidden_state else NO_FC_DROPPED)
    sd, renames = canonicalize(raw_sd, drop)
    fmt = detect_format(raw_sd, cfg.mla is not None)
    del raw_sd                                                   # its tensors live on in sd only (cast below)
    sd, split = unstack(sd, cfg, str(files[0]))                  # vLLM's fused tensors -> the checkpoint's names
    renames += split
    cfg = as_trained(cfg, {k: tuple(v.shape) for k, v in sd.items()})
    report = validate(sd, cfg)
    bad = report[report.status.isin(["shape_mismatch", "missing"]) & ~report.key.isin(["d2t", "t2d"])]
    filled: list[Filled] = []
    if len(bad) and missing == "fill":
        filled = _fill(sd, report, cfg, str(files[0]), target, lm_head)
        bad = bad.iloc[:0]
    if len(bad):
        r = bad.iloc[0]
        raise CheckpointError(f"{files[0]}, key '{r.key}'", f"tensor {r.status.replace('_', ' ')}",
                              expected=r.expected_shape, found=r.found_shape or "nothing", cause=r.note)
    from_target = []
    if "embed_tokens.weight" not in sd:
        if target is None:
            raise CheckpointError(f"{path}", "the draft has no embed_tokens.weight and no target was given",
                                  expected="a target directory", found="target=None",
                                  cause="SpecForge/EAGLE save drafts without the (frozen) target embedding")
        emb = load_target_tensor(target, "embed")
        want = (cfg.vocab_size, cfg.hidden_size)
        if tuple(emb.shape) != want:
            raise CheckpointError(f"{target}, target embedding", "shape does not fit the draft", expected=list(want),
                                  found=list(emb.shape), cause="draft and target vocab/hidden sizes differ "
                                  "(wrong target, or a draft with target_hidden_size != hidden_size)")
        sd["embed_tokens.weight"] = emb
        from_target.append("embed_tokens.weight")
    if "lm_head.weight" not in sd:
        if target is None:
            raise CheckpointError(f"{path}", "full-vocab draft without lm_head.weight and no target was given",
                                  expected="a target directory", found="target=None")
        sd["lm_head.weight"] = load_target_tensor(target, "lm_head")
        from_target.append("lm_head.weight")
    d2t, t2d = sd.get("d2t"), sd.get("t2d")
    vocab = check_vocab(d2t, t2d, cfg.vocab_size, cfg.draft_vocab_size, where=str(path))
    if d2t is not None and (d2t.dim() != 1 or d2t.numel() != cfg.draft_vocab_size) and missing == "fill":
        filled.append(Filled(str(files[0]), "d2t", (cfg.draft_vocab_size,), tuple(d2t.shape), "zeros",
                             "d2t_mapping"))
        sd.pop("d2t")
        d2t = None
    if d2t is not None and (d2t.dim() != 1 or d2t.numel() != cfg.draft_vocab_size):
        raise CheckpointError(f"{files[0]}, key 'd2t'", "wrong length", expected=[cfg.draft_vocab_size],
                              found=list(d2t.shape), cause="a vocab map from another draft vocab size")
    if d2t is None:
        sd["d2t"] = torch.zeros(cfg.draft_vocab_size, dtype=torch.long)
    sd["d2t"] = sd["d2t"].long()
    if t2d is None or t2d.numel() != cfg.vocab_size:
        sd["t2d"] = t2d_from_d2t(sd["d2t"].clamp(max=cfg.vocab_size - 1), cfg.vocab_size)
    sd["t2d"] = sd["t2d"].bool()
    if dtype is not None:       # tensor by tensor, each read copy let go at once: never the whole draft twice; the
        for k, v in sd.items():  # tensors kept (d2t, t2d) copied, so no view keeps the file's memory map open
            sd[k] = v.to(dtype) if v.is_floating_point() and v.dtype != dtype else v.clone()
    with torch.device("meta"):
        model = draft_for(cfg)
    model.load_state_dict({k: v for k, v in sd.items() if k in dict(model.state_dict())}, strict=True, assign=True)
    model.rotary = Rotary(cfg)                       # non-persistent buffer: rebuild off the meta device
    if not cfg.use_aux_hidden_state:
        model.fc = FedAsIs(cfg.hidden_size)          # likewise (no fc: fed the target's final state)
    model = model.to(device)
    if dtype is not None:
        model = model.to(dtype)                      # float tensors only; d2t/t2d keep int64/bool
    return LoadedDraft(model.eval(), cfg, report, vocab, [str(f) for f in files], fmt, renames, tuple(from_target),
                       tuple(filled))


def save_draft(state: Eagle3Draft | dict, config: dict | DraftConfig, out_dir: str | Path,
               format: str = "specforge", include_embed: bool = False) -> Path:
    """Write config.json + model.safetensors in `format` (specforge/eagle, speculators, modelopt, vllm). A P-EAGLE draft
    keeps its (trained) embedding and `mask_hidden`; in SpecForge format its layer is `layers.0.*` as SpecForge's
    PEagleDraftModel names it."""
    f = FORMATS.get(format)
    if f is None or f.save_rules is None:
        raise CheckpointError("save_draft", f"format {format!r} cannot be written" if f else "unknown format",
                              expected=sorted(n for n, g in FORMATS.items() if g.save_rules is not None),
                              found=format, cause=f.no_save if f else None)
    sd = state.state_dict() if isinstance(state, torch.nn.Module) else dict(state)
    sd, _ = canonicalize(sd)
    parallel = config.parallel_drafting if isinstance(config, DraftConfig) else "mask_hidden" in sd
    rules = f.save_rules_parallel if parallel and f.save_rules_parallel is not None else f.save_rules
    dropped = f.save_drops
    out = {}
    for k, t in sd.items():
        if k in dropped or (k == "embed_tokens.weight" and not (include_embed or parallel)):   # P-EAGLE trains it
            continue
        for pattern, repl in rules:
            k = re.sub(pattern, repl, k)
        out[k] = t.detach().contiguous().cpu()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if isinstance(config, DraftConfig):    # write the config in the dialect that goes with the weights
        # an MLA draft: SGLang's config (its loader reads midlayer.* and layers.0.* alike), or vLLM's
        raw = config_to_dict(config, MLA_WRITER.get(format, "specforge") if config.mla else f.config_writer)
    else:
        raw = dict(config)
    tmp = out_dir / "model.safetensors.tmp"
    save_file(out, str(tmp), metadata={"format": "pt", "writer": "eagle3lib", "layout": format})
    tmp.replace(out_dir / "model.safetensors")
    (out_dir / "config.json").write_text(json.dumps(raw, indent=2) + "\n")
    return out_dir


def param_table(model: torch.nn.Module) -> pd.DataFrame:
    """Parameter counts and bytes per top-level module."""
    rows: dict[str, dict] = {}
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if name.startswith("rotary."):
            continue
        top = name.split(".")[0]
        r = rows.setdefault(top, {"module": top, "tensors": 0, "numel": 0, "bytes": 0})
        r["tensors"] += 1
        r["numel"] += t.numel()
        r["bytes"] += t.numel() * t.element_size()
    df = pd.DataFrame(list(rows.values()))
    total = {"module": "total", "tensors": df.tensors.sum(), "numel": df.numel.sum(), "bytes": df.bytes.sum()}
    return pd.concat([df, pd.DataFrame([total])], ignore_index=True)

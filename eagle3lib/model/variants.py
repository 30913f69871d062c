"""The same trained weights run under other config values: what a draft does when its config.json says otherwise.

A field an engine reads from the draft config (a norm flag, RoPE, `rms_norm_eps`, `hidden_act`, the context
length) changes the computation but not the tensors the checkpoint holds. `rebuilt(model, **changes)` builds the
draft a changed config describes and gives it the model's own tensors (shared, not copied); a module the change
adds (the `input_norm` of `norm_before_fc`, the per-slot `fc_norm`) starts as an engine's loader leaves a weight
the checkpoint lacks, at its init (RMSNorm weights of ones), and is listed in `Rebuilt.added`; a tensor the change
makes unused is listed in `Rebuilt.unused`.
Usage: ``with_flag = rebuilt(model, norm_before_residual=True).model``.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace

import torch

from ..errors import ConfigError
from .config import DraftConfig
from .layers import Rotary
from .peagle import draft_for

# DraftConfig fields whose change leaves every tensor's shape as it is (the fields a counterfactual may set)
CHANGEABLE = ("norm_before_fc", "fc_norm", "norm_output", "norm_before_residual", "rope_theta", "rope_scaling",
              "partial_rotary_factor", "max_position_embeddings", "rms_norm_eps", "hidden_act")
# DraftConfig fields that size tensors: a change runs only with the checkpoint's tensors of the new shapes (`extra`)
RESHAPING = ("num_key_value_heads", "num_attention_heads", "head_dim", "intermediate_size", "use_aux_hidden_state")


@dataclass(frozen=True, eq=False)
class Rebuilt:
    """A draft under a changed config: the model, the changes, and the tensors the change adds or leaves unused."""
    model: torch.nn.Module
    changes: dict
    added: tuple[str, ...]      # state-dict keys at their init (the checkpoint has no trained value for them)
    unused: tuple[str, ...]     # the model's tensors the changed config does not read


def rebuilt(model: torch.nn.Module, extra: dict | None = None, **changes) -> Rebuilt:
    """`model` (an `Eagle3Draft` / `PEagleDraft`) under its config with `changes` (fields of `CHANGEABLE`, or of
    `RESHAPING`), sharing its tensors; `extra`: checkpoint tensors the model does not hold (an `input_norm.weight`
    its config leaves unused, a k_proj of the shape another num_key_value_heads gives), taken where their shape is
    the changed config's. ConfigError naming the field for any other field."""
    bad = [k for k in changes if k not in CHANGEABLE + RESHAPING]
    if bad:
        raise ConfigError("model.variants.rebuilt", f"cannot change {', '.join(bad)} without new tensors",
                          expected=f"fields of {CHANGEABLE}", found=bad,
                          cause="a field that changes a tensor's shape needs another checkpoint")
    names = {f.name for f in fields(DraftConfig)}
    cfg: DraftConfig = replace(model.cfg, **{k: v for k, v in changes.items() if k in names})
    if changes.get("use_aux_hidden_state") and not model.cfg.use_aux_hidden_state:
        cfg = opted_in(model.cfg, {k: tuple(v.shape) for k, v in (extra or {}).items()})
    ref = next(iter(model.parameters()))
    with torch.device("meta"):           # no memory: every tensor is the model's, the checkpoint's or an init below
        new = draft_for(cfg)
    old_sd, new_sd = model.state_dict(), new.state_dict()
    take = {}
    for k, want in new_sd.items():        # the checkpoint's own tensor of the new shape first, then the model's
        got = next((v for v in ((extra or {}).get(k), old_sd.get(k)) if v is not None
                    and tuple(v.shape) == tuple(want.shape)), None)
        if got is not None:             # a checkpoint tensor in the model's dtype (a bf16 replay of a float32 file)
            take[k] = got.to(ref.dtype) if got.is_floating_point() and got.dtype != ref.dtype else got
    new.load_state_dict(take, strict=False, assign=True)
    new.rotary = Rotary(cfg)
    added = tuple(sorted(k for k in new_sd if k not in take))
    at_init(new, ref.device, ref.dtype)
    new = new.to(device=ref.device)
    return Rebuilt(new.eval(), dict(changes), added, tuple(sorted(k for k in old_sd if k not in new_sd)))


def at_init(model: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> None:
    """Each tensor of `model` still on the meta device made real on `device` at its module's init
    (`reset_parameters`: RMSNorm's ones, Linear's), floats in `dtype`; the module's other tensors kept as they are."""
    for mod in model.modules():
        own = dict(mod.named_parameters(recurse=False)) | dict(mod.named_buffers(recurse=False))
        if not any(t.is_meta for t in own.values()):
            continue
        if not hasattr(mod, "reset_parameters"):
            raise TypeError(f"{type(mod).__name__} has tensors on the meta device and no reset_parameters to give "
                            "them their init")
        kept = {n: t for n, t in own.items() if not t.is_meta}
        mod.to_empty(device=device, recurse=False)
        with torch.no_grad():
            mod.reset_parameters()
        for n, t in kept.items():
            setattr(mod, n, t)
        for n, t in own.items():
            if n not in kept and t.is_floating_point():
                getattr(mod, n).data = getattr(mod, n).data.to(dtype)


def opted_in(cfg: DraftConfig, shapes: dict[str, tuple[int, ...]]) -> DraftConfig:
    """A draft config that opts out of aux states (use_aux_hidden_state false: one slot, no fc) opted back in, with
    as many aux slots as the checkpoint's fc takes (its width over the target's hidden size), else its ids'."""
    w = shapes.get("fc.weight")
    k = w[1] // cfg.target_hidden_size if w and cfg.target_hidden_size and w[1] % cfg.target_hidden_size == 0 \
        else len(cfg.aux_layer_ids or ()) or cfg.num_aux
    return replace(cfg, use_aux_hidden_state=True, num_aux=int(k))


def shapes_of(cfg: DraftConfig) -> dict[str, tuple[int, ...]]:
    """{state-dict key: shape} of a draft built from `cfg` (on the meta device: no memory)."""
    with torch.device("meta"):
        return {k: tuple(v.shape) for k, v in draft_for(cfg).state_dict().items()}


def shape_implied(cfg: DraftConfig, shapes: dict[str, tuple[int, ...]]) -> dict:
    """{field: value} of the one `RESHAPING` field whose value makes every tensor of `shapes` (the checkpoint's,
    canonical names) the shape the config then describes, where the shipped value does not ({} when the shapes
    agree, or no single field explains them). The values tried are those the mismatched dimensions give; a
    checkpoint fc the config's use_aux_hidden_state false leaves out implies use_aux_hidden_state true when it fits
    the config's aux slots."""
    want = shapes_of(cfg)
    bad = {k: tuple(s) for k, s in shapes.items() if k in want and tuple(s) != want[k]}
    fc = [k for k in shapes if k not in want and k.startswith("fc.")]
    if not bad and fc and cfg.use_aux_hidden_state is False:    # an fc the config opts out of: aux states it was
        try:                                                       # trained on, if the fc fits the config's ids
            got = shapes_of(opted_in(cfg, shapes))
        except (AssertionError, ValueError, RuntimeError, ConfigError):
            return {}
        fits = all(got.get(k) == tuple(s) for k, s in shapes.items() if k in got) and all(k in got for k in fc)
        return {"use_aux_hidden_state": True} if fits else {}
    if not bad:
        return {}
    dims = {d for s in bad.values() for d in s}
    divisors = {cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads, 1}
    for name in RESHAPING:
        for v in sorted({d // q for d in dims for q in divisors if q and d % q == 0} - {getattr(cfg, name)}):
            try:
                got = shapes_of(replace(cfg, **{name: v}))
            except (AssertionError, ValueError, RuntimeError, ZeroDivisionError, ConfigError):
                continue
            if all(got.get(k) == tuple(s) for k, s in shapes.items() if k in got):
                return {name: v}
    return {}


def reshaped(cfg: DraftConfig, changes: dict) -> list[tuple[str, tuple[int, ...], tuple[int, ...]]]:
    """(key, shape under `cfg`, shape under `cfg` with `changes`) of each tensor the changes resize."""
    old, new = shapes_of(cfg), shapes_of(replace(cfg, **changes))
    return [(k, old[k], new[k]) for k in old if k in new and old[k] != new[k]]


def reshape_text(cfg: DraftConfig, changes: dict, file: str = "config.json") -> str:
    """"config.json's `num_key_value_heads` 4 sizes midlayer.self_attn.k_proj.weight [128, 128] (and 1 more); the
    checkpoint holds [64, 128], the shape num_key_value_heads 2 gives"."""
    rows = reshaped(cfg, changes)
    if not rows:
        return ""
    (k, was, now), more = rows[0], len(rows) - 1
    field, value = next(iter(changes.items()))
    return (f"{file}'s `{field}` {getattr(cfg, field)} sizes {k} {list(was)}" + (f" (and {more} more)" if more else "")
            + f"; the checkpoint holds {list(now)}, the shape {field} {value} gives")

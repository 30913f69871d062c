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


@dataclass(frozen=True, eq=False)
class Rebuilt:
    """A draft under a changed config: the model, the changes, and the tensors the change adds or leaves unused."""
    model: torch.nn.Module
    changes: dict
    added: tuple[str, ...]      # state-dict keys at their init (the checkpoint has no trained value for them)
    unused: tuple[str, ...]     # the model's tensors the changed config does not read


def rebuilt(model: torch.nn.Module, extra: dict | None = None, **changes) -> Rebuilt:
    """`model` (an `Eagle3Draft` / `PEagleDraft`) under its config with `changes` (fields of `CHANGEABLE`), sharing
    its tensors; `extra`: checkpoint tensors the model does not hold (an `input_norm.weight` its config leaves
    unused), taken by a module the change adds. ConfigError naming the field for any other field."""
    bad = [k for k in changes if k not in CHANGEABLE]
    if bad:
        raise ConfigError("model.variants.rebuilt", f"cannot change {', '.join(bad)} without new tensors",
                          expected=f"fields of {CHANGEABLE}", found=bad,
                          cause="a field that changes a tensor's shape needs another checkpoint")
    names = {f.name for f in fields(DraftConfig)}
    cfg: DraftConfig = replace(model.cfg, **{k: v for k, v in changes.items() if k in names})
    ref = next(iter(model.parameters()))
    with torch.device("cpu"):
        new = draft_for(cfg)
    old_sd, new_sd = model.state_dict(), new.state_dict()
    pool = {**(extra or {}), **old_sd}
    take = {k: v for k, v in pool.items() if k in new_sd and tuple(new_sd[k].shape) == tuple(v.shape)}
    new.load_state_dict(take, strict=False, assign=True)
    new.rotary = Rotary(cfg)
    added = tuple(sorted(k for k in new_sd if k not in take))
    new = new.to(device=ref.device)
    for k in set(new_sd) - set(old_sd):                                    # new modules take the model's float dtype
        mod, _, attr = k.rpartition(".")
        t = getattr(new.get_submodule(mod), attr)
        if t.is_floating_point():
            t.data = t.data.to(ref.dtype)
    return Rebuilt(new.eval(), dict(changes), added, tuple(sorted(k for k in old_sd if k not in new_sd)))

"""What SGLang loads of a draft, by the tables (`table_view`, its home's `EngineHome.table_view`): the aux ids it reads
(+1, the first-id rule), the d2t and embedding it keeps, the head it loads for a draft that ships none (the target's
only with draft_vocab_size unset), and q/k/v projections of another shape (zero-padded by its CPU loader). Its running
engine overrules these aspects with what it said (`said`: its log, the load eagle3lib's hook recorded).
    table_view(draft_raw=raw, tensors=headers, target_info=info, version="0.5.6", device="cpu").value("mis_shaped")
"""
from __future__ import annotations

import re
from typing import Mapping

from ..engine_kit.table_view import QKV_KEYS, d2t_aspect, embedding_aspect, layout_aspect
from ..engine_kit.view import Aspect, EngineView
from ..engines import facts
from .ids import sglang_readings


def _lm_head(raw: dict, keys: set, version) -> Aspect:
    if "lm_head.weight" in keys:
        return Aspect("lm_head", "own", "table", "the draft ships lm_head.weight")
    borrow = facts.reads("sglang", "lm_head", "borrow_when_draft_vocab_unset", version)
    if raw.get("draft_vocab_size") is None and borrow:
        return Aspect("lm_head", "target", "table", "no lm_head and draft_vocab_size unset: SGLang loads the "
                      "target's (load_lm_head_from_target)")
    return Aspect("lm_head", "random", "table", "no lm_head and draft_vocab_size set: SGLang leaves lm_head at "
                  "its random init (it warns on unexpected keys, never on missing ones)")


def _mis_shaped(keys: tuple[str, ...], device: str | None, version) -> Aspect | None:
    """How SGLang loads q/k/v projections the checkpoint holds in another shape (None: the checkpoint holds none)."""
    qkv = [k for k in keys if k.endswith(QKV_KEYS)]
    if not qkv:
        return None
    row = facts.fact("sglang", "keys", "short_qkv_shard_zero_padded@cpu")
    said = f"{', '.join(qkv)} in another shape than the config's"
    if (device or "").lower() == "cpu" and facts.reads("sglang", "keys", row.subject, version):
        return Aspect("mis_shaped", "padded", "table", f"{said}: SGLang on the CPU loads the checkpoint's rows first "
                      f"and zeros past them ({row.source})")
    where = f"on {device}" if device else "on the device the launch leaves to its default"
    return Aspect("mis_shaped", None, "unknown", f"{said}: SGLang {where}: {row.note.split('; ')[-1]} "
                  f"({row.source})")


def loaded_key(key: str, version) -> tuple[str | None, bool]:
    """(the name SGLang's loader loads a checkpoint key as, None where it drops it; whether that is known at
    `version`): the model. prefix stripped, layers.0.* as midlayer.* where the keys rows say it maps them."""
    name = re.sub(r"^model\.", "", key)
    if not name.startswith("layers.0."):
        return name, True
    r = facts.reads("sglang", "keys", "layers.0.*", version)
    if r is False:
        return None, True
    return "midlayer." + name[len("layers.0."):], r is not None


def table_view(*, draft_raw: Mapping, tensors: Mapping[str, tuple], target_info, version=None,
               runner: str | None = None, mis_shaped: tuple[str, ...] = (), device: str | None = None) -> EngineView:
    """The draft as SGLang at `version` loads it, by the tables (SGLang has no model runners: `runner` is kept as
    given)."""
    raw, keys = dict(draft_raw), set(tensors)
    r = next(x for x in sglang_readings(raw, target_info.num_layers, version or None, target_info.architecture)
             if x.engine == "sglang")
    aspects = {"layout": layout_aspect(r), "d2t": d2t_aspect("sglang", raw, keys, version),
               "embedding": embedding_aspect("sglang", keys, version), "lm_head": _lm_head(raw, keys, version)}
    shaped = _mis_shaped(mis_shaped, device, version)
    if shaped is not None:
        aspects["mis_shaped"] = shaped
    return EngineView("sglang", str(version) if version else None, runner, aspects, None, None, "")

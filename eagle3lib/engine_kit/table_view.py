"""The aspects of a draft every engine's tables answer alike (`layout_aspect`, `d2t_aspect`, `embedding_aspect`): what
each home's `table_view` builds its `EngineView` from, beside what only its engine does (vLLM's fc and borrowed head,
SGLang's head and padded q/k/v: `vllm_engine.loads`, `sglang_engine.loads`).
    d2t_aspect("vllm", raw, set(tensors), "0.32.0") -> Aspect("d2t", "checkpoint", "table", ...)
"""
from __future__ import annotations

from ..engines import facts
from .id_reading import EngineReading
from .view import Aspect

QKV_KEYS = ("q_proj.weight", "k_proj.weight", "v_proj.weight")   # the projections SGLang's fused qkv_proj loads
D2T_KEYS = ("d2t", "model.d2t", "eagle_module.d2t", "draft_id_to_target_id")


def layout_aspect(r: EngineReading) -> Aspect:
    """The boundaries the engine's reading of the aux ids feeds the fc, with the key it read them from."""
    return Aspect("layout", tuple(r.boundaries), "table", f"serving.layer_reading: {r.engine} reads {r.key}"
                  + (f" ({'; '.join(r.problems)})" if r.problems else ""))


def d2t_aspect(eng: str, raw: dict, keys: set, version) -> Aspect:
    """The offsets the engine loads: the checkpoint's, or zeros where it ships none (or a key the engine drops)."""
    key = next((k for k in D2T_KEYS if k in keys), None)
    reduced = raw.get("draft_vocab_size") not in (None, raw.get("vocab_size"))
    if key is None:
        val = "zeros" if reduced else "checkpoint"
        return Aspect("d2t", val, "table", "no d2t tensor in the checkpoint: the map stays at its init (zeros)"
                      if reduced else "full-vocab draft: no map needed")
    if key == "draft_id_to_target_id":
        dropped = facts.reads(eng, "keys", "draft_id_to_target_id dropped silently", version)
        if dropped is None:
            return Aspect("d2t", None, "unknown", f"checkpoint key {key!r}: no table row says whether {eng} "
                          "loads it")
        return Aspect("d2t", "zeros" if dropped else "checkpoint", "table",
                      f"checkpoint key {key!r}: " + ("dropped by the loader, the map stays zeros" if dropped else
                                                      "loaded"))
    return Aspect("d2t", "checkpoint", "table", f"checkpoint key {key!r} loads as d2t")


def embedding_aspect(eng: str, keys: set, version) -> Aspect:
    """The embedding the draft runs with: the target's, or its own shipped copy where the engine keeps it."""
    own = next((k for k in ("embed_tokens.weight", "model.embed_tokens.weight") if k in keys), None)
    if own is None:
        return Aspect("embedding", "target", "table", "the draft ships no embed_tokens: the target's is shared")
    kept = facts.reads(eng, "embed", "own_embed_used", version)
    src = facts.fact(eng, "embed", "own_embed_used")
    if kept is None:
        return Aspect("embedding", None, "unknown", f"the draft ships {own}; whether {eng} keeps it: no version")
    return Aspect("embedding", "own" if kept else "target", "table",
                  f"the draft ships {own}: {eng} " + ("keeps it unless it equals the target's" if kept else
                                                      "replaces it with the target's") + f" ({src.source})")

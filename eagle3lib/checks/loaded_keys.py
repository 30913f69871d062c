"""Check 9, weights: every key the draft holds (tensor headers only) mapped the way each engine's loader maps it
(`midlayer.*` vs `layers.0.*`, a `model.` prefix; facts in `engines.facts` topic "keys"), against the tensors a draft
of this config needs (`expected_shapes`, equal to `checkpoint.expected_tensors`). A key an engine drops silently, or
a tensor it would leave at random init, is confirmed with the key name. With an engine, a multi-layer draft is
checked against the engine's draft model file rules (`engines.capture_rules.draft_rules`: layers >= 1 refused or
their keys skipped). An MLA draft is read as vLLM's deepseek_eagle3 and eagle3lib read it (`mla_vllm.header_view`:
fused tensors as their parts, the later layers' unread hidden_norm left out); SGLang sees its raw keys.

Cause: weights_dropped. Usage: ``check_weights(art, engine="sglang", engine_version="0.5.6")``.
"""
from __future__ import annotations

import re

from ..causes import Finding, not_checked
from ..model.checkpoint import as_trained, canonicalize
from ..model.mla_vllm import header_view
from ..model.safefiles import weight_files
from ..model.variants import reshape_text, reshaped, shape_implied
from ..errors import Eagle3Error
from ..engines.capture_rules import draft_rules
from ..engines import facts as engine_facts
from ..engines.versions import SERVING_ENGINES, engine_title
from ..serving.homes import homes
from .inputs import Artifacts
from .registry import Options, contract

WHERE = "checks.weights"
OPTIONAL = ("embed_tokens.weight", "lm_head.weight", "d2t", "t2d")   # checks.embedding / vocab checks own these
# a later layer's input norm, under either engine's name
LATER_NORM = re.compile(r"^(model\.)?layers\.([1-9]\d*)\.(input_layernorm|hidden_norm)\.")


def expected_shapes(cfg) -> dict[str, tuple[int, ...]]:
    """{canonical name: shape} of the draft's tensors, from the config alone (what `checkpoint.expected_tensors`
    builds on the meta device; that build imports torch's compiler stack, seconds in a fresh process)."""
    H, Ht, k, nh, nkv, hd, inter = (cfg.hidden_size, cfg.target_hidden_size, cfg.num_aux, cfg.num_attention_heads,
                                    cfg.num_key_value_heads, cfg.head_dim, cfg.intermediate_size)
    out: dict[str, tuple[int, ...]] = {"d2t": (cfg.draft_vocab_size,), "t2d": (cfg.vocab_size,),
                                       "embed_tokens.weight": (cfg.vocab_size, H)}
    if cfg.norm_before_fc and cfg.use_aux_hidden_state:
        out["input_norm.weight"] = (k * Ht,)
    if cfg.fc_norm and cfg.use_aux_hidden_state:
        out.update({f"fc_norm.{i}.weight": (Ht,) for i in range(k)})
    if cfg.parallel_drafting:                                            # P-EAGLE's learnable padding state
        out["mask_hidden"] = (1, 1, k * Ht)
    if cfg.use_aux_hidden_state:                    # a draft fed the final state has no fc
        out["fc.weight"] = (H, k * Ht)
        if cfg.bias or cfg.fc_bias:
            out["fc.bias"] = (H,)
    for i in range(cfg.num_hidden_layers):          # layer 0: midlayer.*, 2H input; layers N >= 1: layers.N.*, H
        m, width = ("midlayer.", 2 * H) if i == 0 else (f"layers.{i}.", H)
        if i == 0:
            out[m + "hidden_norm.weight"] = (H,)
        out[m + "input_layernorm.weight"] = (H,)
        vd = hd
        if cfg.mla is not None:                                          # multi-latent attention (MLA drafts)
            a, ml = m + "self_attn.", cfg.mla
            vd = ml.v_head_dim
            if ml.q_lora_rank is None:
                out[a + "q_proj.weight"] = (nh * hd, width)
            else:
                out.update({a + "q_a_proj.weight": (ml.q_lora_rank, width),
                            a + "q_a_layernorm.weight": (ml.q_lora_rank,),
                            a + "q_b_proj.weight": (nh * hd, ml.q_lora_rank)})
            out.update({a + "kv_a_proj_with_mqa.weight": (ml.kv_lora_rank + ml.qk_rope_head_dim, width),
                        a + "kv_a_layernorm.weight": (ml.kv_lora_rank,),
                        a + "kv_b_proj.weight": (nh * (ml.qk_nope_head_dim + vd), ml.kv_lora_rank)})
        for proj, rows in (("q", nh * hd), ("k", nkv * hd), ("v", nkv * hd)) if cfg.mla is None else ():
            out[f"{m}self_attn.{proj}_proj.weight"] = (rows, width)      # layer 0 reads [embedding, hidden]
            if cfg.bias or cfg.attention_bias:
                out[f"{m}self_attn.{proj}_proj.bias"] = (rows,)
        out[m + "self_attn.o_proj.weight"] = (H, nh * vd)
        if cfg.attention_bias and cfg.mla is None:
            out[m + "self_attn.o_proj.bias"] = (H,)
        if cfg.qk_norm:
            out.update({m + "self_attn.q_norm.weight": (hd,), m + "self_attn.k_norm.weight": (hd,)})
        out[m + "post_attention_layernorm.weight"] = (H,)
        for proj, shape in (("gate", (inter, H)), ("up", (inter, H)), ("down", (H, inter))):
            out[f"{m}mlp.{proj}_proj.weight"] = shape
            if cfg.mlp_bias:
                out[f"{m}mlp.{proj}_proj.bias"] = shape[:1]
    out.update({"norm.weight": (H,), "lm_head.weight": (cfg.draft_vocab_size, H)})
    return out


def engine_name(key: str, engine: str, version: str | None) -> tuple[str | None, bool | None]:
    """(canonical name `engine` loads `key` as, or None when it does not map it; whether that is known for this
    version: None = depends on a version not given, or an engine whose home does not say how it loads keys). The
    engine's own loader is its home's (`EngineHome.loaded_key`); a later layer's input norm is the facts' rows."""
    known = True
    later = LATER_NORM.match(key)
    if later and engine in SERVING_ENGINES:      # a later layer's input norm: each engine uses one name
        r = engine_facts.reads(engine, "keys", f"layers.N.{later.group(3)}", version)
        if r is False:
            return None, True
        known = r is not None
    load = getattr(homes().get(engine), "loaded_key", None)
    name, loaded_known = load(key, version) if load is not None else (key, None)
    if name is None:
        return None, True
    name = re.sub(r"^layers\.([1-9]\d*)\.hidden_norm\.", r"layers.\1.input_layernorm.", name)   # SGLang's name
    return name, (known and loaded_known) if loaded_known is not None else None


# the causes check_weights reports (checks.judge: what a broken check reports as not checked)
WEIGHTS_CAUSES = ('weights_dropped',)   # (a config field that sizes its tensors otherwise also confirms
                                          # draft_config_differs, naming the key: `config_sized`)


def check_weights(art: Artifacts, engine: str | None = None, engine_version: str | None = None) -> list[Finding]:
    """One finding: keys dropped or tensors left at random init, per engine (or by eagle3lib's own key map)."""
    need = art.missing("draft", "weights")
    if need:
        return [not_checked("weights_dropped", WHERE, need)]
    keys = list(art.tensors)
    # an MLA draft as eagle3lib's loader and vLLM's deepseek_eagle3 read it: fused tensors as their parts, the later
    # layers' unread hidden_norm left out (SGLang knows neither: it sees the raw keys)
    tensors = header_view(art.tensors, art.draft_cfg) if art.draft_cfg.mla else dict(art.tensors)
    seen = {eng: list(tensors) if homes()[eng].mla_as_parts else keys for eng in SERVING_ENGINES}
    try:
        canon, renames = canonicalize({k: None for k in tensors})
    except Eagle3Error as e:
        return [Finding("weights_dropped", "confirmed", f"two checkpoint keys map to one tensor: {e.found}",
                        {"key": str(e.where)}, WHERE, fix="keep one copy (midlayer.* or layers.0.*)",
                        source="checkpoint.py TO_CANONICAL")]
    exp_engine = expected_shapes(art.draft_cfg)     # what an engine builds from the config
    exp = expected_shapes(as_trained(art.draft_cfg, {k: tuple(tensors[_raw(k, renames)][0])
                                                     for k in canon}))                  # and as it was trained
    needed = [k for k in exp if k not in OPTIONAL]
    missing = [k for k in needed if k not in canon]
    # an fc the config opts out of (use_aux_hidden_state false): the tensor training left, unused as configured
    # (vLLM builds no fc, SGLang builds one it skips for the final state); aux_opt_out judges it, not this check
    unused_fc = [k for k in canon if k.startswith("fc.") and not art.draft_cfg.use_aux_hidden_state]
    unknown = sorted(k for k in canon if k not in exp and k not in unused_fc)
    shape_bad = [k for k in needed if k in canon and tuple(tensors[_raw(k, renames)][0]) != exp[k]]
    ev = {"keys": len(keys), "format_renames": len(renames), "missing": missing[:10], "unexpected": unknown[:10],
          "shape_mismatch": shape_bad[:10], **({"fc_unused_as_configured": unused_fc} if unused_fc else {})}
    if engine is None:
        per = {}
        for eng in SERVING_ENGINES:
            names = [engine_name(k, eng, None) for k in seen[eng]]
            per[eng] = {"unmapped": [k for k, (n, _) in zip(seen[eng], names) if (n is None or n not in exp_engine)
                                     and n not in unused_fc][:10],
                        "version_dependent": [k for k, (n, ok) in zip(seen[eng], names) if ok is False][:10]}
        ev["engines"] = per
    implied = implied_by_checkpoint(art) if shape_bad and not missing else {}
    if implied:                           # every tensor there, in the shapes another value of one field gives
        return config_sized(art, implied, ev)
    if missing or shape_bad:
        return [_absent(art, missing, shape_bad, unknown, exp, tensors, renames, ev)]
    if engine is None:
        risky = {e: v for e, v in ev["engines"].items() if v["unmapped"] or v["version_dependent"]}
        src = "; ".join(rows[0].source for rows in (engine_facts.facts("keys", e) for e in SERVING_ENGINES) if rows)
        if unknown:                  # tensors no draft of this config has, whoever serves it
            return [Finding("weights_dropped", "suspected", f"keys unknown to eagle3lib: {', '.join(unknown[:3])}"
                            + "".join(f"; {e}: {', '.join((v['unmapped'] + v['version_dependent'])[:3])}"
                                      for e, v in risky.items()), ev, WHERE,
                            fix="rename the keys to the names config.json describes", source=src)]
        if risky:                    # every key is a tensor of the draft: which engine maps it is the engine's
            return [Finding("weights_dropped", "not checked", f"all {len(keys)} keys map to the draft's tensors; "
                            "some loaders map them otherwise or not at all (" + "; ".join(
                                f"{e}: {', '.join((v['unmapped'] + v['version_dependent'])[:3])}"
                                for e, v in risky.items()) + "): the serving engine and version decide", ev, WHERE,
                            needs="the serving engine and version", source=src)]
        return [Finding("weights_dropped", "ruled out", f"all {len(keys)} keys map to the draft's tensors", ev, WHERE)]
    eng = engine.lower()
    if eng not in SERVING_ENGINES:
        return [not_checked("weights_dropped", WHERE, f"an engine the library knows, not {engine!r}")]
    names = {k: engine_name(k, eng, engine_version) for k in seen[eng]}
    dropped = [k for k, (n, _) in names.items() if (n is None or n not in exp_engine) and n not in unused_fc]
    unsure = [k for k, (n, ok) in names.items() if ok is False and k not in dropped]
    silent = engine_facts.reads(eng, "keys", "unknown_dropped_silently")
    ev.update(engine=eng, engine_version=engine_version, dropped=dropped[:10], version_dependent=unsure[:10])
    src = "; ".join(f.source for f in engine_facts.facts("keys", eng))
    if dropped:
        how = "drops them silently (those tensors stay at random init)" if silent else "refuses them (load fails)"
        if all(LATER_NORM.match(k) for k in dropped):       # loaded under the engine's other norm name
            how = "loads them into a norm its forward never uses (the norm it runs stays at its init)"
        return [Finding("weights_dropped", "confirmed", f"{eng} {engine_version or ''} does not map "
                        f"{', '.join(dropped[:5])}: it {how}".replace("  ", " "), ev, WHERE,
                        fix="rename the keys to the engine's names (checkpoint.save_draft(..., format=...))",
                        source=src)]
    if unsure:
        return [Finding("weights_dropped", "suspected", f"whether {eng} maps {', '.join(unsure[:3])} depends on its "
                        "version", ev, WHERE, needs="the engine version", source=src)]
    layers = art.draft_cfg.num_hidden_layers                               # the draft model file's layer rules
    rules = draft_rules(eng, art.draft_cfg.architecture, engine_version) if layers > 1 else ()
    bad = [r for r in rules if r.extra_layers != "loaded"]
    if bad:
        ev["layer_rules"] = [{"source": r.source, "extra_layers": r.extra_layers} for r in rules]
        status = "confirmed" if len(bad) == len(rules) else "suspected"
        what = {"refused": "refuses drafts of more than one layer (the load fails)",
                "dropped": "builds layers >= 1 but skips their checkpoint keys (they run at random init)",
                "load_error": "does not know the layers.1.* keys (the load fails)"}[bad[0].extra_layers]
        return [Finding("weights_dropped", status, f"{eng} {engine_version or ''}: a {layers}-layer draft; its "
                        f"model file {what}".replace("  ", " ") + ("" if status == "confirmed" else
                        " by one of the rules that may apply to this version"), ev, WHERE,
                        fix="serve it with an engine version that loads every draft layer (SGLang >= ~0.5.12, "
                        "PR #24663; vLLM after PR #26164)", source="; ".join(r.source for r in bad),
                        needs="" if status == "confirmed" else "the exact engine version")]
    return [Finding("weights_dropped", "ruled out", f"{eng} maps all {len(keys)} keys", ev, WHERE, source=src)]


def implied_by_checkpoint(art: Artifacts) -> dict:
    """{field: value} one config field must take for the checkpoint's tensor shapes ({}: they agree, a tensor is
    missing, or no single field explains them; model.variants.shape_implied)."""
    if art.draft_cfg is None or not art.tensors or art.draft_cfg.mla:
        return {}
    try:
        canon, renames = canonicalize({k: None for k in art.tensors})
    except Eagle3Error:
        return {}
    exp = expected_shapes(art.draft_cfg)
    if any(k not in canon for k in exp if k not in OPTIONAL):
        return {}
    return shape_implied(art.draft_cfg, {k: tuple(art.tensors[_raw(k, renames)][0]) for k in canon if k in exp})


def config_sized(art: Artifacts, implied: dict, ev: dict) -> list[Finding]:
    """A config field that sizes tensors otherwise than the checkpoint holds them: the key, its value and the tensor
    shape named (draft_config_differs), and no weight dropped (weights_dropped ruled out: its consequence)."""
    (field, value), = implied.items()
    file = f"{art.draft_path}/config.json" if art.draft_path else "config.json"
    text = reshape_text(art.draft_cfg, implied, file)
    ev = {**ev, "file": file, "key": field, "value": getattr(art.draft_cfg, field), "implied": value,
          "tensors": [[k, list(a), list(b)] for k, a, b in reshaped(art.draft_cfg, implied)]}
    engines = "vLLM refuses to load it (a weight loader's shape check); SGLang keeps random weights in their place"
    return [Finding("draft_config_differs", "confirmed", f"{text}: every tensor is there, the config disagrees "
                    f"with them ({engines})", ev, WHERE, fix=f"set `{field}` to {value} in {file} (the value the "
                    "checkpoint's shapes give)", aspects=("a field the engine reads",), explains=("weights_dropped",)),
            Finding("weights_dropped", "ruled out", f"every tensor is in {weights_file(art)} under a name the "
                    f"engines map; their shapes follow {field} {value}, not the config's {getattr(art.draft_cfg, field)}",
                    ev, WHERE)]


def weights_file(art: Artifacts) -> str:
    """The draft's weight file (or its folder, for a sharded checkpoint), as a finding names it."""
    try:
        files = weight_files(art.draft_path)
    except Eagle3Error:
        return str(art.draft_path)
    return str(files[0]) if len(files) == 1 else f"{art.draft_path} ({len(files)} weight files)"


def _absent(art, missing, shape_bad, unknown, exp, tensors, renames, ev) -> Finding:
    """Tensors a draft of this config needs that are absent or mis-shaped: the file, each key, expected and found,
    an unexpected key of the same shape (a rename), and what each engine does with it."""
    file = weights_file(art)
    rows = [{"key": k, "expected": list(exp[k]), "found": None} for k in missing]
    rows += [{"key": k, "expected": list(exp[k]), "found": list(tensors[_raw(k, renames)][0])} for k in shape_bad]
    for r in rows:
        same = [u for u in unknown if r["found"] is None and list(tensors[_raw(u, renames)][0]) == r["expected"]]
        if same:
            r["renamed_as"] = same[0]
    text = "; ".join(f"key '{r['key']}': expected {r['expected']}, found " + (
        f"nothing (unexpected '{r['renamed_as']}' has that shape: renamed?)" if r.get("renamed_as") else
        "nothing" if r["found"] is None else str(r["found"])) for r in rows[:4])
    rows_by = {e: engine_facts.fact(e, "keys", "unknown_dropped_silently") for e in SERVING_ENGINES}
    said = [f"{engine_title(e)} " + ("keeps them at random init" if r.reads else "refuses the draft (the load fails)")
            for e, r in rows_by.items() if r is not None]        # by its row: a stray key dropped, or refused
    what = "; ".join(said) if (shape_bad or unknown) and said else "every engine leaves them at random init"
    ev.update(file=file, tensors=rows[:10], key=rows[0]["key"], expected=rows[0]["expected"], found=rows[0]["found"])
    return Finding("weights_dropped", "confirmed", f"{file}: {text}{' ...' if len(rows) > 4 else ''}: {what}", ev,
                   WHERE, fix="export the tensors under the names and shapes config.json describes (check the "
                   "exporter's key filter)", source="; ".join(f.source for f in rows_by.values() if f))


def _raw(canonical: str, renames) -> str:
    """The on-disk key a canonical name came from."""
    return next((old for old, new, _ in renames if new == canonical), canonical)


@contract("weights", WEIGHTS_CAUSES, parts=("artifacts", "serving"))
def judge_weights(art: Artifacts, opts: Options) -> list[Finding]:
    """The draft's keys as the engine asked about loads them."""
    return check_weights(art, opts.engine, opts.engine_version)

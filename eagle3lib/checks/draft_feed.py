"""Check 13, what the engine feeds the draft and what its K means: a draft that opts out of aux states, aux layers
on earlier pipeline-parallel ranks, a layer-id count other than the fc the engine builds, the draft KV the engine
leaves approximate (by version), the meaning of the launch's K against the served metric, and a K scheduled by
batch size.

Causes: aux_opt_out, pipeline_parallel_aux, layer_id_count, stale_draft_kv, k_meaning, k_schedule.
Usage: ``check_draft_feed(art, engine="vllm", engine_version="0.32.0", engine_runner="v1")``.
What K means is the engine's own reading of its flags: the launch's home decides it (`EngineHome.launch_rules`).
Rests on `engines.facts` rows (topics flag / serving: use_aux_hidden_state per vLLM runner, aux states over PP,
draft_rewrites_accepted_kv, k_per_batch_size) and each home's `built_fc_slots` (the fc vLLM builds:
`vllm_engine.loads`).
"""
from __future__ import annotations

from ..causes import Finding, not_checked
from ..engines import facts
from ..model.dialects import value_at
from ..serving.homes import homes
from ..engines.versions import SERVING_ENGINES, engine_title, in_force
from ..engine_kit.feed import OptOut, RankSpread
from .inputs import NEEDS, Artifacts
from .registry import Options, contract
from ..engine_kit.flag_values import integer
from ..engine_kit.launch_evidence import LaunchEvidence
from .launch_flags import engine_rule, launch_evidence, no_evidence, speculating

WHERE = "checks.draft_feed"
# keys a training tool writes the ids under that no serving engine's EAGLE-3 path reads (the engine facts have no
# "id_key" row for them): a config's claim, looked for after every key an engine reads (`claimed_id_keys`)
TOOL_ID_KEYS = ("target_layer_ids", "eagle_config.target_layer_ids")


def use_aux(raw) -> tuple[bool | None, str | None]:
    """(use_aux_hidden_state as the config sets it, where): eagle_config first, then the top level; (None, None)
    when neither sets it (engines then use aux states)."""
    ec = raw.get("eagle_config") if isinstance(raw.get("eagle_config"), dict) else {}
    for where, body in (("eagle_config.use_aux_hidden_state", ec), ("use_aux_hidden_state", raw)):
        if "use_aux_hidden_state" in body:
            return body["use_aux_hidden_state"], where
    return None, None


def claimed_id_keys() -> tuple[str, ...]:
    """Every key a draft config may hold its aux layer ids under: each serving engine's (the engine facts' "id_key"
    rows, SGLang's first, in table order), then the tools' own (TOOL_ID_KEYS)."""
    engine_keys = (k for e in SERVING_ENGINES for k in facts.id_key_names(e))
    return tuple(dict.fromkeys((*engine_keys, *TOOL_ID_KEYS)))


def config_ids(raw) -> tuple[list | None, str | None]:
    """(the draft config's aux layer ids, the key), first of `claimed_id_keys` that holds a list."""
    for k in claimed_id_keys():
        v = value_at(raw, k)
        if isinstance(v, list):
            return v, k
    return None, None


def trained_fc(art: Artifacts) -> tuple[int | None, str]:
    """(aux slots the checkpoint's fc.weight takes, 0 when it ships no fc, None without weights or a config; where
    read), from the tensor headers only (the config's own count is a claim, not the trained fc)."""
    if art.tensors is None or art.draft_cfg is None:
        return None, ""
    ht = art.draft_cfg.target_hidden_size
    for key in ("fc.weight", "model.fc.weight", "eagle_module.fc.weight"):
        shape = art.tensors.get(key, ((), ""))[0]
        if len(shape) == 2 and shape[1] % ht == 0:
            return shape[1] // ht, f"{key} {list(shape)}"
    return 0, "no fc.weight in the checkpoint"


def _aux_opt_out(art: Artifacts, engine, runner, version=None) -> Finding:
    c, w = "aux_opt_out", f"{WHERE}.aux_opt_out"
    if art.draft_raw is None:
        return not_checked(c, w, art.missing("draft"))
    raw = dict(art.draft_raw)
    flag, where = use_aux(raw)
    ids, key = config_ids(raw)
    ev = {"use_aux_hidden_state": flag, "where": where, "ids": ids, "ids_key": key, "engine": engine,
          "runner": runner}
    if flag is not False and ids != []:
        return Finding(c, "ruled out", "the draft config does not opt out of aux states (use_aux_hidden_state "
                       + ("true" if flag else "absent") + ")", ev, w)
    k, k_from = trained_fc(art)
    tl = art.trained        # the data's slots only (identified or declared): the config's ids are a claim
    trained = tl.layout if tl is not None and tl.layout and tl.source in ("identified", "declared") else None
    ev.update(fc_slots=k, fc_from=k_from, trained_layout=list(trained) if trained else None)
    with_aux = (k is not None and k > 1) or (trained is not None and len(trained) > 1)
    if flag is not False:          # ids [] with the flag on: vLLM reads an empty list as absent -> default capture
        return Finding(c, "suspected", f"{key} is an empty list: engines read it as absent and capture their "
                       "default layers, so the draft is still fed aux states", ev, w,
                       fix="write the trained layout's ids, or use_aux_hidden_state false for a last-state draft",
                       source="vllm PR#40656; tokenspeed PR#526")
    if k is None and trained is None:
        return not_checked(c, w, "the draft's weights (fc.weight's width) or its training data (slots per "
                           "sample)", f"not checked: {where} is false; whether the draft was trained on aux states "
                           "needs its fc or its data")
    why = (f"fc takes {k} aux slots ({k_from})" if k and k > 1 else
           f"its training data carries {len(trained)} slots per position" if with_aux else "")
    opt = OptOut(where, with_aux, why, ev, w)
    if engine is not None:
        rule = getattr(homes().get(engine), "feed_rules", {}).get(c)
        return rule(opt, version, runner) if rule is not None else no_feed_rule(c, engine, w)
    return every_engine(opt)


def no_feed_rule(cause: str, engine: str, where: str) -> Finding:
    """Not checked: the engine's home has no feed rule for `cause` (EngineHome.feed_rules)."""
    return Finding(cause, "not checked", f"not checked: {engine}'s home has no feed rule for {cause}",
                   {"engine": engine}, where, needs=f"a rule for {cause} in {engine}'s home (feed_rules)")


def every_engine(opt: OptOut) -> Finding:
    """No serving engine given: what each home's rule says it feeds the draft. Every home confirming, or every one
    ruling out, decides; one that confirms makes it suspected until the engine is known; else the serving engine
    decides (not checked: a last-state draft that some runner or version may feed aux states alarms nobody)."""
    said = {e: h.feed_rules["aux_opt_out"](opt) for e, h in homes().items() if "aux_opt_out" in h.feed_rules}
    fed = {label: t for f in said.values() for label, t in f.evidence.get("fed", {}).items()}
    ev = {**opt.evidence, "fed": fed, "by_engine": {e: f.status for e, f in said.items()}}
    statuses = {f.status for f in said.values()}
    decided = len(statuses) == 1 and statuses <= {"confirmed", "ruled out"}
    status = next(iter(statuses)) if decided else "suspected" if "confirmed" in statuses else "not checked"
    trained = f"aux states ({opt.why})" if opt.with_aux else "the last hidden state alone"
    text = f"{opt.key} is false and the draft was trained on {trained}; " + "; ".join(
        f"{label} feeds it {t}" for label, t in fed.items()) + (": whichever serves it" if decided else
                                                               ": the serving engine decides")
    return Finding("aux_opt_out", status, ("not checked: " if status == "not checked" else "") + text,
                   ev, opt.where, needs="" if decided else NEEDS["engine"],
                   source="; ".join(dict.fromkeys(f.source for f in said.values() if f.source)))


def pp_size(la) -> tuple[int | None, str | None]:
    name = la.field_for("pipeline_parallel")
    return integer(la, name) if name else (None, None)


def _pp(art: Artifacts, la) -> Finding:
    c, w = "pipeline_parallel_aux", f"{WHERE}.pipeline_parallel"
    pp, bad = pp_size(la)
    if bad:
        return Finding(c, "not checked", f"not checked: {bad}", {}, w, needs="the launch with a valid PP size")
    ev = {"pp_size": pp, "engine": la.engine}
    if pp is None or pp <= 1:
        return Finding(c, "ruled out", "no pipeline parallelism: every aux layer runs on the one rank that drafts",
                       ev, w)
    if art.draft_cfg is None or art.target_info is None:
        return not_checked(c, w, art.missing("draft", "target"), f"not checked: pipeline parallel size {pp}; which "
                           "rank holds each aux layer needs the draft's ids and the target's layer count")
    L = art.target_info.num_layers
    lay = art.draft_cfg.aux_layout_or_none(L)
    ids = list(art.draft_cfg.aux_layer_ids or ())
    per = -(-L // pp)
    ranks = sorted({min(int(i) // per, pp - 1) for i in ids if isinstance(i, int) and 0 <= i <= L})
    ev.update(num_layers=L, layers_per_rank=per, aux_ids=ids, aux_layout=list(lay) if lay else None, ranks=ranks)
    if not ids:
        return Finding(c, "not checked", f"not checked: pipeline parallel size {pp} and no aux ids in the config (the "
                       "engine's default layers span the ranks)", ev, w, needs="the draft's aux layer ids")
    if ranks == [pp - 1]:
        return Finding(c, "ruled out", f"every aux layer ({ids}) sits on the last of {pp} ranks, where the draft "
                       "runs", ev, w)
    rule = getattr(homes().get(la.engine), "feed_rules", {}).get(c)
    return rule(RankSpread(pp, ids, ranks, per, ev, w)) if rule is not None else no_feed_rule(c, la.engine, w)


def _count(art: Artifacts, engine, version=None) -> Finding:
    c, w = "layer_id_count", f"{WHERE}.layer_id_count"
    if art.draft_raw is None:
        return not_checked(c, w, art.missing("draft"))
    raw = dict(art.draft_raw)
    ids, key = config_ids(raw)
    k, k_from = trained_fc(art)
    ev = {"ids": ids, "key": key, "fc_slots": k, "fc_from": k_from,
          "num_aux_hidden_states": raw.get("num_aux_hidden_states")}
    if not ids:
        return Finding(c, "not checked", "not checked: the config lists no aux layer ids (missing_layer_ids says "
                       "what the engine does then)", ev, w, needs="the draft's aux layer ids")
    n = len(ids)
    if k and k != n:
        return Finding(c, "confirmed", f"{key} lists {n} ids but the checkpoint's fc takes {k} slots ({k_from}): "
                       "the ids and the trained fc disagree", ev, w, fix=f"list the {k} trained layers",
                       source="verl-SpeCo PR#6")
    # the engines that size fc from the config themselves (their home's built_fc_slots): the named one, else each
    sizers = {e: h.built_fc_slots for e, h in homes().items() if h.built_fc_slots is not None and engine in (None, e)}
    same = []
    for eng, sized in sizers.items():
        built, rule = sized(raw, version)
        ev[f"{eng}_fc_slots"] = built
        if built is not None and built != n:
            return Finding(c, "confirmed" if engine else "suspected", f"{key} lists {n} ids but "
                           f"{engine_title(eng)} builds fc for {built} slots ({rule}): the checkpoint is refused or "
                           "fed the wrong count", ev, w, fix=f"set num_aux_hidden_states {n} and the ids under "
                           "eagle_config", source=f"verl-SpeCo PR#6; {rule}")
        same += [engine_title(eng)] if built is not None else []
    return Finding(c, "ruled out", f"{key} lists {n} ids" + (f", the fc takes {k}" if k else "")
                   + (f", and {' and '.join(same)} size{'s' if len(same) == 1 else ''} fc for the same count"
                      if same else ""), ev, w)


def _stale(engine, version) -> Finding:
    c, w = "stale_draft_kv", f"{WHERE}.stale_draft_kv"
    ev = {"engine": engine, "engine_version": version}
    f = facts.fact(engine, "serving", "draft_rewrites_accepted_kv") if engine else None
    if f is None:
        return Finding(c, "not checked", "not checked: the approximate draft KV was reported on vLLM (vllm#14649)"
                       + ("" if engine else "; the engine is not known"), ev, w,
                       needs="the serving engine and version" if not engine else "served accept length against the "
                       "replay (a loss of 8-15% with no other cause)", source="vllm#14649")
    title = engine_title(engine)
    if not version:
        return not_checked(c, w, "the engine version", f"not checked: {title} {f.since}'s proposer rewrites the "
                           "accepted tokens' draft KV from the target's states; vllm#14649's V0 build did not")
    held = in_force(f.since, f.until, version, engine)
    if held:
        return Finding(c, "ruled out", f"{title} {version}: the proposer's first pass runs over every verified token "
                       "with the target's hidden states and writes the draft's KV at their slots", ev, w,
                       source=f.source)
    return Finding(c, "not checked", f"not checked: {title} {version} is not placed (the rewrite was read at "
                   f"{f.since}; vllm#14649 was filed on a V0 build of 2025-03 and is open)", ev, w,
                   needs=f"a {title} version at or after {f.since}, or served accept length against the replay",
                   source=f"vllm#14649; {f.source}")


def _k_schedule(la, lev: LaunchEvidence | None) -> Finding:
    c, w = "k_schedule", f"{WHERE}.k_schedule"
    if lev is None:
        return no_evidence(la, c, w)
    if lev.problems.get("draft"):
        return Finding(c, "not checked", f"not checked: {lev.problems['draft']}", {}, w,
                       needs="the launch command with a valid value")
    got = dict(lev.k_schedule)
    ev = {"schedule": got, "engine": la.engine}
    if got:
        k = next(iter(got))
        f = facts.fact(la.engine, "serving", "k_per_batch_size")
        return Finding(c, "confirmed", f"{k} {got[k]}: K changes with the batch size, so the served accept length "
                       "mixes depths and is not comparable with a fixed-K replay or another run", ev, w,
                       fix=f"measure with a fixed K (drop {k})",
                       source="vllm-metal PR#463; vllm-ascend PR#15174" + (f"; {f.source}" if f else ""))
    return Finding(c, "ruled out", "K is fixed: the launch picks no K per batch size (a depth the engine adapts at "
                   "run time is reported as adaptive_depth)", ev, w)


# the causes check_draft_feed reports (checks.judge: what a broken check reports as not checked)
DRAFT_FEED_CAUSES = ('aux_opt_out', 'pipeline_parallel_aux', 'layer_id_count', 'stale_draft_kv', 'k_meaning',
                     'k_schedule')


def check_draft_feed(art: Artifacts, engine: str | None = None, engine_version: str | None = None,
                     engine_runner: str | None = None) -> list[Finding]:
    """One finding per cause above; the launch ones are not checked without a launch."""
    eng = (engine or (art.launch.engine if art.launch is not None else None) or "").lower() or None
    out = [_aux_opt_out(art, eng, engine_runner, engine_version), _count(art, eng, engine_version), _stale(eng, engine_version)]
    if art.launch is None:
        need = art.missing("launch")
        return out[:1] + [not_checked("pipeline_parallel_aux", WHERE, need)] + out[1:] + \
            [not_checked(c, WHERE, need) for c in ("k_meaning", "k_schedule")]
    la = art.launch
    if speculating(la) is False:
        return out[:1] + [Finding(c, "ruled out", "the launch runs no speculative decoding (see wrong_method)",
                                  {"engine": la.engine}, WHERE) for c in ("pipeline_parallel_aux",)] + out[1:] + \
            [Finding(c, "ruled out", "the launch runs no speculative decoding (see wrong_method)",
                     {"engine": la.engine}, WHERE) for c in ("k_meaning", "k_schedule")]
    k_meaning = engine_rule(la, "k_meaning", f"{WHERE}.k_meaning", engine_version)
    return out[:1] + [_pp(art, la)] + out[1:] + [k_meaning, _k_schedule(la, launch_evidence(la))]


@contract("draft_feed", DRAFT_FEED_CAUSES, part_of="launch")
def judge_draft_feed(art: Artifacts, opts: Options) -> list[Finding]:
    """What the engine asked about feeds the draft and what K means."""
    return check_draft_feed(art, opts.engine, opts.engine_version, opts.engine_runner)

"""Check 8, chat template: the template markers in the training samples (decoded with the target tokenizer: role
headers, `<think></think>`, a system prompt) against the target tokenizer's chat template and, when given, served
prompt samples. A difference is a finding with both renderings side by side in its evidence.

One finding per aspect of chat_template_mismatch (`causes.ASPECTS`): role markers, think blocks, the system prompt
(the one the template adds by itself to a request that has none: the served default, against the training samples;
an explicit one against the served prompts) and the generation prompt (what the template opens the answer with when
it serves, against what the training samples hold before each answer). The served template is the one the launch
names (--chat-template, a file) or else the target tokenizer's. Where the served template renders an aspect
otherwise than the training samples hold it (role markers other than those every training conversation opens its
turns with, an empty think block the generation prompt opens answers with, a default system prompt, a generation
prompt token for token), the aspect is measured when the draft's weights and the trained layout are at hand
(`template_replay`: both renderings replayed through the target and the draft): the accuracy it costs decides; a
difference of the text alone never rules an aspect out.

Cause: chat_template_mismatch. Usage: ``check_template(art, n=16)``.
"""
from __future__ import annotations

import dataclasses


from ..causes import Finding, not_checked
from ..errors import Eagle3Error
from .inputs import NEEDS, Artifacts
from .registry import Options, contract
from .template_replay import (EMPTY_THINK, MARGIN, RenderingReplay, ends_alike, generation_head,
                              served_role_markers, think_block, training_markers, with_generation_prompt)

WHERE = "checks.template"
PROBE = [{"role": "system", "content": "QQSYSQQ"}, {"role": "user", "content": "QQUSRQQ"},
         {"role": "assistant", "content": "QQASTQQ"}]
SHOW = 240        # characters of each rendering kept as evidence


def template_markers(tok) -> dict | None:
    """{'system', 'user', 'assistant': the text the template puts before that turn's content, 'rendering',
    'generation_prompt'} from a probe conversation; None when the tokenizer has no usable chat template."""
    if not getattr(tok, "chat_template", None):
        return None
    try:
        full = tok.apply_chat_template(PROBE, tokenize=False)
        no_sys = tok.apply_chat_template(PROBE[1:], tokenize=False)
        gen = tok.apply_chat_template(PROBE[1:2], tokenize=False, add_generation_prompt=True)
    except Exception:      # noqa: BLE001 - a template that rejects the probe is reported, not raised
        return None
    user_first = no_sys[:no_sys.find("QQUSRQQ")]
    bos = getattr(tok, "bos_token", None) or ""
    sys_mark = full[:full.find("QQSYSQQ")].removeprefix(bos) if "QQSYSQQ" in full else None
    user_first = user_first.removeprefix(bos)
    default_sys = None      # the system header and content the template adds to a request without a system turn
    post = full[full.find("QQSYSQQ") + 7:full.find("QQUSRQQ")] if sys_mark is not None else ""
    if sys_mark and sys_mark.strip() and user_first.startswith(sys_mark) and post and user_first.endswith(post):
        default_sys = user_first[:len(user_first) - len(post)]          # e.g. "<|system|>be brief"
        user_first = user_first[len(default_sys):]
    out = {"system": sys_mark, "user": user_first, "default_system": default_sys,
           "assistant": full[full.find("QQUSRQQ") + 7:full.find("QQASTQQ")],
           "rendering": full, "no_system_rendering": no_sys, "generation_prompt": gen[gen.find("QQUSRQQ") + 7:]}
    return out


def _decode(tok, seqs: list[list[int]]) -> list[str]:
    return [tok.decode(s, skip_special_tokens=False) for s in seqs]


def _ids(tok, text: str) -> list[int]:
    return list(tok(text, add_special_tokens=False)["input_ids"]) if text else []


def _contains(seq: list[int], sub: list[int]) -> bool:
    n = len(sub)
    return n > 0 and any(seq[i:i + n] == sub for i in range(len(seq) - n + 1))


def _share(seqs: list[list[int]], sub: list[int]) -> float:
    """Fraction of token sequences that contain the token sequence `sub` (markers are matched as tokens)."""
    return sum(_contains(s, sub) for s in seqs) / len(seqs) if seqs and sub else 0.0


def _empty_think(tok, seq: list[int]) -> bool:
    """<think> followed by </think> with only whitespace between (matched on tokens, decoded gaps)."""
    open_, close = _ids(tok, "<think>"), _ids(tok, "</think>")
    if len(open_) != 1 or len(close) != 1:
        return bool(EMPTY_THINK.search(tok.decode(seq, skip_special_tokens=False)))
    for i, t in enumerate(seq):
        if t == open_[0]:
            j = next((j for j in range(i + 1, min(i + 5, len(seq))) if seq[j] == close[0]), None)
            if j is not None and not tok.decode(seq[i + 1:j]).strip():
                return True
    return False


def _as_ids(tok, items) -> list[list[int]]:
    return [_ids(tok, x) if isinstance(x, str) else (x.tolist() if hasattr(x, "tolist") else list(x)) for x in items]


# the causes check_template reports (checks.judge: what a broken check reports as not checked)
TEMPLATE_CAUSES = ('chat_template_mismatch',)


def check_template(art: Artifacts, n: int = 16) -> list[Finding]:
    """Findings on role markers, think blocks and system prompts: training samples vs template vs served."""
    need = art.missing("data") or (None if art.target_path else NEEDS["tokenizer"])
    if need:
        return [not_checked("chat_template_mismatch", WHERE, need)]
    try:
        tok = art.tokenizer
    except (Eagle3Error, OSError, ValueError) as e:
        return [not_checked("chat_template_mismatch", WHERE, NEEDS["tokenizer"], f"cannot load it: {e}")]
    if tok is None:
        return [not_checked("chat_template_mismatch", WHERE, NEEDS["tokenizer"])]
    named = art.launch_template
    if named is not None:
        tok.chat_template = named
    drawn = list(art.data.sample(min(n, len(art.data)), 0))
    train_ids = _as_ids(tok, [s.input_ids for s in drawn])
    if not train_ids:     # no sample read: nothing says what the training data was rendered with
        return [not_checked("chat_template_mismatch", WHERE, NEEDS["data"] + " with readable samples",
                            f"no training sample could be read from {art.data.root}")]
    served_ids = _as_ids(tok, art.served_prompts) if art.served_prompts else None
    train = _decode(tok, train_ids)
    served = _decode(tok, served_ids) if served_ids is not None else None
    marks = template_markers(tok)
    train_samples = [(ids, s.loss_mask.tolist()) for ids, s in zip(train_ids, drawn)]     # (ids, loss mask) each
    found = training_markers(tok, train_samples) if marks is not None else None
    layout = art.trained.layout if art.trained is not None and art.trained.layout else None
    rr = RenderingReplay(art, tok, marks, found, layout=layout) if marks is not None else None
    ev = {"samples": len(train), "training_rendering": train[0][:SHOW] if train else ""}
    out = []
    if marks is None:
        out.append(not_checked("chat_template_mismatch", f"{WHERE}.markers", "a target tokenizer with a chat template",
                               aspects=("role markers",)))
    else:
        ev["template_rendering"] = marks["rendering"][:SHOW]
        share = {r: _share(train_ids, _ids(tok, marks[r].strip())) for r in ("user", "assistant")
                 if marks[r].strip()}
        ev["role_marker_share"] = share
        off = _roles_differ(tok, marks, found)
        if found is not None:
            ev["training_role_markers"] = {r: tok.decode(found[r], skip_special_tokens=False)[:SHOW]
                                           for r in ("user", "assistant")}
            ev["template_role_markers"] = {"user": marks["user"][:SHOW], "assistant": marks["assistant"][:SHOW]}
        if off:
            said = ("the served template renders the role markers otherwise than the training samples hold them ("
                    + "; ".join(f"{r}: {marks[r]!r} served, {tok.decode(found[r], skip_special_tokens=False)!r} "
                                "trained" for r in off) + ")")
            fix = "serve with the template the training data was rendered with (--chat-template), or re-render the " \
                  "training data with this one and retrain"
            src = "SpecForge#296, PR#182; EAGLE#132"
            out.append(_measured(rr, "role markers", f"{WHERE}.markers", ev, said, fix, src) or
                       Finding("chat_template_mismatch", "confirmed", said, ev, f"{WHERE}.markers", fix=fix,
                               source=src, aspects=("role markers",)))
        elif share and max(share.values()) == 0:
            out.append(Finding("chat_template_mismatch", "confirmed", "no training sample contains the target "
                               f"template's role markers ({', '.join(repr(marks[r].strip()) for r in share)}): the "
                               "data was rendered with another template", ev, f"{WHERE}.markers",
                               fix="re-render the training conversations with the target's chat template",
                               source="SpecForge#296, PR#182; EAGLE#132", aspects=("role markers",)))
        else:
            out.append(Finding("chat_template_mismatch", "ruled out", "the training samples carry the target "
                               "template's role markers" + (" where the template puts them" if found else ""), ev,
                               f"{WHERE}.markers", aspects=("role markers",)))
    think_train = sum(_empty_think(tok, t) for t in train_ids) / max(len(train_ids), 1)
    ev_t = {"training_empty_think_share": think_train, "training_rendering": ev["training_rendering"]}
    gen_think = bool(marks) and bool(think_block(marks["generation_prompt"]))
    ev_t["template_generation_prompt"] = marks["generation_prompt"][:SHOW] if marks else None
    if served is not None:
        think_served = sum(_empty_think(tok, t) for t in served_ids) / len(served_ids)
        ev_t.update(served_empty_think_share=think_served, served_rendering=served[0][:SHOW])
        off = (think_train > 0.5) != (think_served > 0.5)
        out.append(Finding("chat_template_mismatch", "confirmed" if off else "ruled out",
                           f"empty <think></think> in {think_train:.0%} of training samples, {think_served:.0%} of "
                           "served prompts" if off else "think mode agrees between training and serving", ev_t,
                           f"{WHERE}.think", fix="train and serve in the same think mode" if off else "",
                           source="SpecForge#296; z-lab/dflash#133" if off else "", aspects=("think blocks",)))
    elif think_train > 0.5 and marks is not None and not gen_think:
        out.append(Finding("chat_template_mismatch", "suspected", f"{think_train:.0%} of training samples hold an "
                           "empty <think></think>; the template's generation prompt has none", ev_t, f"{WHERE}.think",
                           fix="check the served think mode (enable_thinking)", needs=NEEDS["served_prompts"],
                           source="SpecForge#296", aspects=("think blocks",)))
    elif think_train <= 0.5 and gen_think:
        said = (f"the served template opens each answer with an empty think block "
                f"({think_block(marks['generation_prompt'])!r}); {think_train:.0%} of training samples hold one")
        fix = "serve in the think mode the draft was trained in (enable_thinking=False, or the training template), " \
              "or retrain on data rendered with this one"
        out.append(_measured(rr, "think blocks", f"{WHERE}.think", ev_t, said, fix,
                             "SpecForge#296; z-lab/dflash#133") or
                   Finding("chat_template_mismatch", "confirmed", said, ev_t, f"{WHERE}.think", fix=fix,
                           source="SpecForge#296; z-lab/dflash#133", aspects=("think blocks",)))
    else:
        out.append(Finding("chat_template_mismatch", "ruled out", f"empty think blocks in {think_train:.0%} of "
                           "training samples, consistent with the template", ev_t, f"{WHERE}.think",
                           aspects=("think blocks",)))
    if named is not None:
        ev["served_template"] = f"--chat-template {art.launch.flags.get('chat_template')}"
    out += _system(tok, marks, train_ids, served_ids, served, ev, rr)
    out.append(_generation_prompt(tok, marks, train_samples, ev, rr))
    judged = (f"--chat-template {art.launch.flags.get('chat_template')}" if named is not None else
              "the target tokenizer's" + ("" if art.launch is not None else " (no launch given)"))
    return [dataclasses.replace(f, evidence={**f.evidence, TEMPLATE_JUDGED: judged}) for f in out]


TEMPLATE_JUDGED = "template_judged"     # evidence key: the template an aspect was judged on (diagnose.combine)


def _roles_differ(tok, marks, found) -> list[str]:
    """The roles ("user", "assistant") whose marker the served template renders otherwise than every training
    sample holds it, neither ending the other (`found`: `training_markers`; none when they could not be inferred:
    then only the shares of the template's markers in the samples speak)."""
    if found is None:
        return []
    served = dict(zip(("user", "assistant"), served_role_markers(tok, marks)))
    return [r for r in ("user", "assistant") if served[r] and not ends_alike(found[r], served[r])]


def _measured(rr: RenderingReplay | None, aspect: str, w: str, ev: dict, said: str, fix: str,
              source: str) -> Finding | None:
    """The aspect decided by replaying both renderings (None when the replay cannot run or none is given)."""
    rep = rr.measure(aspect) if rr is not None else {}
    a, b = rep.get("acc_0_training_rendering"), rep.get("acc_0_served_rendering")
    if a is None or b is None or a != a or b != b:
        return None
    ev = {**ev, **rep}
    if a - b > MARGIN:
        return Finding("chat_template_mismatch", "confirmed", f"{said}: step-0 accuracy {b:.3f} on the served "
                       f"rendering vs {a:.3f} on the training one (replayed)", ev, w, fix=fix, source=source,
                       aspects=(aspect,), measured=True)
    return Finding("chat_template_mismatch", "ruled out", f"{said}, but the draft does not notice: step-0 accuracy "
                   f"{b:.3f} on the served rendering vs {a:.3f} on the training one", ev, w, aspects=(aspect,),
                   measured=True)


def _system(tok, marks, train_ids, served_ids, served, ev, rr: RenderingReplay | None = None) -> list[Finding]:
    """The system-prompt aspect: the default the served template adds to a request without one, against the
    training samples; an explicit one in the training samples against the served prompts."""
    w, asp = f"{WHERE}.system", ("system prompt",)
    if marks is None:
        return [not_checked("chat_template_mismatch", w, "a target tokenizer with a chat template", aspects=asp)]
    sys_mark = (marks.get("system") or "").strip()
    default = (marks.get("default_system") or "").strip()
    sys_train = _share(train_ids, _ids(tok, sys_mark)) if sys_mark else 0.0
    ev_s = {"training_system_share": sys_train, "system_marker": sys_mark or None, "template_default_system":
            default[:SHOW] or None, "template_rendering_without_system": marks["no_system_rendering"][:SHOW],
            "training_rendering": ev["training_rendering"]}
    if default:
        share = _share(train_ids, _ids(tok, default))
        ev_s["training_default_system_share"] = share
        if share < 0.5:
            said = (f"the served template adds a default system prompt to a request without one ({default[:80]!r}); "
                    f"{share:.0%} of training samples carry it")
            fix = ("serve with the template the training data was rendered with (--chat-template), or re-render the "
                   "training data with this one and retrain")
            src = "EAGLE#5, #79; SpecForge PR#182"
            return [_measured(rr, "system prompt", w, ev_s, said, fix, src) or
                    Finding("chat_template_mismatch", "confirmed", said, ev_s, w, fix=fix, source=src, aspects=asp)]
        return [Finding("chat_template_mismatch", "ruled out", f"the template's default system prompt is in "
                        f"{share:.0%} of training samples", ev_s, w, aspects=asp)]
    if served is None:
        if sys_train > 0.5:
            return [not_checked("chat_template_mismatch", w, NEEDS["served_prompts"], f"a system prompt in "
                                f"{sys_train:.0%} of training samples; serving unknown (the template adds none "
                                "of its own)", aspects=asp)]
        return [Finding("chat_template_mismatch", "ruled out", "the served template adds no system prompt of its own "
                        f"and {sys_train:.0%} of training samples carry one: a request without a system prompt "
                        "renders as trained", ev_s, w, aspects=asp)]
    sys_ids = _ids(tok, sys_mark)
    sys_served = _share(served_ids, sys_ids)
    ev_s.update(served_system_share=sys_served, served_rendering=served[0][:SHOW])
    off = (sys_train > 0.5) != (sys_served > 0.5)
    return [Finding("chat_template_mismatch", "confirmed" if off else "ruled out",
                    f"a system prompt in {sys_train:.0%} of training samples, {sys_served:.0%} of served prompts" if off
                    else "system prompts agree between training and serving", ev_s, w,
                    fix="serve with the training data's system prompt (or retrain)" if off else "",
                    source="EAGLE#5, #79; sglang PR#4716" if off else "", aspects=asp)]


def _opens_answers(ids: list[int], mask: list[int], gen: list[int]) -> bool:
    """Whether every answer of a sample (a rise of its loss mask) opens with `gen`; a sample whose mask marks no
    prompt (all ones: no answer boundary known) counts when it holds `gen` anywhere."""
    if not any(m == 1 and i > 0 and mask[i - 1] == 0 for i, m in enumerate(mask)):
        return _contains(ids, gen)
    return with_generation_prompt(ids, mask, gen) is None


def _generation_prompt(tok, marks, train_masks, ev, rr: RenderingReplay | None = None) -> Finding:
    """The generation-prompt aspect: what the template opens the answer with when serving (its think block aside),
    before every answer of the training samples ((ids, loss mask) each), token for token."""
    w, asp = f"{WHERE}.generation_prompt", ("generation prompt",)
    if marks is None:
        return not_checked("chat_template_mismatch", w, "a target tokenizer with a chat template", aspects=asp)
    gen = generation_head(marks["generation_prompt"])      # its think block is the think-blocks aspect
    if not gen.strip():
        return Finding("chat_template_mismatch", "ruled out", "the template adds no generation prompt", {}, w,
                       aspects=asp)
    if gen == marks["assistant"]:           # what a conversation's answers open with: the role-marker aspect's
        return Finding("chat_template_mismatch", "ruled out", f"the template's generation prompt {gen!r} is the "
                       "assistant header it writes before every answer of a conversation (compared with the "
                       "training samples as a role marker)", {"template_generation_prompt": gen[:SHOW]}, w,
                       aspects=asp)
    gen_ids = _ids(tok, gen)                # as served, trailing whitespace included (it is a token of its own)
    share = sum(_opens_answers(ids, mask, gen_ids) for ids, mask in train_masks) / max(len(train_masks), 1)
    ev_g = {"template_generation_prompt": gen[:SHOW], "training_share": share,
            "training_rendering": ev["training_rendering"]}
    if share < 0.5:
        said = f"the served template opens each answer with {gen!r}; {share:.0%} of training samples hold it before " \
               "their answers"
        fix = "serve with the template the training data was rendered with, or retrain on data rendered with this one"
        return _measured(rr, "generation prompt", w, ev_g, said, fix, "SpecForge#296, PR#182") or \
            Finding("chat_template_mismatch", "confirmed", said, ev_g, w, fix=fix, source="SpecForge#296, PR#182",
                    aspects=asp)
    return Finding("chat_template_mismatch", "ruled out", f"the template's generation prompt {gen!r} opens the "
                   f"answers of {share:.0%} of training samples", ev_g, w, aspects=asp)


@contract("template", TEMPLATE_CAUSES, parts=("artifacts", "serving data"))
def judge_template(art: Artifacts, opts: Options) -> list[Finding]:
    """The chat template of the training samples against the target's and the served prompts'."""
    return check_template(art)

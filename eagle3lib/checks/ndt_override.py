"""12 `ndt_override`: the speculative settings SGLang runs for a launch, against those it was given.

Decided, in order, by the server's own report (/server_info or the startup log's ServerArgs: measured), the rule
table at the SGLang version given or named (engines/sglang_table.py), the installed SGLang's own ServerArgs
(serving.sglang_introspect), or, with no version, the rule table's answer in each version range. notebook 01's
`steps.discovery.Discovery.cause_findings` calls it with what it read.
"""
from __future__ import annotations

import pandas as pd

from ..causes import Finding, not_checked
from ..engines.sglang_resolver import Resolution, resolve_by_range
from ..engines.sglang_rule import KNOBS
from ..engines.sglang_table import RULES
from ..serving import sglang_introspect
from ..serving.launch import LaunchArgs


def ndt_override_findings(launch: LaunchArgs | None, resolution: Resolution | None, version: str,
                          version_source: str, observed: bool, diff: pd.DataFrame,
                          target_arch: str | None) -> list[Finding]:
    """The serving-settings cause (`ndt_override`) for a launch and SGLang's offline `resolution` of it at `version`
    (from `version_source`: "given", "/server_info", "launch command", "server log" or "default"): the server's own
    report (`diff`, requested vs effective; `observed` when /server_info or the log's ServerArgs were read) decides
    when given (measured); else the rule table at that version; with no version, the installed SGLang's resolver,
    or the table's answer in every version range (`ndt_by_range`: suspected, naming the version, when they differ)."""
    where = "serving settings (launch command vs effective settings)"
    if launch is None:
        return [not_checked("ndt_override", where, "the launch command (launch_command)")]
    unread = [k for k in launch.unread if k in KNOBS + ("speculative_algorithm", "speculative_config")]
    if unread:      # a knob that did not parse is never evidence of a rewrite
        flags = ", ".join("--" + k.replace("_", "-") for k in unread)
        return [Finding("ndt_override", "not checked", f"not checked: {flags} could not be read",
                        {"unread": unread}, where, needs=f"the launch command with a valid value ({flags})")]
    if launch.engine != "sglang" or resolution is None:
        why = "vLLM runs K as given" if launch.engine == "vllm" else "no SGLang resolution"
        return [Finding("ndt_override", "ruled out" if launch.engine == "vllm" else "not checked",
                        f"{why}", {"engine": launch.engine}, where,
                        needs="" if launch.engine == "vllm" else "a readable SGLang launch command")]
    res, knobs = resolution, KNOBS
    if version_source == "default" and not observed:
        return [installed_sglang_finding(launch, res, where) or ndt_by_range(launch, target_arch, where)]
    eff = {k.replace("speculative_", ""): res.effective.get(k) for k in knobs}
    changed = {k: v for k, v in res.changed().items() if k in knobs and v[0] is not None}
    if not changed:
        return [Finding("ndt_override", "ruled out", f"SGLang {version} runs the speculative knobs as "
                        f"requested ({eff})", {"sglang_version": version, **eff}, where)]
    seen = diff.set_index("field")["agrees"].to_dict() if len(diff) else {}
    verdicts = [seen.get(k) for k in changed]
    evidence = {"sglang_version": version, **{k.replace("speculative_", "") + "_requested": r
                                                    for k, (r, _) in changed.items()},
                **{k.replace("speculative_", "") + "_effective": e for k, (_, e) in changed.items()},
                "server_report": ("agrees" if all(v is True for v in verdicts) else "contradicts"
                                  if any(v is False for v in verdicts) else "not given")}
    rules = {h.field: h for h in res.hits if h.field in changed}
    text = "; ".join(f"{k.replace('speculative_', '')} {r} -> {e}" for k, (r, e) in changed.items())
    source = "; ".join(dict.fromkeys(f"{h.rule_id} ({h.source})" for h in rules.values()))
    if evidence["server_report"] == "contradicts":
        return [Finding("ndt_override", "ruled out", f"the rule table predicts {text}, but the server "
                        "reports the requested values", evidence, where, source=source, measured=True)]
    topk = res.effective.get("speculative_eagle_topk")
    ndt_req = (changed.get("speculative_num_draft_tokens") or (None, None))[0]
    fix = (f"with topk 1 SGLang drafts num_steps + 1 tokens: for {ndt_req} draft tokens set "
           f"--speculative-num-steps {ndt_req - 1}" if topk == 1 and isinstance(ndt_req, int) and ndt_req > 1
           else f"request settings SGLang keeps (it runs {eff})")
    measured = evidence["server_report"] == "agrees"
    how = "the server's own report agrees" if measured else (
        f"the rule table at SGLang {version} ({version_source}); the startup log or /server_info "
        "would show it")
    if not measured:
        evidence["decided_by"] = f"the SGLang rule table at {version} (engines/sglang_table.py)"
    return [Finding("ndt_override", "confirmed", f"SGLang {version} rewrote {text} ({how})", evidence,
                    where if measured else f"{where}, rule table", fix=fix, source=source, measured=measured)]


def ranges_answered(launch, target_arch, rules) -> list[tuple[str, str | None, str, str, Resolution]]:
    """[(lo, hi, kind, answer, resolution)]: kind "refuses", "rewrites" or "as requested" per SGLang version range
    (adjacent ranges with the same answer merged)."""
    out: list = []
    for lo, hi, r in resolve_by_range(launch, target_arch, rules=rules):
        ch = {k: v for k, v in r.changed().items() if k in KNOBS and v[0] is not None}
        kind = "refuses" if r.rejected else "rewrites" if ch else "as requested"
        answer = ("refuses the launch: " + r.rejected[0][:100] if r.rejected else
                  "; ".join(f"{k.replace('speculative_', '')} {a} -> {b}" for k, (a, b) in ch.items()) or kind)
        if out and out[-1][3] == answer:
            out[-1] = (out[-1][0], hi, kind, answer, out[-1][4])
        else:
            out.append((lo, hi, kind, answer, r))
    return out


def installed_sglang_finding(launch: LaunchArgs, res: Resolution, where: str) -> Finding | None:
    """ndt_override as the installed SGLang's own ServerArgs resolves the launch (serving.sglang_introspect), for
    a launch whose server version is unknown; None when SGLang is not installed here or could not resolve it."""
    if not sglang_introspect.sglang_available():
        return None
    intro = sglang_introspect.introspect(launch)
    if intro.error:
        return None
    changed = {k: (res.requested.get(k), intro.effective.get(k)) for k in KNOBS
               if res.requested.get(k) is not None and intro.effective.get(k) != res.requested.get(k)}
    v = intro.version or "of unknown version"
    ev = {"sglang_version": intro.version or "unknown", "version_source": "installed sglang",
          "decided_by": "the installed SGLang's own ServerArgs (serving.sglang_introspect)",
          **{k.replace("speculative_", "") + "_requested": r for k, (r, _) in changed.items()},
          **{k.replace("speculative_", "") + "_effective": e for k, (_, e) in changed.items()}}
    w = f"{where}, the installed SGLang's resolver"
    caveat = "the server's own version was not given: it may differ from the one installed here"
    if not changed:
        return Finding("ndt_override", "ruled out", f"the installed SGLang {v} runs the speculative knobs as "
                       f"requested ({caveat})", ev, w)
    text = "; ".join(f"{k.replace('speculative_', '')} {r} -> {e}" for k, (r, e) in changed.items())
    return Finding("ndt_override", "confirmed", f"the installed SGLang {v} rewrites {text} ({caveat})", ev, w,
                   fix="request settings SGLang keeps", source="sglang ServerArgs (installed)")


def ndt_by_range(launch: LaunchArgs, target_arch: str | None, where: str, rules=RULES) -> Finding:
    """ndt_override with no SGLang version and no server report: the rule table's answer in each version range
    (engines.sglang_resolver.version_ranges): confirmed when every range that starts this launch rewrites the knobs,
    ruled out when none does, else suspected with the version as the missing input."""
    rows = ranges_answered(launch, target_arch, rules)
    span = {id(r): f"{lo} to {hi} (excl.)" if hi else f"{lo} onwards" for lo, hi, _, _, r in rows}
    answers = {span[id(r)]: a for _, _, _, a, r in rows}
    starts = [r for r in rows if r[2] != "refuses"]
    over = [r for r in starts if r[2] == "rewrites"]
    ev = {"sglang_version": "unknown", "by_version_range": answers,
          "decided_by": "the SGLang rule table in each version range (engines/sglang_table.py)"}
    w = f"{where}, rule table by SGLang version"
    fixes, sources = set(), set()
    for _, _, _, _, r in over:
        ch = {k: v for k, v in r.changed().items() if k in KNOBS and v[0] is not None}
        sources.update(f"{h.rule_id} ({h.source})" for h in r.hits if h.field in ch)
        ndt = (ch.get("speculative_num_draft_tokens") or (None,))[0]        # the requested count
        if r.effective.get("speculative_eagle_topk") == 1 and isinstance(ndt, int) and ndt > 1:
            fixes.add(f"with topk 1 SGLang drafts num_steps + 1 tokens: for {ndt} draft tokens set "
                      f"--speculative-num-steps {ndt - 1}")
    fix, source = "; ".join(sorted(fixes)) or "request settings SGLang keeps", "; ".join(sorted(sources))
    needs = "the SGLang version (--sglang-version), or the server's startup log or /server_info"
    if not starts:
        return Finding("ndt_override", "not checked", "every SGLang version the rule table knows refuses this "
                       "launch", ev, w, needs=needs)
    if len(over) == len(starts):
        return Finding("ndt_override", "confirmed", f"every SGLang version range that starts this launch rewrites it "
                       f"({'; '.join(f'{span[id(r[4])]}: {r[3]}' for r in over)}): the version does not matter",
                       ev, w, fix=fix, source=source)
    if not over:
        return Finding("ndt_override", "ruled out", "every SGLang version range runs the speculative knobs as "
                       "requested (or refuses the launch)", ev, w)
    said = lambda rs: ", ".join(span[id(r[4])] + (f" ({r[3]})" if r[2] == "rewrites" else "") for r in rs)  # noqa: E731
    return Finding("ndt_override", "suspected", f"SGLang rewrites this launch in {said(over)} and runs it as "
                   f"requested in {said([r for r in starts if r[2] != 'rewrites'])}: the version decides", ev, w,
                   fix=fix, needs=needs, source=source)

"""How SGLang's startup rewrites of a launch's speculative settings decide cause 12 `ndt_override`
(`HOME.rewrite_rule`, asked by checks.ndt_override).

Decided, in order, by the server's own report (/server_info or the startup log's ServerArgs: measured), the rule
table at the SGLang version given or named (`rules_table`), the installed SGLang's own ServerArgs (`introspect`), or,
with no version, the rule table's answer in each version range.
"""
from __future__ import annotations

import pandas as pd

from ..causes import Finding
from ..engine_kit.launch_reading import LaunchArgs
from .introspect import Introspection, values_equal
from .resolver import Resolution, resolve_by_range
from .rule import KNOBS
from .rules_table import RULES


def rewrite_finding(launch: LaunchArgs, resolution: Resolution | None, version: str, version_source: str,
                    observed: bool, diff: pd.DataFrame, target_arch: str | None,
                    introspection: Introspection | None, where: str) -> Finding:
    """`ndt_override` for an SGLang launch and its offline `resolution` at `version` (from `version_source`: "given",
    "/server_info", "launch command", "server log" or "default"): the server's own report (`diff`, requested vs
    effective; `observed` when /server_info or the log's ServerArgs were read) decides when given (measured); else
    the rule table at that version; with no version, the installed SGLang's answer (`introspection`, when SGLang is
    installed here), else the table's answer in every version range (`ndt_by_range`: suspected, naming the version,
    when they differ)."""
    res = resolution
    if res is None:
        return Finding("ndt_override", "not checked", "no SGLang resolution", {"engine": launch.engine}, where,
                       needs="a readable SGLang launch command")
    if version_source == "default" and not observed:
        return installed_sglang_finding(res, where, introspection) or ndt_by_range(launch, target_arch, where)
    eff = {k.replace("speculative_", ""): res.effective.get(k) for k in KNOBS}
    changed = changed_knobs(res)
    if not changed:
        return Finding("ndt_override", "ruled out", f"SGLang {version} runs the speculative knobs as "
                       f"requested ({eff})", {"sglang_version": version, **eff}, where)
    seen = diff.set_index("field")["agrees"].to_dict() if len(diff) else {}
    verdicts = [seen.get(k) for k in changed]
    report = ("agrees" if all(v is True for v in verdicts) else "contradicts" if any(v is False for v in verdicts)
              else "not given")
    evidence = {"sglang_version": version, **_knob_evidence(changed), "server_report": report}
    text = _rewrite_text(changed)
    source = "; ".join(dict.fromkeys(f"{h.rule_id} ({h.source})" for h in res.hits if h.field in changed))
    if report == "contradicts":
        return Finding("ndt_override", "ruled out", f"the rule table predicts {text}, but the server "
                       "reports the requested values", evidence, where, source=source, measured=True)
    fix = _topk1_fix(res, changed) or f"request settings SGLang keeps (it runs {eff})"
    measured = report == "agrees"
    how = "the server's own report agrees" if measured else (
        f"the rule table at SGLang {version} ({version_source}); the startup log or /server_info would show it")
    if not measured:
        evidence["decided_by"] = f"the SGLang rule table at {version} (sglang_engine/rules_table.py)"
    return Finding("ndt_override", "confirmed", f"SGLang {version} rewrote {text} ({how})", evidence,
                   where if measured else f"{where}, rule table", fix=fix, source=source, measured=measured)


def changed_knobs(res: Resolution) -> dict[str, tuple]:
    """{knob: (requested, effective)} for each speculative knob the launch set and SGLang's rules changed."""
    return {k: v for k, v in res.changed().items() if k in KNOBS and v[0] is not None}


def _rewrite_text(changed: dict[str, tuple]) -> str:
    return "; ".join(f"{k.replace('speculative_', '')} {r} -> {e}" for k, (r, e) in changed.items())


def _knob_evidence(changed: dict[str, tuple]) -> dict:
    out = {}
    for k, (r, e) in changed.items():
        out[k.replace("speculative_", "") + "_requested"], out[k.replace("speculative_", "") + "_effective"] = r, e
    return out


def _topk1_fix(res: Resolution, changed: dict[str, tuple]) -> str | None:
    """The fix for the topk-1 rewrite (SGLang drafts num_steps + 1 tokens), None when it is not that rewrite."""
    ndt = (changed.get("speculative_num_draft_tokens") or (None,))[0]        # the requested count
    if res.effective.get("speculative_eagle_topk") == 1 and isinstance(ndt, int) and ndt > 1:
        return (f"with topk 1 SGLang drafts num_steps + 1 tokens: for {ndt} draft tokens set "
                f"--speculative-num-steps {ndt - 1}")
    return None


def ranges_answered(launch, target_arch, rules) -> list[tuple[str, str | None, str, str, Resolution]]:
    """[(lo, hi, kind, answer, resolution)]: kind "refuses", "rewrites" or "as requested" per SGLang version range
    (adjacent ranges with the same answer merged)."""
    out: list = []
    for lo, hi, r in resolve_by_range(launch, target_arch, rules=rules):
        ch = changed_knobs(r)
        kind = "refuses" if r.rejected else "rewrites" if ch else "as requested"
        answer = "refuses the launch: " + r.rejected[0][:100] if r.rejected else _rewrite_text(ch) or kind
        if out and out[-1][3] == answer:
            out[-1] = (out[-1][0], hi, kind, answer, out[-1][4])
        else:
            out.append((lo, hi, kind, answer, r))
    return out


def installed_sglang_finding(res: Resolution, where: str, intro: Introspection | None) -> Finding | None:
    """ndt_override as the installed SGLang's own ServerArgs resolved the launch (`intro`, from
    sglang_engine.introspect), for a launch whose server version is unknown; None when SGLang is not installed
    here (no `intro`) or could not resolve it."""
    if intro is None or intro.error:
        return None
    changed = {k: (res.requested.get(k), intro.effective.get(k)) for k in KNOBS
               if res.requested.get(k) is not None and not values_equal(intro.effective.get(k), res.requested.get(k))}
    v = intro.version or "of unknown version"
    ev = {"sglang_version": intro.version or "unknown", "version_source": "installed sglang",
          "decided_by": "the installed SGLang's own ServerArgs (sglang_engine.introspect)", **_knob_evidence(changed)}
    w = f"{where}, the installed SGLang's resolver"
    caveat = "the server's own version was not given: it may differ from the one installed here"
    if not changed:
        return Finding("ndt_override", "ruled out", f"the installed SGLang {v} runs the speculative knobs as "
                       f"requested ({caveat})", ev, w)
    return Finding("ndt_override", "confirmed", f"the installed SGLang {v} rewrites {_rewrite_text(changed)} "
                   f"({caveat})", ev, w, fix="request settings SGLang keeps", source="sglang ServerArgs (installed)")


def ndt_by_range(launch: LaunchArgs, target_arch: str | None, where: str, rules=RULES) -> Finding:
    """ndt_override with no SGLang version and no server report: the rule table's answer in each version range
    (sglang_engine.resolver.version_ranges): confirmed when every range that starts this launch rewrites the knobs,
    ruled out when none does, else suspected with the version as the missing input."""
    rows = ranges_answered(launch, target_arch, rules)
    span = {id(r): f"{lo} to {hi} (excl.)" if hi else f"{lo} onwards" for lo, hi, _, _, r in rows}
    answers = {span[id(r)]: a for _, _, _, a, r in rows}
    starts = [r for r in rows if r[2] != "refuses"]
    over = [r for r in starts if r[2] == "rewrites"]
    ev = {"sglang_version": "unknown", "by_version_range": answers,
          "decided_by": "the SGLang rule table in each version range (sglang_engine/rules_table.py)"}
    w = f"{where}, rule table by SGLang version"
    fixes, sources = set(), set()
    for _, _, _, _, r in over:
        ch = changed_knobs(r)
        sources.update(f"{h.rule_id} ({h.source})" for h in r.hits if h.field in ch)
        fixes.add(_topk1_fix(r, ch))
    fixes.discard(None)
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

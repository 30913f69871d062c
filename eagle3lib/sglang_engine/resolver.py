"""How SGLang rewrites speculative settings at startup, as a table of rules (data) plus an offline resolver.

Each `Rule` row holds the SGLang version range where it holds (min inclusive, max exclusive), its source (PR /
commit from serving-and-throughput.md Part A), condition, effect and the line SGLang logs. E.g. topk == 1 ⇒
num_draft_tokens := num_steps + 1 (≥ v0.4.6, PR #5318).
    res = resolve(parse_launch(cmd), version="0.5.6", target_arch=target_arch_from_config("target/"))
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from ..model.config import read_config_json
from ..errors import ConfigError, ServingArgsError
from ..engines.versions import CHECKED_AGAINST, DEFAULT_VERSION, LATEST_TRACED, parse_version
from .rules_table import RULES
from .rule import KNOBS, Rule, RuleContext, RuleRejection

@dataclass(frozen=True)
class RuleHit:
    """One rule that fired: which setting it touched, from what to what, and how SGLang reports it."""

    rule_id: str
    field: str
    requested: Any             # what the launch command asked for (None = unset)
    effective: Any             # what SGLang runs with after the rule
    message: str               # what happened, in words
    logged: str                # "warning", "info", "silent", "error", "not traced"
    log_line: str | None       # the exact line SGLang prints, when known
    source: str
    kind: str
    label: str = ""


@dataclass(frozen=True)
class Resolution:
    """Requested vs effective SGLang settings for one version, with every rule that fired."""

    version: str
    target_arch: str | None
    requested: dict
    effective: dict
    hits: tuple[RuleHit, ...]
    rejected: tuple[str, ...] = ()   # SGLang would refuse to start (strict=False keeps going to show this)
    warnings: tuple[str, ...] = ()   # caveats of the offline answer (unknown architecture, untraced versions)

    def changed(self) -> dict:
        """{field: (requested, effective)} for every setting a rule changed or filled in."""
        out = {}
        for h in self.hits:
            if h.kind in ("rewrite", "default") and h.requested != self.effective.get(h.field):
                out[h.field] = (h.requested, self.effective.get(h.field))
        return out

    def frame(self) -> pd.DataFrame:
        """One row per rule hit: field, requested, effective, changed, rule, source, logged, message."""
        rows = [{"field": h.field, "requested": h.requested, "effective": h.effective,
                 "changed": h.requested != h.effective, "rule": h.rule_id, "label": h.label, "source": h.source,
                 "logged": h.logged, "message": h.message} for h in self.hits]
        return pd.DataFrame(rows, columns=["field", "requested", "effective", "changed", "rule", "label", "source",
                                           "logged", "message"], dtype=object)


def sglang_rules_frame(version: str | None = None, rules: tuple[Rule, ...] = RULES) -> pd.DataFrame:
    """The rule table itself, one row per rule (only those holding in `version` when given)."""
    cols = ["id", "label", "min_version", "max_version", "kind", "logged", "condition", "effect", "source", "traced"]
    rows = [{c: getattr(r, c) for c in cols} for r in rules if version is None or r.holds_in(version)]
    return pd.DataFrame(rows, columns=cols)


def _requested_settings(requested) -> tuple[dict, dict]:
    engine = getattr(requested, "engine", None)
    if engine is not None:
        if engine != "sglang":
            raise ServingArgsError("sglang_engine.resolver.resolve", "the launch command is not an SGLang command",
                                   expected="engine 'sglang'", found=engine,
                                   cause="vLLM settings are mapped by serving.crossengine, not by SGLang's rules")
        return dict(requested.flags), dict(requested.env)
    if not isinstance(requested, Mapping):
        raise ServingArgsError("sglang_engine.resolver.resolve", "requested settings of an unknown kind",
                               expected="LaunchArgs or {ServerArgs field: value}", found=type(requested).__name__)
    return dict(requested), {}


def resolve(requested, version: str = DEFAULT_VERSION, target_arch: str | None = None,
            env: Mapping[str, str] | None = None, strict: bool = True, rules: tuple[Rule, ...] = RULES) -> Resolution:
    """Effective settings SGLang `version` runs for `requested`; strict=False records rejections instead of raising."""
    v = parse_version(version)
    settings, launch_env = _requested_settings(requested)
    for k in KNOBS + ("speculative_algorithm",):
        settings.setdefault(k, None)
    ctx = RuleContext(dict(settings), target_arch, {**launch_env, **(env or {})}, v)
    hits, rejected, warnings = [], [], []
    if v > parse_version(CHECKED_AGAINST):
        warnings.append(f"SGLang {v} is newer than the rule table (traced up to {LATEST_TRACED}, run against "
                        f"{CHECKED_AGAINST}): the newest behaviour known is assumed; ask SGLang itself "
                        "(sglang_engine.introspect) to be sure")
    elif v > parse_version(LATEST_TRACED):
        warnings.append(f"SGLang {v} is newer than the rule table's trace ({LATEST_TRACED}); its speculative rules "
                        f"were compared with the real SGLang {CHECKED_AGAINST} on a grid of launch commands, the "
                        "others assume HEAD behaviour")
    for rule in rules:
        if not rule.holds_in(v) or (rule.algos and ctx.algo not in rule.algos):
            continue
        try:
            if not rule.when(ctx):
                continue
            changes = rule.apply(ctx)
        except RuleRejection as r:
            err = ServingArgsError(f"SGLang {v} setting {r.field}", r.problem, expected=r.allowed, found=r.value,
                                   cause=f"rule {rule.id} ({rule.source})")
            if strict:
                raise err from None
            rejected.append(str(err))
            hits.append(RuleHit(rule.id, r.field, settings.get(r.field), r.value, r.problem, "error",
                                rule.message, rule.source, "reject", rule.label))
            break
        if not rule.traced:
            warnings.append(f"rule {rule.id} is known at the reference HEAD only; whether SGLang {v} has it is "
                            "not traced")
        if rule.kind == "note":
            f0 = rule.fields[0]
            hits.append(RuleHit(rule.id, f0, settings.get(f0), ctx.s.get(f0), rule.effect, rule.logged,
                                rule.message, rule.source, "note", rule.label))
        for f, new in changes.items():
            if ctx.s.get(f) == new:
                continue
            ctx.s[f] = new
            line = rule.message if rule.logged in ("warning", "info") else None
            hits.append(RuleHit(rule.id, f, settings.get(f), new, rule.effect, rule.logged, line, rule.source,
                                rule.kind, rule.label))
        if rule.id.startswith("auto_params_other") and target_arch is None and changes:
            warnings.append("target architecture unknown: the auto-chosen (steps, topk, ndt) assume the generic "
                            "fallback; pass target_arch (target_arch_from_config) to be sure")
    return Resolution(str(v), target_arch, settings, ctx.s, tuple(hits), tuple(rejected), tuple(warnings))


def setting(launch, version: str | None = None, target_arch: str | None = None) -> tuple:
    """(num_steps, topk, num_draft_tokens) SGLang `version` drafts for a launch (`EngineHome.setting`): its effective
    knobs as the rule table resolves them (a rejection recorded, never raised), each None where left unset."""
    res = resolve(launch, version or DEFAULT_VERSION, target_arch, strict=False)
    return tuple(res.effective.get(k) for k in KNOBS)


def version_ranges(rules: tuple[Rule, ...] = RULES, fields=KNOBS) -> list[tuple[str, str | None]]:
    """The SGLang version ranges [lo, hi) inside which no rule touching `fields` starts or ends (hi None = the
    newest): the ranges a question about those knobs has one answer in, from the first version the table knows."""
    edges = sorted({v for r in rules if set(r.fields) & set(fields) for v in (r.min_version, r.max_version) if v},
                   key=parse_version)
    return list(zip(edges, edges[1:] + [None]))


def resolve_by_range(requested, target_arch: str | None = None, env: Mapping[str, str] | None = None,
                     rules: tuple[Rule, ...] = RULES) -> list[tuple[str, str | None, Resolution]]:
    """[(lo, hi, what SGLang lo..hi runs for `requested`)] for each of `version_ranges`: the answer for a launch
    whose SGLang version is not known, range by range (strict=False: a range that refuses it says so)."""
    return [(lo, hi, resolve(requested, lo, target_arch, env, strict=False, rules=rules))
            for lo, hi in version_ranges(rules)]


@dataclass(frozen=True)
class AcceptRateFormula:
    """One `accept rate` formula SGLang has logged (serving-and-throughput.md A.2)."""

    since: str            # first version (or, unreleased, the date and PR) that logs it
    name: str             # e.g. "tau/num_draft_tokens"
    fn: Any = field(repr=False, compare=False)   # fn(tau, num_steps, num_draft_tokens) -> rate or None
    pretty: str = ""      # "τ / NDT"
    source: str = ""      # PR that introduced it
    note: str = ""


# SGLang's logged `accept rate` by version, in release order. Before v0.5.3.post2 only `accept len` is logged;
# tau/num_steps lived on main for a while (2025-10-13, #11441) without a release.
ACCEPT_RATE_FORMULAS = (
    AcceptRateFormula("0.5.3.post2", "tau/(num_steps+1)", lambda t, s, n: t / (s + 1) if s is not None else None,
                      "τ / (steps + 1)"),
    AcceptRateFormula("0.5.5.post3", "tau/num_draft_tokens", lambda t, s, n: t / n if n else None, "τ / NDT",
                      note="τ=3 at NDT 4 logs 0.75"),
    AcceptRateFormula("0.5.11", "(tau-1)/(num_draft_tokens-1)",
                      lambda t, s, n: (t - 1) / (n - 1) if n and n > 1 else None, "(τ − 1) / (NDT − 1)",
                      source="#23530 (2026-04-28)", note="drafts only; τ=3 at NDT 4 logs 0.67; with topk>1 NDT−1 "
                      "is the tree size"),
)
UNRELEASED_ACCEPT_RATE = AcceptRateFormula("2025-10-13 #11441", "tau/num_steps", lambda t, s, n: t / s if s else None,
                                           "τ / steps", source="#11441", note="no release; can exceed 1")


def accept_rate_formula(version: str) -> AcceptRateFormula | None:
    """The `accept rate` formula SGLang `version` logs, or None (only `accept len` logged)."""
    v = parse_version(version)
    hits = [row for row in ACCEPT_RATE_FORMULAS if v >= parse_version(row.since)]
    return hits[-1] if hits else None


def accept_rate(version: str, tau: float, num_steps: int, num_draft_tokens: int) -> tuple[float | None, str]:
    """SGLang `version`'s logged 'accept rate' for tau and its formula name ((None, '') before v0.5.3.post2)."""
    f = accept_rate_formula(version)
    return (f.fn(tau, num_steps, num_draft_tokens), f.name) if f else (None, "")


def accept_rate_versions() -> list[tuple[str, AcceptRateFormula]]:
    """Every formula with the versions that log it, e.g. ("v0.5.3.post2-before v0.5.5.post3", formula)."""
    out = [(UNRELEASED_ACCEPT_RATE.since, UNRELEASED_ACCEPT_RATE)]
    for row, nxt in zip(ACCEPT_RATE_FORMULAS, ACCEPT_RATE_FORMULAS[1:] + (None,)):
        out.append((f"v{row.since}" + (f"-before v{nxt.since}" if nxt else " onwards"), row))
    return out


def logged_accept_rate(version: str) -> str:
    """The formula behind the `accept rate:` SGLang `version` logs, in words."""
    f = accept_rate_formula(version)
    return f.pretty if f else "not logged (only accept len)"


def accept_metrics() -> tuple[tuple[str, str, str, str], ...]:
    """What SGLang's logged accept metrics mean, by version (metric, formula, versions, note;
    serving-and-throughput.md A.2): `accept len` and each `accept rate` formula."""
    rows = [("accept len / avg_spec_accept_length", "τ = accepted tokens incl. bonus / verify steps", "all",
             "avg_spec_accept_length is a lifetime average incl. warmup")]
    rows += [("accept rate", f.pretty, versions + (f" {f.source}" if f.source else ""), f.note)
             for versions, f in accept_rate_versions()]
    return tuple(rows)


def adjustment_warning(hit: RuleHit) -> str:
    """The line SGLang logs for this hit, word for word ('' when SGLang logs nothing for it)."""
    return hit.log_line or ""


def read_config(path_or_dir: str | Path) -> dict:
    """A model's config.json (the file, or the folder holding it) as a raw dict."""
    return read_config_json(path_or_dir)[0]


def target_arch_from_config(path_or_dir: str | Path) -> str | None:
    """``architectures[0]`` of a target's config.json (file or model folder); None when the key is absent."""
    archs = read_config(path_or_dir).get("architectures")
    if archs is not None and not (isinstance(archs, list) and all(isinstance(a, str) for a in archs)):
        raise ConfigError(f"{path_or_dir}: 'architectures'", "not a list of class names",
                          expected='["LlamaForCausalLM"]', found=repr(archs)[:80])
    return archs[0] if archs else None

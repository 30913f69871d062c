"""sglang_engine.rewrites: the speculative settings SGLang runs, decided by the server's report, the rule table at a
version, the installed SGLang's resolver, or the table's answer in each version range."""
from __future__ import annotations

import pandas as pd

from eagle3lib.sglang_engine.rewrites import ndt_by_range, rewrite_finding
from eagle3lib.sglang_engine.resolver import resolve
from eagle3lib.sglang_engine.rules_table import RULES
from eagle3lib.engines.versions import parse_version
from eagle3lib.serving.launch import parse_launch

SEED = ("python -m sglang.launch_server --model-path /m/target --speculative-algorithm EAGLE3 "
        "--speculative-draft-model-path /m/draft --speculative-num-steps 1 --speculative-eagle-topk 1 "
        "--speculative-num-draft-tokens 16")
ARCH = "LlamaForCausalLM"
WHERE = "serving settings"


def _find(diff=None, version="0.5.6", source="given", observed=False, intro=None):
    launch = parse_launch(SEED)
    return rewrite_finding(launch, resolve(launch, version, ARCH, strict=False), version, source, observed,
                           pd.DataFrame() if diff is None else diff, ARCH, intro, WHERE)


def test_the_rule_table_at_a_given_version_confirms_and_the_server_report_decides():
    """0.5.6 rewrites 16 draft tokens to 2 under topk 1: confirmed by the table (not measured); the server reporting
    2 makes it measured; the server reporting the requested 16 overrules the table (ruled out, measured)."""
    f = _find()
    assert (f.status, f.measured) == ("confirmed", False) and "16 -> 2" in f.summary
    assert "--speculative-num-steps 15" in f.fix
    g = _find(pd.DataFrame({"field": ["speculative_num_draft_tokens"], "agrees": [True]}), observed=True)
    assert (g.status, g.measured, g.evidence["server_report"]) == ("confirmed", True, "agrees")
    h = _find(pd.DataFrame({"field": ["speculative_num_draft_tokens"], "agrees": [False]}), observed=True)
    assert (h.status, h.measured) == ("ruled out", True) and "server reports the requested" in h.summary


def test_ndt_rewritten_in_every_version_range_is_confirmed_without_the_version():
    """A rule table whose every range has the topk=1 rule (the table from 0.4.6 on): confirmed, version unknown."""
    later = tuple(r for r in RULES if r.min_version and parse_version(r.min_version) >= parse_version("0.4.6"))
    f = ndt_by_range(parse_launch(SEED), ARCH, "serving settings", rules=later)
    assert f.status == "confirmed" and "the version does not matter" in f.summary and not f.needs


def test_with_no_version_the_installed_sglangs_answer_decides_and_without_it_the_ranges():
    """Version unknown, no server report: the installed SGLang's own resolution (an Introspection, as
    sglang_engine.introspect returns it) decides, naming its version; one that refused falls back to the ranges."""
    from eagle3lib.sglang_engine.introspect import Introspection
    eff = {"speculative_num_steps": 1, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 2}
    intro = Introspection("0.5.9", "post_init diff", dict(eff, speculative_num_draft_tokens=16), eff, (), ())
    f = _find(source="default", intro=intro)
    assert f.status == "confirmed" and f.where.endswith("the installed SGLang's resolver")
    assert (f.evidence["sglang_version"], f.evidence["num_draft_tokens_effective"]) == ("0.5.9", 2)
    same = Introspection("0.5.9", "post_init diff", {}, dict(eff, speculative_num_draft_tokens=16), (), ())
    g = _find(source="default", intro=same)
    assert g.status == "ruled out" and "may differ from the one installed here" in g.summary
    refused = Introspection(None, "post_init diff", {}, {}, (), (), error="ValueError: no accelerator")
    h = _find(source="default", intro=refused)
    assert "by_version_range" in h.evidence and h.status == "suspected"

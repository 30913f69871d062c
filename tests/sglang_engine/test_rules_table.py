"""The SGLang rule table as data: well-formed rows, version ranges, the seed's rule present."""
from __future__ import annotations

import pytest

from eagle3lib.errors import ServingArgsError
from eagle3lib.engines.versions import parse_version
from eagle3lib.sglang_engine.rules_table import RULES


def test_rows_are_well_formed():
    """Unique ids, a source and known kinds for every row; version ranges are non-empty."""
    assert len({r.id for r in RULES}) == len(RULES)
    for r in RULES:
        assert r.source and r.fields and r.kind in ("rewrite", "default", "reject", "note"), r.id
        if r.min_version and r.max_version:
            assert parse_version(r.min_version) < parse_version(r.max_version), r.id


def test_topk1_rule_holds_from_0_4_6():
    """The seed's rule (topk == 1 forces num_draft_tokens = num_steps + 1) holds from v0.4.6 on."""
    rule = next(r for r in RULES if "speculative_num_draft_tokens" in r.fields and r.label.startswith("topk=1"))
    assert rule.holds_in("0.4.6") and rule.holds_in("0.5.23") and not rule.holds_in("0.4.5")


def test_parse_version_forms():
    """v-prefixes, post releases and 'head' parse; garbage is a ServingArgsError."""
    assert parse_version("v0.5.3.post2") > parse_version("0.5.3")
    assert parse_version("head") == parse_version("0.5.15")
    with pytest.raises(ServingArgsError, match="SGLang version"):
        parse_version("not-a-version")

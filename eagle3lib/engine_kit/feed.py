"""What a draft's config and weights say of the states it expects, as a home's `feed_rules` judge them: a config
that opts out of aux states (`OptOut`), aux layers spread over pipeline-parallel ranks (`RankSpread`).

checks.draft_feed reads the draft (the flag, fc's width, the training data's slots; the ids and the ranks they sit
on) once; the serving engine's home says what it then feeds the draft:
    rule = home.feed_rules["aux_opt_out"]; rule(OptOut(...), version, runner) -> Finding
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OptOut:
    """A draft config whose use_aux_hidden_state is false (or whose ids are an empty list), with what the draft
    was trained on."""

    key: str            # where the config says it ("eagle_config.use_aux_hidden_state")
    with_aux: bool      # trained on aux states: fc takes > 1 slot, or the data carries > 1 slot per position
    why: str            # how that is known ("fc takes 3 aux slots (fc.weight [64, 192])")
    evidence: dict      # the check's evidence so far (flag, ids, fc slots, trained layout)
    where: str          # the finding's where


@dataclass(frozen=True)
class RankSpread:
    """A draft's aux layers on a pipeline-parallel launch: which ranks hold them (the draft runs on the last)."""

    pp: int             # pipeline parallel size
    ids: list           # the config's aux layer ids
    ranks: list         # the ranks they sit on, sorted, at least one before the last
    per: int            # layers per rank
    evidence: dict
    where: str

"""One ranked answer from the findings of every check: confirmed causes first, then conflicts, suspected causes,
what was ruled out, and what could not be checked (with the input that would check it).

Per cause, the findings of all checks are combined: one check confirming what another rules out is a
`conflict` (shown with both sides, never resolved silently) unless only one side rests on a measurement (a
replay, a recapture, a serving dump, the server's own report), which then decides over configs and engine
rules (the other side stays listed in the cause's findings); a check that ruled a cause out settles another's
mere suspicion of it (e.g. a serving dump that shows the trained layout, against an engine rule that predicts a
wrong one; the suspicion stays listed in the cause's findings); a checked finding outranks a `not checked` one.

Per aspect (`causes.ASPECTS`): the findings about one aspect of a cause (a finding that names no aspect is about all
of them) are combined as above, and the cause is confirmed when an aspect is, in conflict or suspected when one is,
and ruled out only when every aspect is; an aspect no finding checked leaves the cause "not checked (aspects …)"
however many others were ruled out. Evidence about one aspect never conflicts with evidence about another.
The training samples are the record of training: where their search (a config field, a shipped tensor) confirms a
cause, a served τ the engine reaches as trained does not rule it out (that engine just does not use the artifact).

One planted bug, one root cause: a confirmed finding that `explains` another cause (ids written in the output-of
convention read as input-of by the engine, which then captures fewer slots than the fc takes) makes that cause's
alarms its consequence: each is restated as "ruled out" as a cause of its own, naming the root, unless it shows a
served layout other than the one the root finding names (then it is evidence of its own and stays).

"No fault found" is said only on evidence (`Diagnosis.healthy`): nothing confirmed, suspected or in conflict,
something ruled out, no given input unreadable and no part of the workbook broken (`problems`, listed first), the
inputs every verdict needs given (`not_given`: "3 of 35 causes checked: give --train-data and --launch to check the
rest"), and every given input deciding what it decides (`undecided`). Otherwise the headline says what could not
be read, or how little was checked.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import pandas as pd

from ..causes import CATALOGUE, Finding
from ..checks.template import TEMPLATE_JUDGED
from ..layout import NOT_CAPTURED, ZERO
from ..replay.artifacts import WHERE as ARTIFACT_SEARCH
from ..replay.counterfactual import WHERE as CONFIG_SEARCH
from ..checks.served_loss import AS_SERVED
from ..steps.given import Problem
from .decision import SeedDecision, seed_decision

RANK = ("confirmed", "conflict", "suspected", "ruled out", "not checked")
TRAINING_RECORD = (CONFIG_SEARCH, ARTIFACT_SEARCH)   # the searches on the training samples: the record of training


@dataclass(frozen=True)
class CauseVerdict:
    """Everything the checks said about one cause, and the combined status."""

    cause: str
    title: str
    status: str                        # one of RANK
    findings: tuple[Finding, ...]      # every finding about this cause, in the order the checks ran
    aspects: tuple[tuple[str, str], ...] = ()   # (aspect, its combined status) in catalogue order

    @property
    def unchecked(self) -> tuple[str, ...]:
        """The aspects no finding checked (a cause ruled out on its other aspects stays "not checked")."""
        return tuple(a for a, st in self.aspects if st == "not checked")

    @property
    def label(self) -> str:
        """The status as shown: "not checked (aspects system prompt, generation prompt)" when some aspects were
        ruled out and others not checked."""
        if self.status == "not checked" and self.unchecked and len(self.unchecked) < len(self.aspects):
            return f"not checked (aspects {', '.join(self.unchecked)})"
        return self.status

    @property
    def deciding(self) -> tuple[Finding, ...]:
        """The findings behind the status (for a conflict: both sides; for a cause left not checked on some
        aspects: the findings that ruled the others out, and those that say what is missing)."""
        decided = {a for a, st in self.aspects if st == self.status} or {a for a, _ in self.aspects}
        about = [f for f in self.findings if not f.aspects or set(f.aspects) & decided]
        if self.status == "conflict":
            return tuple(f for f in about if f.status in ("confirmed", "ruled out"))
        if self.status == "not checked" and self.unchecked and len(self.unchecked) < len(self.aspects):
            return tuple(f for f in self.findings if f.status in ("ruled out", "not checked"))
        return tuple(f for f in about if f.status == self.status)

    @property
    def measurement(self) -> str:
        """The measurement that decided, when one did (the deciding measured findings' `measurement` evidence, else
        where they were seen)."""
        return "; ".join(dict.fromkeys(str(f.evidence.get("measurement") or f.where) for f in self.deciding
                                       if f.measured and f.status == self.status))

    @property
    def evidence(self) -> str:
        """The deciding findings' summaries, each with where it was seen."""
        text = "; ".join(f"{f.summary} [{f.where}]" for f in self.deciding)
        return f"{text}; not checked: aspects {', '.join(self.unchecked)}" if self.label != self.status else text

    @property
    def fix(self) -> str:
        return "; ".join(dict.fromkeys(f.fix for f in self.deciding if f.fix))

    @property
    def needs(self) -> str:
        return "; ".join(dict.fromkeys(f.needs for f in self.findings if f.status == "not checked" and f.needs))

    def to_dict(self) -> dict:
        return {"cause": self.cause, "title": self.title, "status": self.status, "label": self.label,
                "aspects": dict(self.aspects), "unchecked_aspects": list(self.unchecked),
                "measurement": self.measurement, "evidence": self.evidence, "fix": self.fix, "needs": self.needs,
                "findings": [f.to_dict() for f in self.findings]}


@dataclass(frozen=True)
class Diagnosis:
    """The ranked causes of one run (every notebook, or the terminal command)."""

    verdicts: tuple[CauseVerdict, ...]
    problems: tuple[Problem, ...] = ()      # given inputs that could not be read, parts that broke
    not_given: tuple[str, ...] = ()         # inputs a "no fault found" needs that were not given ("--launch")
    undecided: tuple[str, ...] = ()         # given inputs that decided none of what they decide, and why

    @property
    def decision(self) -> SeedDecision:
        """The seed's decision (diagnose.decision) from every finding: what the terminal, the index and notebook
        02 show first."""
        return seed_decision((f for v in self.verdicts for f in v.findings), {v.cause: v.status for v in self.verdicts})

    def by_status(self, status: str) -> tuple[CauseVerdict, ...]:
        return tuple(v for v in self.verdicts if v.status == status)

    @property
    def alarms(self) -> tuple[CauseVerdict, ...]:
        """Confirmed, conflicting and suspected causes, in rank order."""
        return tuple(v for v in self.verdicts if v.status in ("confirmed", "conflict", "suspected"))

    @property
    def healthy(self) -> bool:
        """"No fault found" on evidence: no alarm, something ruled out, every given input read and no part broken,
        the inputs it needs given and each given input deciding what it decides. A diagnosis of nothing is never
        healthy."""
        return (not self.alarms and any(v.status == "ruled out" for v in self.verdicts) and not self.problems
                and not self.not_given and not self.undecided)

    def headline(self) -> str:
        """One line: what could not be read (first), the alarms, or "no fault found" and how much was checked;
        short of evidence, how little was checked and the inputs that would check the rest."""
        checked = [v for v in self.verdicts if v.status != "not checked"]
        parts = []
        if self.problems:
            more = len(self.problems) - 1
            parts.append(self.problems[0].headline() + (f" (and {more} more problem{'s' * (more > 1)})"
                                                        if more else ""))
        parts += [f"{v.status}: {v.title}" for v in self.alarms]
        if parts:
            return "; ".join(parts)
        if not checked:
            return (f"nothing checked: {len(self.verdicts)} causes not checked (give the inputs each one names)"
                    if self.verdicts else "nothing checked: no finding was recorded")
        if self.not_given or self.undecided:
            why = ([f"give {' and '.join(self.not_given)} to check the rest"] if self.not_given else []) + \
                list(self.undecided)
            return f"{len(checked)} of {len(self.verdicts)} causes checked: " + "; ".join(why)
        return (f"no fault found: {len(checked)} causes checked and ruled out, "
                f"{len(self.by_status('not checked'))} not checked")

    def frame(self) -> pd.DataFrame:
        """One row per cause, ranked: status, cause, evidence (with where), fix, input needed."""
        cols = ["status", "cause", "title", "evidence", "measurement", "fix", "needs"]
        return pd.DataFrame([{"status": v.label, "cause": v.cause, "title": v.title, "evidence": v.evidence,
                              "measurement": v.measurement, "fix": v.fix, "needs": v.needs} for v in self.verdicts],
                            columns=cols)

    def text(self, width: int | None = None) -> str:
        """The answer a terminal prints (`answer.answer_text`): wrapped to `width` (the terminal's), never cut."""
        from .answer import answer_text

        return answer_text(self, width)

    def to_dict(self) -> dict:
        return {"healthy": self.healthy, "headline": self.headline(), "decision": self.decision.to_dict(),
                "problems": [p.to_dict() for p in self.problems], "not_given": list(self.not_given),
                "undecided": list(self.undecided), "verdicts": [v.to_dict() for v in self.verdicts]}


def combine(status: Iterable[str], measured: Iterable[bool] | None = None) -> str:
    """The combined status of one cause from its findings' statuses (and whether each rests on a measurement).

    Confirmed against ruled out is a conflict, unless only one side rests on a measurement: then it decides."""
    status = list(status)
    meas = list(measured) if measured is not None else [False] * len(status)
    s = set(status)
    if "confirmed" in s and "ruled out" in s:
        conf = any(m for st, m in zip(status, meas) if st == "confirmed")
        ruled = any(m for st, m in zip(status, meas) if st == "ruled out")
        if conf != ruled:
            return "confirmed" if conf else "ruled out"
        return "conflict"
    if "suspected" in s and "ruled out" in s and "confirmed" not in s:
        sus = any(m for st, m in zip(status, meas) if st == "suspected")
        ruled = any(m for st, m in zip(status, meas) if st == "ruled out")
        return "suspected" if sus and not ruled else "ruled out"
    for name in ("confirmed", "ruled out", "suspected"):
        if name in s:
            return name
    return "not checked"


def combine_aspects(cause_id: str, findings) -> tuple[str, tuple[tuple[str, str], ...]]:
    """(the cause's status, (aspect, status) per aspect): each aspect combines the findings about it (`combine`);
    confirmed if an aspect is, then conflict, suspected; ruled out only when every aspect is; else not checked."""
    findings = list(findings)
    per = []
    for a in CATALOGUE[cause_id].aspects:
        about = [f for f in findings if not f.aspects or a in f.aspects]
        if any(f.status == "confirmed" and f.measured and f.where in TRAINING_RECORD for f in about):
            # the training samples (the record of training) say the shipped artifact is not what was trained; a
            # served τ the engine reaches as trained says only that this engine does not use it: no conflict
            about = [f for f in about if not (f.status == "ruled out" and f.where == AS_SERVED)]
        per.append((a, combine([f.status for f in about], [f.measured for f in about])))
    got = {st for _, st in per}
    for name in ("confirmed", "conflict", "suspected"):
        if name in got:
            return name, tuple(per)
    return ("ruled out" if got == {"ruled out"} else "not checked"), tuple(per)


def _combined(cause_id: str, fs: list[Finding]) -> tuple[str, tuple[Finding, ...], tuple[tuple[str, str], ...]]:
    status, per = combine_aspects(cause_id, fs)
    return status, tuple(fs), per


_NO_SLOT = (None, ZERO, NOT_CAPTURED, "None")


def _served(f: Finding) -> tuple[str, ...] | None:
    """The captured slots a finding names (its served layout, uncaptured slots left out), None when it names none."""
    for key in ("served_layout", "captured"):
        v = f.evidence.get(key)
        if isinstance(v, (list, tuple)):
            return tuple(str(x) for x in v if x not in _NO_SLOT)
    return None


def as_consequence(f: Finding, root: Finding) -> Finding:
    """Alarm `f` restated as the consequence of `root` (a confirmed finding that explains f's cause)."""
    return Finding(f.cause, "ruled out", f"not a cause of its own: a consequence of {root.cause} ({root.summary[:160]})"
                   f"; seen: {f.summary}", {**f.evidence, "consequence_of": root.cause}, f.where, source=f.source,
                   measured=f.measured, aspects=f.aspects)


def explained(groups: dict[str, list[Finding]]) -> dict[str, list[Finding]]:
    """`groups` (cause -> findings) with the alarms of every cause a confirmed cause's confirmed finding `explains`
    restated as its consequence (`as_consequence`), except those that name another served layout than the root."""
    out = dict(groups)
    for c, fs in groups.items():
        if combine_aspects(c, fs)[0] != "confirmed":
            continue
        for root in (f for f in fs if f.status == "confirmed" and f.explains):
            for d in root.explains:
                same = lambda g: _served(g) is None or _served(root) is None or _served(g) == _served(root)  # noqa: E731
                out[d] = [as_consequence(g, root) if g.status in ("confirmed", "suspected") and same(g) else g
                          for g in out.get(d, ())]
    return {c: fs for c, fs in out.items() if fs}


def served_template_only(groups: dict[str, list[Finding]]) -> dict[str, list[Finding]]:
    """The chat-template aspects judged on the template the launch serves (--chat-template FILE) when any finding
    was: a finding judged on the tokenizer's own template (notebook 00, no launch) then says nothing about what is
    served and is left out, never set against it."""
    fs = groups.get("chat_template_mismatch") or []
    served = [f for f in fs if str(f.evidence.get(TEMPLATE_JUDGED, "")).startswith("--chat-template")]
    if not served:
        return groups
    return {**groups, "chat_template_mismatch": [f for f in fs if f in served or TEMPLATE_JUDGED not in f.evidence
                                                 or f.status == "not checked"]}


def diagnose(findings: Iterable[Finding], problems: Iterable[Problem] = (), not_given: Iterable[str] = (),
             undecided: Iterable[str] = ()) -> Diagnosis:
    """Group findings by cause, restate what a confirmed root cause explains as its consequence (`explained`),
    combine each cause's statuses, and rank (catalogue order within a status); `problems`, `not_given` and
    `undecided` say what stands between the findings and "no fault found"."""
    groups: dict[str, list[Finding]] = {}
    for f in findings:
        groups.setdefault(f.cause, []).append(f)
    groups = explained(served_template_only(groups))
    order = {c: i for i, c in enumerate(CATALOGUE)}
    verdicts = [CauseVerdict(c, CATALOGUE[c].title, *_combined(c, fs)) for c, fs in groups.items()]
    verdicts.sort(key=lambda v: (RANK.index(v.status), order.get(v.cause, len(order))))
    return Diagnosis(tuple(verdicts), tuple(problems), tuple(not_given), tuple(undecided))

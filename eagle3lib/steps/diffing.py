"""Notebook 03's steps as calls: training slots and a serving dump compared with the target's own boundaries.

`sides(case)` compares the case's training sample (`compared_sample`) and its serving dump (`Case.loaded_dump`: on
the demo world, a dump of the demo engine serving the seed's wrong capture) with fresh reference captures and
explains the difference; `proof_of_fix()` replays training samples under the served layout and under the identified one.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from ..hidden.capture import Capture, as_slots, capture, load_target_model
from ..hidden.compare import Comparison, compare
from ..causes import Finding
from ..checks.inputs import Artifacts
from ..checks.judge import check_artifacts
from ..checks.served_layout import dump_findings, unmatched_slots_text
from ..hidden.explain import (LayoutExplanation, explain, layout_text,
                              unidentified_slots)
from ..samples.sample import Sample
from ..samples.readers import open_dataset
from ..replay.run import load_setup, replay
from ..errors import DataError, MissingFileError
from .case import Case, reads_once
from .part import Part

NAME = "03 hidden-state diffing"
PROOF_SAMPLES = 16     # training samples replayed for the proof of fix unless Inputs.proof_samples says (at most n)


def compared_sample(case: Case) -> Sample:
    """The training sample notebook 03 compares (`sample_index` of the case's training data). With a user's draft
    nothing comes from the demo: a missing target or training data is an error naming it."""
    for value, name in ((case.target_path, "target"), (case.train_data, "train_data")):
        if not value:
            raise MissingFileError(name, "not given", expected="a path (notebook 03 compares the training slots "
                                   "with the target's own boundaries)", found="''", cause="set it in the "
                                   "parameters (params/gpu-box.yaml), or leave draft empty for the demo world")
    if not (Path(case.target_path) / "config.json").is_file():
        raise MissingFileError(f"target model {case.target_path}", "no config.json there", expected="a local HF "
                               "model folder with config.json and weights", found="no such file",
                               cause="a wrong target, or a target that was moved")
    ds, i = open_dataset(case.train_data), case.given.sample_index
    if not 0 <= i < len(ds):
        raise DataError(f"train_data {case.train_data}", f"no sample {i}", expected=f"a sample index below the "
                        f"{len(ds)} samples", found=i, cause="an empty dataset, or sample_index past its end")
    return ds[i]


def diff_notes(case: Case) -> tuple[str, ...]:
    """Where the serving side comes from: on the demo world its server's dump (the demo engine serving with the demo
    world's capture, made once); without a dump, the serving side is not checked."""
    if case.demo and not case.given.serving_dump:
        return (f"demo world: its server's dump (the demo engine serving training prompts with the demo world's "
                f"capture) is the serving side: {case.serving_dump}",)
    return () if case.serving_dump else ("no serving_dump given: the serving side is not checked (give an SGLang "
                                         "--debug-tensor-dump-output-folder or an eagle3lib dump)",)


def reference_model(case: Case):
    """The HF target the reference captures run through (on the case's device, in `target_dtype` when given):
    `load_target_model`, once per process, shared with every check."""
    dtype = getattr(torch, case.given.target_dtype) if case.given.target_dtype else None
    return load_target_model(case.target_path, device=case.given.device, dtype=dtype)


NO_DUMP = "not checked: no serving dump given (serving_dump)"


@dataclass(frozen=True, eq=False)
class Sides:
    """Both sides compared against the target's boundaries, and what differs between them."""
    training: Comparison
    serving: Comparison | None              # None: no serving dump given, or none of its requests to compare
    explanation: LayoutExplanation | None
    reference: Capture
    serving_missing: str = NO_DUMP          # why the serving side is not checked (when `serving` is None)
    sample: Sample | None = None            # the training sample compared


def sides(case: Case, progress: bool = False) -> Sides:
    """Compare the training sample's slots (`compared_sample`) and the dumped request `dump_request` with reference
    captures on their own tokens. A dump without that request leaves the serving side not checked, saying so
    (`serving_missing`)."""
    model, sample = reference_model(case), compared_sample(case)
    dump, request = case.loaded_dump, case.given.dump_request
    ref_train = capture(model, sample.input_ids, progress=progress)
    train = compare(as_slots(sample), ref_train)
    if dump is None:
        return Sides(train, None, None, ref_train, sample=sample)
    if not 0 <= request < len(dump):
        return Sides(train, None, None, ref_train, f"not checked: the serving dump {case.serving_dump} holds "
                     f"{len(dump)} request(s), no request {request} (serving_dump, dump_request)", sample)
    served = dump[request]
    serve = compare(served, capture(model, served.input_ids, progress=progress))
    return Sides(train, serve, explain(train, serve, num_layers=ref_train.num_layers), ref_train, sample=sample)


SLOT_COLUMNS = ["slot", "declared", "best", "status", "cos_mean", "rel_l2", "runner_up", "confidence"]


def slot_table(cmp: Comparison | None, missing: str = NO_DUMP) -> pd.DataFrame | str:
    """Each slot's best boundary and how sure (or the sentence saying the side was not given, or holds no slot)."""
    if cmp is None:
        return missing
    if not len(cmp.slots):
        return f"not checked: {cmp.source or 'this side'} holds no aux slot (0 slots)"
    return cmp.slots.reindex(columns=SLOT_COLUMNS)


def similarity_plot(cmp: Comparison | None, missing: str = NO_DUMP):
    """compare.plot_similarity of one side (a Figure), or the sentence saying why there is nothing to plot."""
    from ..hidden.compare import plot_similarity
    if cmp is None:
        return missing
    if not len(cmp.table):
        return (f"not plotted: no slot of {cmp.source or 'this side'} could be compared with a boundary "
                f"({len(cmp.slots)} slot(s); statuses {sorted(set(map(str, cmp.slots['status'])))})")
    return plot_similarity(cmp)


def explanation_frame(s: Sides) -> pd.DataFrame | str:
    """How the served slots differ from the trained ones, one row per difference (printed summary first)."""
    if s.explanation is None:
        return s.serving_missing
    print(s.explanation.summary)
    return s.explanation.frame()


def served(s: Sides) -> tuple | None:
    """The identified serving layout (None without a dump)."""
    return None if s.serving is None else s.serving.identified


def diff_summary(s: Sides) -> dict:
    """JSON-ready: the identified layouts and the kinds of difference."""
    return {"trained_layout": list(s.training.identified),
            "served_layout": list(s.serving.identified) if s.serving is not None else None,
            "difference_kinds": sorted(s.explanation.kinds) if s.explanation is not None else None}


def proof_of_fix(case: Case, served_layout, fixed_layout, n: int = 16, num_steps: int = 3,
                 device: str = "cpu", progress: bool = False, dtype="auto") -> pd.DataFrame | str:
    """Replay training samples as served (missing slots zero-filled) and with the fixed layout: accuracy per step
    (a sentence instead when there is no served layout to replay); the draft in `dtype` (the diagnosis's)."""
    if served_layout is None:
        return "not checked: no serving dump given, so there is no served layout to replay"
    if any(x is None for x in served_layout):
        return (f"not replayed: serving slot(s) {list(unidentified_slots(served_layout))} match no "
                "boundary of the target, so the served layout cannot be emulated")
    if not len(served_layout):
        return "not replayed: the serving dump holds no aux slot (0 slots), so there is no served layout to replay"
    if fixed_layout is None or not len(fixed_layout) or any(x is None for x in fixed_layout):
        return ("not replayed: " + (unmatched_slots_text(fixed_layout) if fixed_layout else "no training layout identified "
                                    "(train_data)") + ": there is no trained layout to replay against")
    setup = load_setup(case.draft_path, case.target_path, device=device, dtype=dtype)
    # samples that declare no layout (a config without ids) hold the identified training layout
    setup = dataclasses.replace(setup, training_layout=tuple(fixed_layout), training_layout_source="identified")
    rows = []
    for label, layout in (("as served", served_layout), ("fixed (identified training layout)", fixed_layout)):
        r = replay(setup, case.train_data, layout=[s if s else "zeros" for s in layout], label=label, n=n,
                   num_steps=num_steps, fill="zeros", progress=progress)
        s = r.summary()
        first = r.skipped[0][1] if r.skipped else ""
        rows.append({"replay": label, "layout fed to fc": ", ".join(r.layout),
                     "acc step 0": (s["acc_per_step"] or [None])[0], "acc per step": s["acc_per_step"],
                     "expected accept length": s["expected_accept_length"],
                     "simulated accept length": s["simulated_accept_length"], "samples": s["samples"],
                     "skipped": s["skipped"], "why": "" if s["samples"] else f"no sample replayed ({first})"
                     if first else "no sample replayed (train_data holds none)"})
    return pd.DataFrame(rows)


def _acc(x) -> float | None:
    """A number, or None where it is missing (None, NaN, not a number): shown as missing, never float(None)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def proof_summary(proof: pd.DataFrame | str | None) -> dict[str, float | None]:
    """{replay label and its sample count: step-0 accuracy, None where it was not measured} from proof_of_fix's
    table ("as served (16 training samples)": the count names this replay's number apart from notebook 02's, which
    replays other samples); {} when the proof is a sentence (not replayed) or missing."""
    if not isinstance(proof, pd.DataFrame) or "replay" not in proof.columns:
        return {}
    return {f"{r['replay']} ({r.get('samples', 0)} training samples)": _acc(r.get("acc step 0"))
            for _, r in proof.iterrows()}


def _pct(x: float | None) -> str:
    return "not measured" if x is None else f"{x:.1%}"


def diff_headline(s: Sides, proof: pd.DataFrame | str | None = None) -> str:
    """One line for the report index: what differs, and what the fix does to accuracy."""
    trained = layout_text(s.training.identified)
    if s.explanation is None:
        return f"training slots identified as [{trained}]; serving side {s.serving_missing}"
    if s.explanation.clean:
        text = f"serving feeds the trained layout [{trained}]: no wiring fault"
    else:
        kinds = ", ".join(sorted(s.explanation.kinds))
        text = f"serving feeds [{layout_text(s.serving.identified)}] where training used [{trained}] ({kinds})"
    if unidentified_slots(s.training.identified):
        text += f"; {unmatched_slots_text(s.training.identified)}"
    a = proof_summary(proof)
    if len(a) == 2:
        served, fixed = list(a.values())
        n = int(proof["samples"].iloc[0]) if "samples" in proof else 0
        text += (f"; step-0 accuracy on {n} training samples {_pct(served)} as served -> {_pct(fixed)} with the "
                 "trained layout")
    return text


def drift_findings(art: Artifacts, n: int = 4, progress=None) -> list[Finding]:
    """Check 6 (target drift): the stored training states of `art` (a case's artifacts) against the target's own
    recapture of `n` samples."""
    return check_artifacts(art, progress, part="diffing", replay_n=n)


def diffing_findings(case: Case, s: Sides, proof: pd.DataFrame | str | None = None) -> list[Finding]:
    """The layout causes as findings: what serving feeds, identified against the target's own boundaries
    (decided by `checks.served_layout.dump_findings`)."""
    return dump_findings(s.training, s.serving, s.explanation, case.serving_dump, missing=s.serving_missing,
                         accuracy=proof_summary(proof))

@reads_once
def run(case: Case, earlier=None) -> Part:
    """Notebook 03: the training slots and the serving dump identified against the target's own boundaries, what
    differs, the proof of fix and the drift check. `results`: the case, the Sides (the compared sample among them)
    and the proof."""
    g = case.given
    s = sides(case)
    n = g.proof_samples if g.proof_samples is not None else min(g.n, PROOF_SAMPLES)
    proof = proof_of_fix(case, served(s), s.training.identified, n=n, num_steps=g.num_steps, device=g.device,
                         dtype=g.dtype)
    found = diffing_findings(case, s, proof) + drift_findings(case.artifacts, n=g.drift_samples)
    tables = {"training slots": slot_table(s.training), "serving slots": slot_table(s.serving, s.serving_missing),
              "proof of fix": proof}
    return Part(NAME, found, tables=tables, notes=diff_notes(case),
                results={"inputs": case, "sides": s, "proof": proof})

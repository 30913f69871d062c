"""Notebook 03's steps as calls: training slots and a serving dump compared with the target's own boundaries.

`diff_inputs()` resolves the paths (the demo world and, when no dump is given, a dump of the demo engine serving the
seed's wrong capture); `sides()` compares both sides with fresh reference captures and explains the difference;
`proof_of_fix()` replays training samples under the served layout and under the identified one.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..hidden.capture import Capture, as_slots, capture, load_target_model
from ..hidden.dumps import Dump, load_dump
from ..hidden.compare import Comparison, compare
from ..causes import Finding, not_checked
from ..checks.run import run_checks
from ..hidden.explain import LAYOUT_CAUSES, LayoutExplanation, causes_of, explain
from ..samples.sample import Sample
from ..samples.readers import open_dataset
from ..replay.run import load_setup, replay
from ..demo import world as demo
from ..demo.sweep import ensure_serving_dump
from ..errors import DataError, MissingFileError


@dataclass(frozen=True, eq=False)
class DiffInputs:
    """What notebook 03 compares: the target, one training sample and a serving dump."""
    target_path: Path
    draft_path: Path
    training_data: Path
    sample: Sample
    dump_path: Path | None       # None: no serving dump given (the serving side is not checked)
    dump: Dump | None
    notes: tuple[str, ...]
    device: str = "cpu"
    dtype: object = None

    @property
    def model(self):
        """The HF target, loaded on first use (`load_target_model`: once per process, shared with every check)."""
        return load_target_model(self.target_path, device=self.device, dtype=self.dtype)


def diff_inputs(target_path: str = "", draft_path: str = "", training_data: str = "", serving_dump: str = "",
           sample_index: int = 0, device: str = "cpu", dtype=None) -> DiffInputs:
    """Resolve notebook 03's inputs. No draft path: the demo world fills every empty path, and its server's dump
    (the demo engine serving with the demo world's capture, made once) is the serving side. With a user's draft,
    nothing comes from the demo: a missing target or training data is an error naming it, a missing dump leaves
    the serving side "not given" (`dump` None) and the notebook compares the training side only."""
    notes = []
    if not draft_path:
        world = demo.ensure_world()
        target_path = target_path or str(world.target)
        draft_path = str(world.draft)
        training_data = training_data or str(world.seed_data)
        if not serving_dump:
            serving_dump = str(ensure_serving_dump("seed", device=device))
            notes.append(f"demo world: its server's dump (the demo engine serving training prompts with the "
                         f"demo world's capture) is the serving side: {serving_dump}")
    for value, name in ((target_path, "target_path"), (training_data, "training_data")):
        if not value:
            raise MissingFileError(name, "not given", expected="a path (notebook 03 compares the training slots "
                                   "with the target's own boundaries)", found="''", cause="set it in the "
                                   "parameters (params/gpu-box.yaml), or leave draft_path empty for the demo world")
    if not serving_dump:
        notes.append("no serving_dump given: the serving side is not checked (give an SGLang "
                     "--debug-tensor-dump-output-folder or an eagle3lib dump)")
    if not (Path(target_path) / "config.json").is_file():
        raise MissingFileError(f"target model {target_path}", "no config.json there", expected="a local HF model "
                               "folder with config.json and weights", found="no such file",
                               cause="a wrong target_path, or a target that was moved")
    ds = open_dataset(training_data)
    if not 0 <= sample_index < len(ds):
        raise DataError(f"training_data {training_data}", f"no sample {sample_index}", expected=f"a sample index "
                        f"below the {len(ds)} samples", found=sample_index, cause="an empty dataset, or sample_index "
                        "past its end")
    sample = ds[sample_index]
    return DiffInputs(Path(target_path), Path(draft_path), Path(training_data), sample,
                      Path(serving_dump) if serving_dump else None, load_dump(serving_dump) if serving_dump else None,
                      tuple(notes), device, dtype)


@dataclass(frozen=True, eq=False)
class Sides:
    """Both sides compared against the target's boundaries, and what differs between them."""
    training: Comparison
    serving: Comparison | None              # None: no serving dump given
    explanation: LayoutExplanation | None
    reference: Capture


def sides(inp: DiffInputs, request: int = 0, progress: bool = False) -> Sides:
    """Compare the training sample's slots and one dumped request with reference captures on their own tokens."""
    ref_train = capture(inp.model, inp.sample.input_ids, progress=progress)
    train = compare(as_slots(inp.sample), ref_train)
    if inp.dump is None:
        return Sides(train, None, None, ref_train)
    served = inp.dump[request]
    serve = compare(served, capture(inp.model, served.input_ids, progress=progress))
    return Sides(train, serve, explain(train, serve, num_layers=ref_train.num_layers), ref_train)


SLOT_COLUMNS = ["slot", "declared", "best", "status", "cos_mean", "rel_l2", "runner_up", "confidence"]
NO_DUMP = "not checked: no serving dump given (serving_dump)"


def slot_table(cmp: Comparison | None) -> pd.DataFrame | str:
    """Each slot's best boundary and how sure (or the sentence saying the side was not given)."""
    return NO_DUMP if cmp is None else cmp.slots[SLOT_COLUMNS]


def similarity_plot(cmp: Comparison | None):
    """compare.plot_similarity of one side (a Figure), or the sentence saying the side was not given."""
    from ..hidden.compare import plot_similarity
    return NO_DUMP if cmp is None else plot_similarity(cmp)


def explanation_frame(s: Sides) -> pd.DataFrame | str:
    """How the served slots differ from the trained ones, one row per difference (printed summary first)."""
    if s.explanation is None:
        return NO_DUMP
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


def proof_of_fix(inp: DiffInputs, served_layout, fixed_layout, n: int = 16, num_steps: int = 3,
                 device: str = "cpu", progress: bool = False) -> pd.DataFrame | str:
    """Replay training samples as served (missing slots zero-filled) and with the fixed layout: accuracy per step
    (a sentence instead when there is no served layout to replay)."""
    if served_layout is None:
        return "not checked: no serving dump given, so there is no served layout to replay"
    if any(x is None for x in served_layout):
        return (f"not replayed: serving slot(s) {[j for j, x in enumerate(served_layout) if x is None]} match no "
                "boundary of the target, so the served layout cannot be emulated")
    setup = load_setup(inp.draft_path, inp.target_path, device=device)
    rows = []
    for label, layout in (("as served", served_layout), ("fixed (identified training layout)", fixed_layout)):
        r = replay(setup, inp.training_data, layout=[s if s else "zeros" for s in layout], label=label, n=n,
                   num_steps=num_steps, fill="zeros", progress=progress)
        s = r.summary()
        rows.append({"replay": label, "layout fed to fc": ", ".join(r.layout), "acc step 0": s["acc_per_step"][0],
                     "acc per step": s["acc_per_step"], "expected accept length": s["expected_accept_length"],
                     "simulated accept length": s["simulated_accept_length"]})
    return pd.DataFrame(rows)


def proof_summary(proof: pd.DataFrame) -> dict[str, float]:
    """{replay label: step-0 accuracy} from proof_of_fix's table."""
    return {str(r["replay"]): float(r["acc step 0"]) for _, r in proof.iterrows()}


def diff_headline(s: Sides, proof: pd.DataFrame | str | None = None) -> str:
    """One line for the report index: what differs, and what the fix does to accuracy."""
    if s.explanation is None:
        return (f"training slots identified as [{', '.join(map(str, s.training.identified))}]; serving side not "
                "checked (no serving dump given)")
    if s.explanation.clean:
        text = f"serving feeds the trained layout [{', '.join(map(str, s.training.identified))}]: no wiring fault"
    else:
        kinds = ", ".join(sorted(s.explanation.kinds))
        text = (f"serving feeds [{', '.join(map(str, s.serving.identified))}] where training used "
                f"[{', '.join(map(str, s.training.identified))}] ({kinds})")
    if isinstance(proof, pd.DataFrame) and len(proof) == 2:
        a = proof_summary(proof)
        served, fixed = list(a.values())
        text += f"; step-0 accuracy {served:.1%} as served -> {fixed:.1%} with the trained layout"
    return text


def drift_findings(inp: DiffInputs, n: int = 4, progress=None) -> list[Finding]:
    """Check 6 (target drift): the stored training states against the target's own recapture of `n` samples."""
    return run_checks(draft=str(inp.draft_path), target=str(inp.target_path), data=str(inp.training_data),
                      only=("drift",), replay_n=n, progress=progress, device=inp.device)


def diffing_findings(inp: DiffInputs, s: Sides, proof: pd.DataFrame | str | None = None) -> list[Finding]:
    """The layout causes as findings: what serving feeds, identified against the target's own boundaries."""
    where = "serving dump vs the target's boundaries"
    if s.explanation is None:
        return [not_checked(c, where, "a serving dump (serving_dump: SGLang --debug-tensor-dump-output-folder or "
                            "an eagle3lib dump)") for c in LAYOUT_CAUSES]
    trained, served = s.training.identified, s.serving.identified
    evidence = {"trained_layout": [str(x) for x in trained], "served_layout": [str(x) for x in served],
                "dump": str(inp.dump_path), "min_cos_serving": float(s.serving.slots["cos_mean"].min())}
    if isinstance(proof, pd.DataFrame) and len(proof) == 2:
        acc = list(proof_summary(proof).values())
        evidence.update({"acc_0_as_served": acc[0], "acc_0_trained_layout": acc[1]})
    if s.explanation.clean:
        return [Finding(c, "ruled out", f"the serving dump feeds the trained layout [{', '.join(map(str, trained))}]",
                        evidence, where, measured=True) for c in LAYOUT_CAUSES]
    found = causes_of(s.explanation)
    kinds = sorted(s.explanation.kinds)
    fix = (f"make the engine capture [{', '.join(map(str, trained))}] (notebook 03 section 4 lists the ids per "
           "engine)")
    out = [Finding(c, "confirmed", f"serving feeds [{', '.join(map(str, served))}] where training used "
                   f"[{', '.join(map(str, trained))}] ({', '.join(kinds)})", {**evidence, "kinds": kinds}, where,
                   fix=fix, measured=True) for c in found]
    return out + [Finding(c, "ruled out", f"no {c} difference between served and trained slots", evidence, where,
                          measured=True) for c in LAYOUT_CAUSES if c not in found]

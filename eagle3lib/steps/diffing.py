"""Notebook 03's steps as calls: training slots and a serving dump compared with the target's own boundaries.

`inputs()` resolves the paths (the demo world and, when no dump is given, a dump of the demo engine serving the
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
from ..hidden.explain import Diagnosis, explain
from ..samples.sample import Sample
from ..samples.readers import open_dataset
from ..replay.run import load_setup, replay


@dataclass(frozen=True, eq=False)
class DiffInputs:
    """What notebook 03 compares: the target, one training sample and a serving dump."""
    target_path: Path
    draft_path: Path
    training_data: Path
    sample: Sample
    dump_path: Path
    dump: Dump
    model: object        # the HF target
    notes: tuple[str, ...]


def demo_serving_dump(out_dir: str | Path, capture_name: str = "seed", prompts: str = "train", n: int = 2,
                      max_new_tokens: int = 32, device: str = "cpu") -> Path:
    """Serve demo prompts with the demo engine under `capture_name` and dump what it fed the draft."""
    from ..serving.engine import SpecEngine
    from ..serving.engine_settings import SpecSettings
    from ..demo.sweep import demo_capture, demo_prompts, load_demo

    world = load_demo(device)
    eng = SpecEngine(world.target, world.draft, demo_capture(capture_name, world))
    settings = SpecSettings(num_steps=3, topk=1, num_draft_tokens=4)
    results = [eng.generate(p, max_new_tokens, settings, keep_aux=True)
               for p in demo_prompts(prompts, n=n, world=world)]
    return Path(eng.save_dump(results, out_dir))


def inputs(target_path: str = "", draft_path: str = "", training_data: str = "", serving_dump: str = "",
           sample_index: int = 0, device: str = "cpu", dtype=None, dump_dir: str = "") -> DiffInputs:
    """Resolve notebook 03's inputs; empty paths mean the demo world (its dump is made when none is given)."""
    from ..demo import world as demo

    notes = []
    if not (target_path and draft_path and training_data):
        world = demo.ensure_world()
        target_path = target_path or str(world.target)
        draft_path = draft_path or str(world.draft)
        training_data = training_data or str(world.seed_data)
    if not serving_dump:
        serving_dump = str(demo_serving_dump(dump_dir or demo.paths().root / "serving_dump_seed", "seed",
                                             device=device))
        notes.append(f"no serving dump given: the demo engine served 2 training prompts with the seed's capture "
                     f"and dumped what it fed the draft to {serving_dump}")
    ds = open_dataset(training_data)
    sample = ds[sample_index]
    model = load_target_model(target_path, device=device, dtype=dtype)
    return DiffInputs(Path(target_path), Path(draft_path), Path(training_data), sample, Path(serving_dump),
                      load_dump(serving_dump), model, tuple(notes))


@dataclass(frozen=True, eq=False)
class Sides:
    """Both sides compared against the target's boundaries, and what differs between them."""
    training: Comparison
    serving: Comparison
    diagnosis: Diagnosis
    reference: Capture


def sides(inp: DiffInputs, request: int = 0, progress: bool = False) -> Sides:
    """Compare the training sample's slots and one dumped request with reference captures on their own tokens."""
    ref_train = capture(inp.model, inp.sample.input_ids, progress=progress)
    train = compare(as_slots(inp.sample), ref_train)
    served = inp.dump[request]
    serve = compare(served, capture(inp.model, served.input_ids, progress=progress))
    return Sides(train, serve, explain(train, serve, num_layers=ref_train.num_layers), ref_train)


def proof_of_fix(inp: DiffInputs, served_layout, fixed_layout, n: int = 16, num_steps: int = 3,
                 device: str = "cpu", progress: bool = False) -> pd.DataFrame:
    """Replay training samples as served (missing slots zero-filled) and with the fixed layout: accuracy per step."""
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


def headline(s: Sides, proof: pd.DataFrame | None = None) -> str:
    """One line for the report index: what differs, and what the fix does to accuracy."""
    if s.diagnosis.clean:
        text = f"serving feeds the trained layout [{', '.join(map(str, s.training.identified))}]: no wiring fault"
    else:
        kinds = ", ".join(sorted(s.diagnosis.kinds))
        text = (f"serving feeds [{', '.join(map(str, s.serving.identified))}] where training used "
                f"[{', '.join(map(str, s.training.identified))}] ({kinds})")
    if proof is not None and len(proof) == 2:
        a = proof_summary(proof)
        served, fixed = list(a.values())
        text += f"; step-0 accuracy {served:.1%} as served -> {fixed:.1%} with the trained layout"
    return text

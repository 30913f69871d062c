"""Notebook 02's inputs: its parameters resolved (an empty path means the demo world's artifact only when the
notebook runs on the demo world), the recorded accuracy read from the training log."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping

from ..demo import world as demo_mod
from ..errors import DataError
from ..layout import parse_layout
from ..replay.verdict import read_recorded_accuracy


@dataclass(frozen=True)
class ReplayInputs:
    """Resolved paths and numbers for notebook 02 (the demo world fills whatever was left empty)."""
    draft_path: str
    target_path: str
    train_data: str
    train_format: str | None
    heldout: Mapping[str, str]           # name -> data path (held-out / new-prompt samples)
    recorded_acc: float | None
    recorded_from: str
    serving_layout: tuple[str, ...] | None
    demo: bool


def resolve_inputs(draft_path: str = "", target_path: str = "", train_data_path: str = "",
                   train_data_format: str = "", heldout_data_path: str = "", new_prompt_data_path: str = "",
                   recorded_val_acc: float = -1.0, training_log_path: str = "",
                   serving_layout: str = "") -> ReplayInputs:
    """Fill empty parameters: no draft path -> the demo world (built if missing); accuracy from the training log."""
    demo = not draft_path
    if demo:
        demo_mod.ensure_world()
        w = demo_mod.paths()
        draft_path, target_path = str(w.draft), target_path or str(w.target)
        train_data_path = train_data_path or str(w.seed_data)
        heldout_data_path = heldout_data_path or str(w.heldout_data)
        new_prompt_data_path = new_prompt_data_path or str(w.shifted_data)
        training_log_path = training_log_path or str(w.training_log)
        if not serving_layout and w.world_json.is_file():
            world = json.loads(w.world_json.read_text())
            lay = world.get("serving_layout") or (world.get("layouts") or {}).get("serving")
            serving_layout = ",".join(lay) if isinstance(lay, list) else (lay or "")
    if not train_data_path:
        raise DataError("train_data_path", "no training data given", expected="the draft's training samples",
                        found="''", cause="the verdict needs samples the draft was trained on")
    held = {k: p for k, p in (("held-out", heldout_data_path), ("new prompts", new_prompt_data_path)) if p}
    rec, src = (float(recorded_val_acc), "parameter") if recorded_val_acc >= 0 else (None, "not given")
    if rec is None and training_log_path:
        rec, src = read_recorded_accuracy(training_log_path)
    return ReplayInputs(draft_path, target_path, train_data_path, train_data_format or None, held, rec, src,
                        parse_layout(serving_layout) if serving_layout else None, demo)

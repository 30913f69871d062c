"""Notebook 00's inputs and its forward preview: the demo world fills empty paths only when no draft is given."""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ..demo import world as demo
from ..model import audit
from ..samples.readers import open_dataset


@dataclass(frozen=True)
class AuditInputs:
    """Resolved paths for notebook 00; `sample_data` is "" when none was given for a user's own draft."""

    draft_path: str
    target_path: str
    sample_data: str
    demo: bool


def resolve_inputs(draft_path: str = "", target_path: str = "", sample_data: str = "") -> AuditInputs:
    """No draft path: the demo world (built if missing) fills every empty path. With a user's draft, an empty
    path stays empty and the section that needs it says it was not given (never the demo's artifact)."""
    if draft_path:
        return AuditInputs(draft_path, target_path, sample_data, False)
    w = demo.ensure_world()
    return AuditInputs(str(w.draft), target_path or str(w.target), sample_data or str(w.seed_data), True)


def forward_preview(a: audit.Audit, inputs: AuditInputs, num_steps: int = 3) -> pd.DataFrame | str:
    """The draft on one training sample (audit.forward_preview), or a sentence naming the missing input."""
    if not inputs.sample_data:
        return "not checked: no sample_data given (training data of this draft) — the forward preview is skipped"
    if not inputs.target_path:
        return "not checked: no target_path given (its tokenizer decodes the preview) — the preview is skipped"
    sample = next(open_dataset(inputs.sample_data).sample(1, seed=0))
    return audit.forward_preview(a.loaded, sample.input_ids, sample.aux_concat(),
                                 audit.target_tokenizer(inputs.target_path), num_steps=num_steps)

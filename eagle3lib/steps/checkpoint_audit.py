"""Notebook 00's part: the artifact checks on the case's draft, target and training data (steps.case resolves them:
the demo world's only when no draft is given), and the tables its notebook shows beside them."""
from __future__ import annotations

import pandas as pd

from ..engines import mla_fields
from ..serving.layer_reading import layer_frame, layer_reading
from ..model import audit
from ..replay import tokenview
from ..replay.run import replay_dtype
from ..causes import Finding
from ..checks.judge import check_artifacts
from ..samples.readers import open_dataset
from .case import Case, reads_once
from .part import Part

NAME = "00 checkpoint audit"


def artifact_checks(case: Case, progress=None) -> list[Finding]:
    """The contract checks that need only the draft, the target and the training data (no engine): notebook 00's,
    on the case's artifacts without its launch and traffic. Engine-specific questions say "not checked" here;
    notebook 01 asks them with the launch command's engine. Their replays load the draft in the case's dtype on its
    device."""
    return check_artifacts(case.artifacts.without("launch", "traffic"), progress, part="artifacts")


@reads_once
def run(case: Case, earlier=None) -> Part:
    """Notebook 00's findings: the artifact checks on the case (`results["inputs"]`)."""
    found = artifact_checks(case)
    return Part(NAME, found, results={"inputs": case})


@reads_once
def audit_of(case: Case) -> audit.Audit:
    """The case's draft audited against its target (`model.audit.audit_draft`, on the case's device and dtype),
    inside the case's reads: the configs and tensors its part read are not read again."""
    return audit.audit_draft(case.draft_path, case.target_path, device=case.given.device,
                             dtype=replay_dtype(case.given.dtype, case.given.device))


@reads_once
def engine_layer_table(case: Case, a: audit.Audit) -> pd.DataFrame:
    """Which target boundary each engine feeds each aux slot, next to the trained one (`serving.layer_reading` at
    its default engine versions, for this target's layer count and architecture): one row per (engine, slot)."""
    return layer_frame(layer_reading(case.draft_path, a.target.num_layers, target_arch=a.target.architecture))


def mla_target_fields(a: audit.Audit) -> pd.DataFrame | str:
    """For an MLA target (DeepSeek-V3 / Kimi-K2): each config field transformers, SGLang and vLLM read, where, the
    value this target's config holds, and which reader would find it absent (`engines.mla_fields.fields_frame`);
    else the sentence saying why there is no table."""
    if a.target.attention != "mla":
        return f"no table: the target ({a.target.architecture}) is not an MLA model (no kv_lora_rank in its config)"
    return mla_fields.fields_frame(a.target.text_config)


@reads_once
def forward_preview(case: Case, a: audit.Audit, num_steps: int = 3) -> pd.DataFrame | str:
    """The draft on one training sample (replay.tokenview.preview_table), or a sentence naming the missing input."""
    if not case.train_data:
        return "not checked: no train_data given (training data of this draft) — the forward preview is skipped"
    if not case.target_path:
        return "not checked: no target given (its tokenizer decodes the preview) — the preview is skipped"
    sample = next(open_dataset(case.train_data).sample(1, seed=0))
    return tokenview.preview_table(a.loaded.model, sample.input_ids, sample.aux_concat(),
                                   audit.target_tokenizer(case.target_path), num_steps=num_steps)

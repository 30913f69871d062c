"""Checkpoint audit (notebook 00): everything about a draft that can be checked without serving it.

Config table and warnings, tensor validation report, vocab checks, parameter counts (the layer ids as each engine
reads them are `serving.layer_reading`, the forward on a few real tokens `replay.tokenview.preview_table`). Usage:
    a = audit_draft(draft_dir, target_dir); a.findings  # headline facts for the report index
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

from ..errors import LayoutError
from .checkpoint import HEALTHY, LoadedDraft, load_draft, param_table
from .target import TargetInfo, load_target_info, load_tokenizer
from .vocab import vocab_report


@dataclass(frozen=True)
class Audit:
    """The audit of one draft against one target."""
    loaded: LoadedDraft
    target: TargetInfo
    config_table: pd.DataFrame
    warnings: tuple[str, ...]
    report: pd.DataFrame
    vocab: pd.DataFrame
    params: pd.DataFrame
    findings: dict = field(default_factory=dict)


def audit_draft(draft: str | Path, target: str | Path, device: str = "cpu",
                dtype: torch.dtype | None = None) -> Audit:
    """Load `draft` against `target` and gather every table the audit notebook shows. A tensor the checkpoint
    lacks or holds in the wrong shape is listed in the report and stands in at a seeded random init (what an engine
    that loads the draft anyway runs; `loaded.filled`), so the rest of the audit still runs."""
    loaded = load_draft(draft, target=target, device=device, dtype=dtype, missing="fill")
    info = load_target_info(target)
    cfg = loaded.cfg
    ctab = pd.DataFrame([{"field": k, "value": v} for k, v in cfg.summary().items()])
    vocab = vocab_report(loaded.vocab)
    problems = loaded.report[~loaded.report.status.isin(HEALTHY)]
    vocab_errors = vocab[(~vocab.ok) & (vocab.severity == "error")]
    try:
        layout, layout_error = cfg.aux_layout_or_none(info.num_layers), None
        cfg.aux_layout(info.num_layers)
    except LayoutError as e:          # ids no reading of which names boundaries of this target
        layout, layout_error = None, str(e)
    readings = cfg.aux_readings(info.num_layers)
    readings = readings if len(readings) > 1 else {}
    findings = {
        "dialect": cfg.dialect, "format": loaded.format, "aux_slots": cfg.num_aux,
        "layout": list(layout) if layout else None, "id_convention": cfg.aux_ids_convention,
        "tensor_problems": int(len(problems)), "vocab_errors": vocab_errors.check.tolist(),
        "taken_from_target": list(loaded.taken_from_target), "config_warnings": len(cfg.warnings),
        "filled": [f.to_dict() for f in loaded.filled],
    }
    if layout_error:
        findings["layout_error"] = layout_error
    if readings:                      # the writer leaves the ids' convention open: both, none taken as trained
        findings["readings"] = {c: list(v) for c, v in readings.items()}
        findings["readings_why"] = cfg.aux_ids_ambiguity
    state = "loads cleanly" if not len(problems) and not len(vocab_errors) else \
        f"{len(problems)} tensor problem(s), {len(vocab_errors)} vocab error(s)"
    if loaded.filled:
        state += " (" + "; ".join(f"{f.key} {'missing' if f.found is None else f'of shape {list(f.found)}'}: "
                                  f"stands in as {f.fill}" for f in loaded.filled) + ")"
    findings["attention"] = "MLA" if cfg.mla else "Llama"
    kind = " (MLA attention)" if cfg.mla else ""
    slots = " or ".join(f"[{', '.join(v)}] ({c}-of-layer)" for c, v in readings.items()) if readings else \
        f"[{', '.join(layout) if layout else 'unreadable ids' if layout_error else 'engine defaults'}]"
    fed = f"{cfg.num_aux} aux slots {slots}" if cfg.use_aux_hidden_state else \
        "fed the target's final state [final_postnorm], no fc"
    findings["headline"] = f"{cfg.dialect} draft{kind} {state}: {fed}, Vd={cfg.draft_vocab_size} of V={cfg.vocab_size}"
    return Audit(loaded, info, ctab, cfg.warnings, loaded.report, vocab, param_table(loaded.model),
                 findings)


def target_tokenizer(target: str | Path):
    """The target's tokenizer, or None (ids are shown instead)."""
    try:
        return load_tokenizer(target)
    except Exception:   # a tokenizer that needs remote code or extra packages: show ids instead
        return None

"""Checkpoint audit (notebook 00): everything about a draft that can be checked without serving it.

Config table and warnings, tensor validation report, vocab checks, parameter counts, the layer ids as each
convention reads them (the forward on a few real tokens is `replay.tokenview.preview_table`). Usage:
    a = audit_draft(draft_dir, target_dir); a.findings  # headline facts for the report index
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

from .. import layout as _layout
from .checkpoint import LoadedDraft, load_draft, param_table
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
    layer_reading: pd.DataFrame
    findings: dict = field(default_factory=dict)


def layer_reading(cfg, num_layers: int) -> pd.DataFrame:
    """How the config's layer ids read in each convention, next to the fc's slot count."""
    rows = []
    if cfg.aux_layer_ids is None:
        rows.append({"reading": "no ids in config -> engine defaults", "ids": None,
                     "boundaries": ", ".join(cfg.default_layout(num_layers)), "slots": 3})
    else:
        for conv, who in (("output", "output-of-layer (SGLang/SpecForge/ModelOpt)"),
                          ("input", "input-of-layer (vLLM/speculators/EAGLE)")):
            try:
                names = ", ".join(_layout.from_ids(cfg.aux_layer_ids, conv, num_layers))
            except Exception as e:  # an id outside the target in this convention
                names = f"not expressible: {e}"
            mark = " <- declared" if conv == cfg.aux_ids_convention else ""
            rows.append({"reading": who + mark, "ids": list(cfg.aux_layer_ids), "boundaries": names,
                         "slots": len(cfg.aux_layer_ids)})
    rows.append({"reading": "fc.weight width / target hidden", "ids": None, "boundaries": "",
                 "slots": cfg.num_aux})
    return pd.DataFrame(rows)


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
    reading = layer_reading(cfg, info.num_layers)
    problems = loaded.report[~loaded.report.status.isin(["ok", "from_target"])]
    vocab_errors = vocab[(~vocab.ok) & (vocab.severity == "error")]
    layout = cfg.aux_layout(info.num_layers)
    findings = {
        "dialect": cfg.dialect, "format": loaded.format, "aux_slots": cfg.num_aux,
        "layout": list(layout) if layout else None, "id_convention": cfg.aux_ids_convention,
        "tensor_problems": int(len(problems)), "vocab_errors": vocab_errors.check.tolist(),
        "taken_from_target": list(loaded.taken_from_target), "config_warnings": len(cfg.warnings),
        "filled": [f.to_dict() for f in loaded.filled],
    }
    state = "loads cleanly" if not len(problems) and not len(vocab_errors) else \
        f"{len(problems)} tensor problem(s), {len(vocab_errors)} vocab error(s)"
    if loaded.filled:
        state += " (" + "; ".join(f"{f.key} {'missing' if f.found is None else f'of shape {list(f.found)}'}: "
                                  f"stands in as {f.fill}" for f in loaded.filled) + ")"
    findings["attention"] = "MLA" if cfg.mla else "Llama"
    kind = " (MLA attention)" if cfg.mla else ""
    findings["headline"] = (f"{cfg.dialect} draft{kind} {state}: {cfg.num_aux} aux slots "
                            f"[{', '.join(layout) if layout else 'engine defaults'}], "
                            f"Vd={cfg.draft_vocab_size} of V={cfg.vocab_size}")
    return Audit(loaded, info, ctab, cfg.warnings, loaded.report, vocab, param_table(loaded.model), reading,
                 findings)


def target_tokenizer(target: str | Path):
    """The target's tokenizer, or None (ids are shown instead)."""
    try:
        return load_tokenizer(target)
    except Exception:   # a tokenizer that needs remote code or extra packages: show ids instead
        return None

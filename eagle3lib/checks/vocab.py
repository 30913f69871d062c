"""The vocab maps as a contract check: `eagle3lib.model.vocab.check_vocab` (d2t missing, arange, absolute ids, out of range,
t2d inconsistent) on the draft's d2t / t2d, as findings. Reads only those two small tensors.

Cause: d2t_mapping. Usage: ``check_d2t(art)``.
"""
from __future__ import annotations

from ..causes import Finding, not_checked
from ..errors import Eagle3Error
from ..model.vocab import check_vocab
from .inputs import Artifacts
from .registry import Options, contract

WHERE = "checks.vocab"
D2T_KEYS = ("d2t", "model.d2t", "draft_id_to_target_id", "eagle_module.d2t")
T2D_KEYS = ("t2d", "model.t2d", "eagle_module.t2d")


# the causes check_d2t reports (checks.judge: what a broken check reports as not checked)
VOCAB_CAUSES = ('d2t_mapping',)


def check_d2t(art: Artifacts) -> list[Finding]:
    """One finding: every vocab-map error eagle3lib knows, confirmed with the check's explanation."""
    need = art.missing("draft", "weights")
    if need:
        return [not_checked("d2t_mapping", WHERE, need)]
    cfg = art.draft_cfg
    keys = [next((k for k in ks if k in art.tensors), None) for ks in (D2T_KEYS, T2D_KEYS)]
    try:
        sd = art.draft_tensors(*[k for k in keys if k])
    except Eagle3Error as e:
        return [not_checked("d2t_mapping", WHERE, "readable d2t / t2d tensors", str(e)[:200])]
    d2t, t2d = (sd.get(k) if k else None for k in keys)
    found = check_vocab(d2t, t2d, cfg.vocab_size, cfg.draft_vocab_size, where=art.draft_path or "draft")
    errors = [f for f in found if not f.ok and f.severity == "error"]
    ev = {"d2t_key": keys[0], "t2d_key": keys[1], "draft_vocab_size": cfg.draft_vocab_size,
          "vocab_size": cfg.vocab_size, "failed": [f.check for f in errors]}
    if errors:
        return [Finding("d2t_mapping", "confirmed", "; ".join(f.detail for f in errors[:3]), ev, WHERE,
                        fix="rebuild d2t as offsets (vocab.absolute_to_offsets / build_vocab_map)",
                        source="vocab.check_vocab; NeMo Automodel PR#2447; verl-SpeCo PR#66/#67")]
    return [Finding("d2t_mapping", "ruled out", "d2t / t2d are a consistent offset map", ev, WHERE)]


@contract("vocab", VOCAB_CAUSES, parts=("artifacts",))
def judge_vocab(art: Artifacts, opts: Options) -> list[Finding]:
    """d2t / t2d."""
    return check_d2t(art)

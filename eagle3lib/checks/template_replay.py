"""Chat template, measured: the training conversations rendered as the served template renders them, and both
renderings replayed through the target (its states recaptured for each) and the draft, step-0 accuracy on the same
answer tokens. Two aspects are rendered: the default system prompt the template adds to a request without one
(inserted before the first user header), and the generation prompt it opens each answer with (its missing part
inserted where each answer starts). The accuracy the served rendering costs decides the aspect.

Usage: ``replay_renderings(art, tok, marks, "system prompt", n=4)`` -> {acc_0_training_rendering, ...} or {}.
"""
from __future__ import annotations

import torch

from ..errors import Eagle3Error
from ..samples.sample import Sample
from .inputs import Artifacts

REPLAY_N = 4          # training conversations rendered both ways (two target captures and two replays each)
MARGIN = 0.05         # step-0 accuracy the served rendering loses that confirms the aspect
MEASUREMENT = "training conversations rendered with the served template, both renderings replayed through the " \
              "target and the draft"


def _ids(tok, text: str) -> list[int]:
    return list(tok(text, add_special_tokens=False)["input_ids"]) if text else []


def with_default_system(ids: list[int], mask: list[int], prefix: list[int]) -> tuple[list[int], list[int]] | None:
    """`ids` as a request without a system turn renders under a template whose user-turn prefix is `prefix` (its
    default system block and the user header): the part of `prefix` the sample lacks is inserted before the first
    occurrence of the longest suffix of `prefix` it holds ahead of its first answer; None when it holds none."""
    first = mask.index(1) if 1 in mask else len(ids)
    for k in range(len(prefix), 0, -1):
        tail = prefix[len(prefix) - k:]
        at = next((i for i in range(first - k + 1) if ids[i:i + k] == tail), None)
        if at is not None:
            add = prefix[:len(prefix) - k]
            return (ids[:at] + add + ids[at:], mask[:at] + [0] * len(add) + mask[at:]) if add else None
    return None


def with_generation_prompt(ids: list[int], mask: list[int], gen: list[int]) -> tuple[list[int], list[int]] | None:
    """`ids` with each answer (a rise of the loss mask) opened by the generation prompt `gen`: the longest head
    of `gen` already ending there is kept and the rest inserted; None when every answer already opens with it."""
    out_ids, out_mask, changed = [], [], False
    for i, (t, m) in enumerate(zip(ids, mask)):
        if m == 1 and (i == 0 or mask[i - 1] == 0):
            have = next((k for k in range(min(len(gen), i), -1, -1) if ids[i - k:i] == gen[:k]), 0)
            add = gen[have:]
            out_ids += add
            out_mask += [0] * len(add)
            changed = changed or bool(add)
        out_ids.append(t)
        out_mask.append(m)
    return (out_ids, out_mask) if changed else None


def _render(aspect: str, tok, marks: dict, ids: list[int], mask: list[int]):
    if aspect == "system prompt":
        text = marks["no_system_rendering"]
        prefix = text[:text.find("QQUSRQQ")].removeprefix(getattr(tok, "bos_token", None) or "")
        return with_default_system(ids, mask, _ids(tok, prefix))
    return with_generation_prompt(ids, mask, _ids(tok, marks["generation_prompt"]))


def replay_renderings(art: Artifacts, tok, marks: dict, aspect: str, n: int = REPLAY_N, layout=None) -> dict:
    """Step-0 accuracy of the draft on `n` training conversations as rendered for training and as the served
    template renders them for `aspect` ("system prompt" / "generation prompt"), the target's states recaptured for
    both; {} when it cannot run (no weights, target, trained layout, or no sample the template changes)."""
    layout = layout or (art.data.layout if art.data is not None else None)
    if n <= 0 or art.data is None or not art.draft_path or not art.target_path or not art.tensors or not layout:
        return {}
    from ..hidden.capture import capture, load_target_model
    from ..replay.run import replay
    from ..replay.evidence import load_replay
    pairs = []
    for s in art.data.sample(min(n, len(art.data)), 0):
        ids, mask = s.input_ids.tolist(), s.loss_mask.tolist()
        served = _render(aspect, tok, marks, ids, mask)
        if served is not None:
            pairs.append(((ids, mask), served, s.id))
    if not pairs:
        return {}
    try:
        model = load_target_model(art.target_path)
        setup = load_replay(art.draft_path, art.target_path)

        def sample(ids, mask, sid):
            with torch.inference_mode():
                aux = capture(model, torch.tensor(ids), only=list(layout)).stack(layout)   # (T, k, Ht)
            return Sample(sid, torch.tensor(ids), torch.tensor(mask), aux.float(), tuple(layout), None, sid)
        acc = {}
        for label, k in (("training", 0), ("served", 1)):
            items = [sample(*p[k], f"{p[2]}:{label}") for p in pairs]
            acc[label] = float(replay(setup, items, n=len(items), num_steps=1, simulate=False, progress=False).acc0)
    except Eagle3Error as e:
        return {"replay_error": str(e)[:200]}
    return {"acc_0_training_rendering": acc["training"], "acc_0_served_rendering": acc["served"],
            "rendered_samples": len(pairs), "inserted_tokens": sum(len(p[1][0]) - len(p[0][0]) for p in pairs),
            "measurement": MEASUREMENT}

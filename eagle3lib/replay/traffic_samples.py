"""The served traffic as replay samples: each served prompt with the answer the server generated, its aux states
and final state captured by the HF target, the loss mask on the answer.

A served τ is what verification accepted on these very sequences, the target's own greedy continuations, which
are harder for a draft than held-out teacher text (benchmarks/NOTES.md section 12: 2.98 against 3.27 over every
position on the MLA world). Replayed on them, at the positions the engine's verification walk drafts at
(replay.stats), the draft predicts the served τ the engine measured. Usage:
    samples = traffic_samples(read_traffic(served_dir, tok), "data/demo_mla/target", ("layer_in.2", "layer_in.4"))
    replay(setup, samples, ...)
"""
from __future__ import annotations

import torch

from ..errors import DataError
from ..hidden.capture import capture, load_target_model
from ..layout import parse_layout
from ..model.target import load_target_info
from ..samples.sample import Sample
from ..serving.traffic import Traffic, read_traffic

FINAL = "final_postnorm"        # the state the replay's reference reads (the target's greedy token)


def traffic_samples(traffic: Traffic, target_path, layout, *, device: str = "cpu", dtype=None) -> list[Sample]:
    """One Sample per exchange: prompt + answer ids, loss mask 1 on the answer, the `layout` boundaries (those a
    replay feeds; a Recapture adds others) and the final post-norm state captured by the target at `target_path`."""
    info = load_target_info(target_path)
    names = parse_layout(list(layout), info.num_layers)
    model = load_target_model(target_path, device=device, dtype=dtype)
    out = []
    for e in traffic.exchanges:
        if not e.answer_ids:
            continue
        ids = torch.tensor(e.prompt_ids + e.answer_ids, dtype=torch.long)
        if int(ids.max()) >= info.vocab_size:
            raise DataError(e.source, "a token id outside the target's vocabulary",
                            expected=f"ids < {info.vocab_size}", found=int(ids.max()),
                            cause="traffic served by another target")
        cap = capture(model, ids, only=list(names) + [FINAL])
        mask = torch.zeros(len(ids), dtype=torch.long)
        mask[len(e.prompt_ids):] = 1                                 # the answer: what verification checked
        out.append(Sample(e.id, ids, mask, cap.stack(names), tuple(names), cap[FINAL],
                          f"{e.source} (served; captured by the target)", FINAL))
    return out


def served_traffic(path, target_path, layout, tokenizer=None, *, device: str = "cpu") -> tuple[list[Sample], str]:
    """(samples, a note saying what was read) of the served folder `path` (serving.traffic.read_traffic) for the
    target at `target_path`: what a served τ is compared against."""
    samples, note, _ = served_traffic_read(path, target_path, layout, tokenizer, device=device)
    return samples, note


def served_traffic_read(path, target_path, layout, tokenizer=None, *,
                        device: str = "cpu") -> tuple[list[Sample], str, Traffic]:
    """`served_traffic` with the `Traffic` read (its answers' own counters: `Traffic.counted_tau`, `Traffic.greedy`)."""
    if not target_path:
        raise DataError(f"served traffic {path}", "no target to capture it with", expected="target_path",
                        found="not given", cause="the served answers are replayed on the target's own states")
    if not layout:
        raise DataError(f"served traffic {path}", "no trained layout to capture", expected="the draft's training "
                        "layout (identified from its training data)", found=repr(layout),
                        cause="no training data given, or its slots match no boundary of the target")
    t = read_traffic(path, tokenizer)
    samples = traffic_samples(t, target_path, layout, device=device)
    how = sorted({e.ids_from for e in t.exchanges})
    note = (f"replayed on the served traffic: {len(samples)} answers ({t.answered_tokens} tokens, ids from "
            f"{' and '.join(how)}) of {t.responses}, captured by the target")
    if t.skipped:
        note += f"; {len(t.skipped)} set aside ({t.skipped[0][0]}: {t.skipped[0][1]})"
    return samples, note, t

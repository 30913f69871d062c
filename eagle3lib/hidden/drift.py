"""The stored training hidden states against the current target's own recapture of the same tokens: per slot,
cosine and norm ratio (`drift_table`; cosine alone is blind to a scale error), the samples with their slots
recaptured (`recaptured`), and for a shard whose slots nothing names, the boundary each resembles most
(`best_boundaries`). What they decide is checks.drift's.
Usage: ``drift_table(model, samples, ("embed", "layer_in.2"), num_layers=8)``.
"""
from __future__ import annotations

import dataclasses

import pandas as pd
import torch

from ..layout import input_index
from ..progress import track
from ..samples.sample import Sample
from .capture import as_slots, capture
from .compare import compare
from .layerwise import capture_layerwise
from .stream import streamed


def best_boundaries(model, samples) -> tuple[str, ...]:
    """Per slot, the boundary of the target's own capture it resembles most on the first sample (cosine), for a
    shard whose slots nothing names and none of which the target recomputes."""
    s = samples[0]
    cmp = compare(as_slots(s), capture(model, s.input_ids, progress=False))
    return tuple(str(b) for b in cmp.slots["best"])


def recaptured(model, samples, layout) -> list:
    """The samples with their aux slots (and stored final state) recaptured through `model` at `layout`."""
    out = []
    with torch.inference_mode():
        for s in samples:
            final = [s.final_boundary] if s.final_hidden is not None and s.final_boundary else []
            cap = capture(model, s.input_ids, only=list(dict.fromkeys(list(layout) + final)))
            out.append(dataclasses.replace(s, aux=cap.stack(layout).to(s.aux.dtype), layout=tuple(layout),
                                           final_hidden=cap[final[0]].to(s.final_hidden.dtype) if final else None))
    return out


def drift_table(model, samples, layout, num_layers: int, progress: bool = False) -> pd.DataFrame:
    """Per slot: boundary, depth (capture index), cosine (mean over tokens), norm ratio stored/recaptured (mean),
    over the given samples (each recaptured through `model` on its own tokens)."""
    k = len(layout)
    cos_sum, ratio_sum, count = torch.zeros(k), torch.zeros(k), 0
    samples = list(samples)
    if streamed(model) is not None:        # a streamed target: every layer read once for all the samples
        caps = capture_layerwise(model, [s.input_ids for s in samples], only=list(layout), progress=progress)
    else:
        caps = (capture(model, s.input_ids, only=list(layout))
                for s in track(samples, desc="recapture", progress=progress, unit="sample"))
    with torch.inference_mode():
        for s, cap in zip(samples, caps):
            fresh = cap.stack(layout).float()                              # (T, k, H)
            stored = s.aux.float()                                         # (T, k, H)
            cos_sum += torch.nn.functional.cosine_similarity(stored, fresh, dim=-1).sum(0)          # (T, k) -> (k,)
            ratio_sum += (stored.norm(dim=-1) / fresh.norm(dim=-1).clamp(min=1e-12)).sum(0)         # (T, k) -> (k,)
            count += s.num_tokens
    rows = [{"slot": i, "boundary": b, "depth": input_index(b, num_layers), "cosine": float(cos_sum[i] / count),
             "norm_ratio": float(ratio_sum[i] / count)} for i, b in enumerate(layout)]
    return pd.DataFrame(rows, columns=["slot", "boundary", "depth", "cosine", "norm_ratio"])


def captured_sample(model, ids: list[int], mask: list[int], layout, sid: str) -> Sample:
    """One token sequence through the target: its aux states at `layout`, as a replayable Sample (a rendering of a
    training conversation the training data does not hold)."""
    with torch.inference_mode():
        aux = capture(model, torch.tensor(ids), only=list(layout)).stack(layout)     # (T, k, Ht)
    return Sample(sid, torch.tensor(ids), torch.tensor(mask), aux.float(), tuple(layout), None, sid)

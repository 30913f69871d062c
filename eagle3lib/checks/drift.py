"""Check 6, target drift: the stored training hidden states against the current target's own recapture of the same
tokens, per slot: cosine and norm ratio (cosine alone is blind to a scale error). Tells apart the same model, the same
model in another dtype / quantization (small uniform error) and a different or fine-tuned model (large error,
growing with depth). Runs the target on `n` samples (`capture.capture`), so it is not a config-level check.

Causes: target_drift, quantized_target. Usage: ``check_drift(art, n=4)`` or ``drift_table(model, samples, layout)``.
"""
from __future__ import annotations

import pandas as pd
import torch

from ..hidden.capture import capture, load_target_model
from ..hidden.layerwise import capture_layerwise
from ..hidden.recapture import recapture_command
from ..hidden.stream import streamed
from ..causes import Finding, not_checked
from ..errors import Eagle3Error
from ..layout import input_index
from .inputs import NEEDS, Artifacts
from ..progress import track

WHERE = "checks.drift"
SAME = (0.999, 0.01)        # (min cosine, max |norm ratio - 1|): the same model, recomputed
CAST = (0.98, 0.05)         # the same model in another dtype / quantization


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


def classify(table: pd.DataFrame) -> str:
    """"same", "cast" (small uniform error), "scaled" (cosine fine, norms off) or "different" (large or growing)."""
    cos, ratio = table.cosine.to_numpy(), table.norm_ratio.to_numpy()
    off = abs(ratio - 1)
    if cos.min() >= SAME[0] and off.max() <= SAME[1]:
        return "same"
    if cos.min() >= SAME[0]:
        return "scaled"
    err = 1 - cos[table.depth.to_numpy().argsort()]                       # error by depth, shallow first
    growing = len(err) > 1 and err[-1] > 2 * max(err[0], 1e-6)
    if cos.min() >= CAST[0] and off.max() <= CAST[1] and not growing:
        return "cast"
    return "different"


def _command(art: Artifacts, layout) -> str:
    return recapture_command(art.target_path, art.data.root, layout)


def check_drift(art: Artifacts, n: int = 4, device: str = "cpu", progress: bool = False,
                model=None) -> list[Finding]:
    """Recapture `n` training samples through the target and say which of same / cast / scaled / different.

    Each slot is compared with the boundary it holds: the one identified by recapture (`art.trained`), else the
    data's declared layout, else the config's claim; a slot that matched no boundary is compared with its claim,
    which is where drift shows. `model`: the target already loaded (else loaded here)."""
    need = art.missing("target", "data")
    if need or not art.target_path:
        return [not_checked("target_drift", WHERE, need or NEEDS["target"])]
    L = art.target_info.num_layers
    tl = art.trained
    layout = tl.layout if tl is not None else art.data.layout
    if layout is None:
        return [not_checked("target_drift", WHERE, "the training data's layout (identified by recapture, declared, "
                            "or draft config ids)")]
    samples = [s for s in art.data.sample(min(n, len(art.data)), 0)]
    if not samples:
        return [not_checked("target_drift", WHERE, NEEDS["data"] + " (no readable sample)")]
    try:
        model = model if model is not None else load_target_model(art.target_path, device=device)
        if samples[0].hidden_size != model.config.hidden_size:
            return [Finding("target_drift", "confirmed", f"the stored states are {samples[0].hidden_size} wide, the "
                            f"target's are {model.config.hidden_size}: data from another model", {}, WHERE,
                            fix=f"recapture the training data from this target ({_command(art, layout)}) and retrain",
                            measured=True)]
        table = drift_table(model, samples, layout, L, progress)
    except Eagle3Error as e:
        return [not_checked("target_drift", WHERE, "a target transformers can run on these tokens", str(e)[:200])]
    kind = classify(table)
    slots = table[["boundary", "cosine", "norm_ratio"]].to_dict("records")
    ev = {"samples": len(samples), "kind": kind, "slots": slots,
          "layout_from": tl.source if tl is not None else "declared"}
    quant = (dict(art.target_info.raw).get("quantization_config") or {})
    if kind == "same":
        return [Finding("target_drift", "ruled out", "the target recomputes the stored training states (same model)",
                        ev, WHERE, measured=True)]
    if kind == "cast":
        out = [Finding("target_drift", "ruled out", "a small uniform error: the same model in another dtype or "
                       f"quantization (min cosine {table.cosine.min():.4f})", ev, WHERE, measured=True)]
        if quant:
            out.append(Finding("quantized_target", "suspected", "the quantized target's states differ a little from "
                               "the training states", ev, WHERE, source="vllm#9534", measured=True))
        return out
    if kind == "scaled":
        return [Finding("target_drift", "confirmed", "same directions, other norms (norm ratio "
                        f"{table.norm_ratio.min():.3g}..{table.norm_ratio.max():.3g}): a scale error cosine alone "
                        "would miss", ev, WHERE, fix="find the rescaling between capture and training (or recapture)",
                        source="ModelOpt debug/README.md (norm ratios beside cosine)", measured=True)]
    return [Finding("target_drift", "confirmed", "the target no longer computes the training states (cosine by depth "
                    + ", ".join(f"{b} {c:.3f}" for b, c in zip(table.boundary, table.cosine))
                    + "): a different or since fine-tuned model", ev, WHERE,
                    fix=f"recapture the training data from the current target ({_command(art, layout)}) and retrain "
                    "the draft on it",
                    source="field-causes.md #14; SpecForge#192; speculators#751", measured=True)]

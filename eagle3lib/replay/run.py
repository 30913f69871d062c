"""Replay a draft on training samples: per-step accuracy, conditional rates, accept length, simulated acceptance.

Step k at position t consumes token t+1+k and is scored against the reference for token t+2+k where
loss_mask[t+k] = 1 (SpecForge, training-and-eval.md §1.3; ``mask="next"``: loss_mask[t+1+k], speculators/ModelOpt).
Reference: the target's greedy token argmax(lm_head(final_hidden[t+1+k])) when the sample stores the final post-norm
state and the lm_head is loaded (SpecForge: OOV is a miss), else the data token. E[accept] = 1 + Σ_k Π_{j<k} p_j.
A P-EAGLE draft (model.peagle) runs its one parallel forward instead of the TTT steps: step k is its depth k, scored
on the rows its COD sampling can keep, and the chain simulation is that same forward (nothing is fed back).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from ..errors import Eagle3Error, LayoutError
from ..hidden.capture import load_target_model
from ..hidden.identify import trained_layout
from ..model.checkpoint import load_draft
from ..model.peagle import PEagleDraft, resolve_mask_token_id
from ..model.target import load_target_info, load_target_tensor, load_tokenizer
from ..once import files_signature, kept
from ..progress import bar
from ..samples.readers import Dataset, open_dataset
from .items import as_samples, prepared, requested_layout
from .loop import draft_run
from .stats import ReplayCounts, ReplayOptions, ReplayResult, ReplaySetup


def replay_dtype(dtype, device: str) -> torch.dtype:
    """"auto" -> bf16 on CUDA, fp32 elsewhere; strings like "bfloat16" -> torch dtypes."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, "", "auto"):
        return torch.bfloat16 if str(device).startswith("cuda") else torch.float32
    got = getattr(torch, str(dtype).replace("torch.", ""), None)
    if not isinstance(got, torch.dtype):
        raise LayoutError("replay dtype", "unknown dtype", expected="float32, bfloat16, float16 or auto", found=dtype)
    return got


def load_setup(draft_path, target_path=None, device: str = "cpu", dtype="auto", *, missing: str = "fill",
               head_fill: str = "random") -> ReplaySetup:
    """Load the draft (embedding from the target) and the target's lm_head, tokenizer and layer count. A tensor
    the checkpoint lacks (or holds in the wrong shape) is, by default, replayed as an engine that loads the draft
    anyway would run it (`model.checkpoint.load_draft(missing="fill", lm_head=head_fill)`): `filled` and the notes
    say which; ``missing="raise"`` refuses such a draft.

    Inside a diagnosis (`once.case_reads`) the setup is loaded once and shared by every part, check and search:
    kept by the resolved draft and target paths, their files' sizes and mtimes, the resolved dtype, the device and
    the fill options, so a rewritten file or another dtype is another load; one setup is kept at a time (a load
    under another key lets the kept one go: two dtypes of a large draft side by side would not fit where one
    does). A caller that changes the shared model
    (`as_served.variant`, `as_served.loaded_as`, the artifact search) puts back what it changed; a setup found
    changed since it was loaded (`setup_fingerprint`) is loaded again. Outside a case: a new load every call."""
    dt = replay_dtype(dtype, device)
    key = ("replay setup", str(Path(draft_path).resolve()), str(Path(target_path).resolve()) if target_path else None,
           str(dt), str(device), missing, head_fill, files_signature(draft_path),
           files_signature(target_path) if target_path else ())
    setup, _ = kept(key, lambda: stamped(_loaded_setup(draft_path, target_path, device, dt, missing, head_fill)),
                    fresh=lambda got: setup_fingerprint(got[0]) == got[1], alone=True)
    return setup


def setup_fingerprint(setup: ReplaySetup) -> tuple:
    """What changes when a caller changes the setup's model and does not put it back: a parameter or buffer
    replaced, cast, moved or written in place (its storage or version counter), its config or rotary swapped, the
    P-EAGLE mask token, the target lm_head written. (The rotary's own frequency buffer is left out: it follows
    the model's moves by design.)"""
    m = setup.model
    tensors = [(n, t) for n, t in (*m.named_parameters(), *m.named_buffers()) if not n.startswith("rotary.")]
    head = setup.lm_head
    return (id(m.cfg), id(m.rotary), getattr(m, "mask_token_id", None),
            getattr(getattr(m, "midlayer", None), "norm_before_residual", None),
            tuple((n, t.data_ptr(), t._version, t.dtype, str(t.device), tuple(t.shape)) for n, t in tensors),
            None if head is None else (head.data_ptr(), head._version, head.dtype))


def stamped(setup: ReplaySetup) -> tuple[ReplaySetup, tuple]:
    """(setup, its fingerprint when loaded)."""
    return setup, setup_fingerprint(setup)


def _loaded_setup(draft_path, target_path, device: str, dt: torch.dtype, missing: str,
                  head_fill: str) -> ReplaySetup:
    """`load_setup`'s load from disk (the dtype resolved)."""
    loaded = load_draft(draft_path, target=target_path or None, device=device, dtype=dt, missing=missing,
                        lm_head=head_fill)
    notes, lm_head, tok, L, lay = [f.sentence() for f in loaded.filled], None, None, None, None
    if target_path:
        L = load_target_info(target_path).num_layers
        try:
            lay = loaded.cfg.aux_layout(L)
        except LayoutError as e:      # the config's ids are only a claim; the data's slots are identified apart
            notes.append(f"the draft config's layer ids are no layout of this target ({e}): the training layout is "
                         "the data's")
        if loaded.cfg.ids_readings_text(L):      # a convention the writer leaves open: the data decides
            lay = None
            notes.append(loaded.cfg.ids_readings_text(L) + ": the training layout is the data's (its slots as "
                         "stored, or identified against the target)")
        tok = load_tokenizer(target_path)
        try:
            lm_head = load_target_tensor(target_path, "lm_head").to(device=device, dtype=dt)
        except Eagle3Error as e:
            notes.append(f"no target lm_head ({e}): the reference is the data's next token")
    else:
        notes.append("no target given: the reference is the data's next token, the layout is the data's own")
    if lay is None and target_path and loaded.cfg.aux_layer_ids is None:
        notes.append("the draft config names no aux layer ids: the training layout is the data's declared layout")
    if isinstance(loaded.model, PEagleDraft):
        notes += peagle_notes(loaded.model, tok)
    return ReplaySetup(loaded.model, loaded.cfg, str(draft_path), str(target_path) if target_path else None, L,
                       lay, lm_head, tok, tuple(notes), filled=loaded.filled)


def with_trained_layout(setup: ReplaySetup, trained) -> ReplaySetup:
    """The setup with the trained layout a `hidden.identify.TrainedLayout` established (unchanged when it names
    none): replays default to it, and samples that declare no layout are read as holding it."""
    if trained is None or trained.layout is None:
        return setup
    return dataclasses.replace(setup, training_layout=tuple(trained.layout), training_layout_source=trained.source,
                               notes=setup.notes + (f"training layout {trained.detail}",))


def identify_training_layout(setup: ReplaySetup, data, *, model=None, recapture: bool = True, n: int = 3,
                             data_format: str | None = None, device: str = "cpu"):
    """`hidden.identify.trained_layout` for this setup's draft and target on `data`. With `recapture`, the target
    (`model`, else loaded here from the setup's target path) recaptures `n` samples to identify the slots;
    without it (or without a target) the answer is the data's declared layout or the config's claim."""
    ds = data if isinstance(data, Dataset) else open_dataset(Path(data), format=data_format or None,
                                                            hidden_size=None)
    if recapture and model is None and setup.target_path:
        model = load_target_model(setup.target_path, device=device)
    return trained_layout(ds, setup.cfg, setup.num_layers, model=model if recapture else None, n=n)


def peagle_notes(model: PEagleDraft, tokenizer=None) -> list[str]:
    """Resolve a P-EAGLE draft's mask token when its config has none (SpecForge) and say how it is replayed."""
    notes = ["P-EAGLE draft: the K drafts come from ONE forward (mask_hidden and the mask token at depths >= 1); "
             "acc per step is its position_{d}_acc on the rows its COD sampling keeps; SpecForge leaves out rows "
             "whose target is outside the draft vocab (acc / (1 - oov_rate)), here they are misses"]
    if model.mask_token_id is None:
        mask_id, where = resolve_mask_token_id(model.cfg, tokenizer)
        model.mask_token_id = mask_id
        notes.append(f"P-EAGLE mask token {mask_id}: {where}" if mask_id is not None else
                     f"P-EAGLE mask token unknown ({where}): replay needs mask_token_id in the config")
    return notes


# ---------------------------------------------------------------- one replay: items -> loop -> counts

def replay(setup: ReplaySetup, data, *, layout=None, label: str | None = None, n: int | None = None, seed: int = 0,
           data_format: str | None = None, num_steps: int = 3, fill: str = "error", d2t: str = "offsets",
           align: int = 0, mask: str = "token", reference: str = "auto", simulate: bool = True,
           batch_tokens: int = 8192, recapture=None, only_scored: bool = True,
           prefetch_tokens: int | None = None, progress: bool = True, past_stop: bool = False) -> ReplayResult:
    """Run the draft on samples (Dataset, path or list) under `layout` (default: the training layout) and score it.

    Per step k: teacher-forced top-1 (SpecForge accuracy), joint and conditional rates, OOV rate; with
    `simulate`, chain drafting from every position (draft's own tokens and states fed back) scored like a greedy
    verifier whose continuation is the reference. Bad samples are skipped with a reason naming them.
    only_scored: run the lm_head and the steps >= 1 only where an output is scored (same numbers, less work);
    prefetch_tokens: tokens of samples read and prepared ahead in a background thread, overlapping the forward
    (None: one batch, `batch_tokens`, so the next batch is read while this one runs; 0: in line).
    past_stop: the verification walk also verifies the token after an answer's last one (`stats.walk_rows`: what
    an engine counting acceptance before its stop check counts).
    """
    options = ReplayOptions(num_steps=num_steps, fill=fill, d2t=d2t, align=align, mask=mask, reference=reference,
                             simulate=simulate, past_stop=past_stop)
    counts = ReplayCounts(setup, requested_layout(setup, layout), options)
    depths = setup.cfg.parallel_depths
    if setup.cfg.parallel_drafting and depths and num_steps > depths:
        counts.note(f"num_steps={num_steps} but the P-EAGLE draft was trained for {depths} depths: the depths "
                    f"past {depths - 1} were never trained")
    samples, ds, total = as_samples(data, n, seed, data_format)
    skipped0 = len(ds.skipped) if ds is not None else 0
    with bar(total=total, desc=f"replay {label or ''}".strip(), progress=progress, unit="sample") as meter:
        count(setup, enumerate(samples), counts, batch_tokens=batch_tokens, recapture=recapture, bar=meter,
              only_scored=only_scored, prefetch_tokens=prefetch_tokens)
    if ds is not None:
        counts.skip_read((i, *x) for i, x in enumerate(ds.skipped[skipped0:]))
    return counts.result(label)


def count(setup: ReplaySetup, items, counts: ReplayCounts, *, batch_tokens: int = 8192, recapture=None,
          bar=None, only_scored: bool = True, prefetch_tokens: int | None = None) -> ReplayCounts:
    """Prepare (`items.prepared`), run (`loop.draft_run`) and add (key, Sample) pairs into `counts` (keys order
    the merged per-sample rows and skips); a sample that does not prepare is counted skipped.
    prefetch_tokens: tokens of samples read and prepared ahead in a background thread while the draft runs
    (None: `batch_tokens`, the next batch; 0: in line). Counted in tokens, not samples: a batch holds tens of
    samples, and a reader two samples ahead would wait through most of every forward (benchmarks/NOTES.md 9.3)."""
    o, skipped = counts.opts, []
    ready = prepared(setup, items, counts.requested, skipped=skipped, bar=bar, recapture=recapture, fill=o.fill,
                     align=o.align, reference=o.reference,
                     ahead_tokens=batch_tokens if prefetch_tokens is None else prefetch_tokens)
    for r in draft_run(setup.model, ready, num_steps=counts.K, d2t=o.d2t, mask=o.mask, simulate=o.simulate,
                       only_scored=only_scored, batch_tokens=batch_tokens, past_stop=o.past_stop):
        counts.add(r.item, r.scored)
    for key, s, error in skipped:
        counts.skip(key, s, error)
    return counts

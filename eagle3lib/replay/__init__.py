"""Replay: the draft run outside the server on its own training samples (wiring bug or generalization gap?).

- `run`          `load_setup`, `replay`: the options checked, the samples prepared, run through the loop, counted.
- `items`        samples -> `ReplayItem`s: each checked against the draft, its slots picked by boundary name (zeros
                 or a recapture for missing ones), its reference tokens; read ahead, bad samples set aside.
- `loop`         `draft_run`, the one draft-run loop: prepared samples through an EAGLE-3, P-EAGLE or MLA draft in
                 padded batches, per-position predictions (teacher, chain, top-k) and their scores.
- `evidence`     the replay evidence the checks cite: accuracy under config variants, by position (and its plot).
- `stats`        the replay types (`ReplaySetup`, `ReplayOptions`, `ReplayItem`); per-step / conditional accuracy,
                 accept-length arithmetic, the engine's verification walk (where a server drafts), mergeable
                 `ReplayCounts`, `ReplayResult`.
- `verdict`      the verdict (wiring / generalization / healthy), replay tables and plot, notebook 02's inputs.
- `layoutsearch` which wiring was meant: candidate layouts, d2t readings and token shifts replayed and ranked.
- `tokenview`    per-sample token view (ipywidgets in Lab, static HTML in reports); the audit's forward preview.
- `tree_acceptance` simulated SGLang tree acceptance from every training-sample position, next to the chain.
- `served`       a served τ beside the replay under the same (num_steps, topk, num_draft_tokens) and layout (what
                 it decides: checks.served_loss).
- `as_served`    the draft replayed as an engine loads it (layout, d2t, embedding, lm_head, RoPE), aspect by aspect.
- `counterfactual` the training samples decide what was trained: the draft replayed under every engine-read
                 config field set otherwise; the field whose change restores the accuracy, with its fix.
- `artifacts`    the training samples decide which shipped tensor was trained: d2t recovered from the training
                 targets, lm_head rows reordered or the target's, tied weights, the embedding; the one that restores.
- `traffic_samples` the served traffic (each served prompt + the server's answer) as samples captured by the target:
                 what a served τ is predicted on.
- `distributed`  replay and slot comparison over torchrun ranks, merged exactly on rank 0; result JSON.
- `cli`          the command line behind `python -m eagle3lib.replay` / `torchrun ... -m eagle3lib.replay`.
"""

"""Hidden states: which target tensors a draft is fed, captured, dumped, compared and explained.

- `capture`   reference captures of every residual boundary of an HF target; `Slots` (what a draft is fed);
              `load_target_model` (the target, once per process).
- `decoders`  where an HF causal LM keeps its decoder stack (`decoder_stack`: decoder, layers, final norm).
- `targets`   the target loaded once per process: one cache by folder / device / dtype, a full load or a streamed one.
- `weights`   a target's safetensors read tensor by tensor (`TargetWeights`), fp8 block scales dequantized.
- `stream`    the target on the meta device, each unit's weights read just before it runs (`stream_target`).
- `layerwise` many sequences through a streamed target, each layer read once for all (`capture_layerwise`).
- `recapture` `python -m eagle3lib.hidden.recapture`: a training set's aux states recaptured from the current target.
- `dumps`     serving dumps in: SGLang debug tensor dumps and the eagle3lib dump format (`save_dump` / `load_dump`).
- `drift`     the stored training states against the target's recapture of the same tokens, per slot (`drift_table`),
              the samples recaptured, a rendering captured as a replayable sample (what checks.drift and
              checks.template_replay measure with).
- `compare`   slot-vs-boundary similarity and identification; which layout a dumped fc input was fed.
- `identify`  which boundaries a training shard's slots hold: identified against the target's own boundaries,
              else the data's declared layout, else the config's claim (`trained_layout`).
- `explain`   `explain(expected, actual)`: how two slot layouts differ, in words (`LayoutExplanation`, a list of `Difference`s).
"""

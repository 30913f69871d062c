"""The contract checks (issue 15): each reads the draft, target, data and launch it is given and returns
`eagle3lib.causes.Finding`s; a missing input gives ``not checked`` naming it.

- `inputs`      read_artifacts(): configs, tensor headers, data, launch, read once (never raises); the replay setup,
                target model, tokenizer, tensors and launch template on first use, once per call (`scoped`; the
                identified layout kept for the case: `once`): a check never opens a file itself; one reader per
                input kind (read_draft_config, read_target_config, read_data, read_launch, ...), which steps.given
                reads the user's parameters with
- `layer_ids`   1 layer ids: present, where, what each engine captures vs the training layout and fc width
- `flags`       2 variant flags (norm_before_fc, fc_norm, norm_output, norm_before_residual) vs the engine;
                  fc_norm + norm_before_fc together; what a SpecForge norm_output means (before PR#879)
- `rope`        3 RoPE fields of draft vs target (Transformers 4 and 5 locations) vs the training config
- `context`     4 draft max_position_embeddings vs the target, the data and served prompt lengths; the draft's
                  sliding window / layer_types vs the target's
- `embedding`   5 the draft's own embed_tokens vs the target's; lm_head missing; vocab padding
- `drift`       6 stored training hidden states vs the current target's recapture (cosine, norm ratio)
- `launch_settings` 7 algorithm vs architecture, lossy thresholds, sampling, quantized target, hidden sizes
- `template`    8 chat-template markers in the training samples vs the target tokenizer and served prompts
- `template_replay` 8 the training conversations rendered with the served template, both renderings replayed
- `vocab`         d2t / t2d (vocab.check_vocab) as findings
- `loaded_keys` 9 draft keys vs what each engine's loader maps (dropped keys, tensors left at random init)
- `launch_flags` 10 serving features from the launch: prefix caching, DP attention, LoRA, structured output,
                  chunked prefill, an mRoPE target, TRT-LLM's acceptance gate, HiCache, PD disaggregation,
                  async scheduling, sequence parallelism
- `draft_serving` 11 how the engine runs and verifies the draft: rejection method, adaptive / lossy depth, a
                  quantized drafter under CUDA graphs, the KV-cache dtype, simulated acceptance, an fp8 target KV
                  cache, the draft's attention backend / kv_cache_scheme, a platform with a greedy verify
- `draft_feed`  13 what the engine feeds the draft and what K means: aux opt-out, aux layers on earlier PP
                  ranks, the layer-id count vs the fc built, stale draft KV by version, K's meaning, a K schedule
- `ndt_override` 12 the speculative settings the engine runs vs those requested, as its home's rewrite rule judges
                  them (SGLang's `sglang_engine.rewrites`); notebook 01's Discovery calls it
- `engine_said`   what the running engine said (its log, a probe, a dump) against the trained layout, and the
                  error it died of, naming the file and the key (steps.served_prediction calls it)
- `served_layout` the layout causes from a serving dump identified against the target's boundaries (notebook 03)
- `replayed_layout` what the training-sample replay decides: the served layout against the trained one,
                  missing_layer_ids, generalization_gap, a d2t reading (notebook 02)
- `restoring`   what the training samples' searches decide: a config field (draft_config_differs, rope_mismatch)
                  or a shipped tensor (d2t_mapping, draft_tensor_differs, lm_head_missing, wrong_embedding) that
                  restores the draft's own training samples (steps.trained_config runs the searches)
- `generalization` generalization_gap on the served traffic: the training samples' accuracy against the traffic's
                  replay (with how far it is from them), or a served τ against a replay on other data; never
                  ruled out from held-out samples alone while the served τ is low (steps.served_prediction calls it)
- `served_loss`   what a served τ decides beside the replay under the setting it ran (engine_regression,
                  served_loss_unexplained, measurement_artefact) and beside the draft replayed as trained and as
                  the engine loads it (each wiring cause; steps.served_prediction calls it)
- `runnable`    14 a draft config value the engine refuses outright (hidden_act other than silu), by the facts
- `registry`    `@contract(name, causes, parts=...)`: each check registered where it is written, with the parts
                  that run it (tags, no tuple of names); `Options`, what a check reads beside the artifacts
- `judge`       run_checks(...): every registered check (or a part's) on whatever inputs are given;
                check_artifacts(art): the same on artifacts already read (a case's: `steps.case.Case.artifacts`)
"""

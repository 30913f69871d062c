"""The draft and the target as files and as a model: formats, loading, validation, the draft forward.

- `config`     `DraftConfig`: one frozen view of a draft's config.json, whatever tool wrote it (EAGLE, SpecForge /
               SGLang, vLLM, speculators, ModelOpt); ids and their readings (`aux_readings`), slots, variant flags,
               RoPE; a draft fed the target's final state (`use_aux_hidden_state` false: no fc).
- `dialects`   the one table of config dialects (`CONFIG_DIALECTS`), one `Dialect` row each: detection, where the
               ids are and their convention and when the writer leaves it open (`ids_open`), where the Llama fields
               live, architecture names (MLA: can it hold one), its writer; a new dialect is one row (+ its writer)
               there. `FLAG_PLACES`: where each writer puts each variant flag (top level, eagle_config, ...).
- `config_fields` the readers `DraftConfig` uses (`detect_dialect`, ids, RoPE, ... looking up the dialect's row),
               `MlaConfig`, the block-drafter gate.
- `safefiles`  safe reading of weight files: checked safetensors headers, sharded indexes, `weights_only` torch files.
- `formats`    the one table of checkpoint formats: name, detection (`detect_format`), save map, config dialect and
               the dialect written with it (`save_draft` reads it; each dialect named is a `dialects` row).
- `checkpoint` declarative key maps between formats, the validation report, strict loading (`load_draft`), saving.
- `vocab`      d2t / t2d maps: build, validate, explain, convert, coverage.
- `layers`     the building blocks: RMSNorm, RoPE, Llama / Qwen3 (q/k-norm, attention bias) attention, MLP, the
               first EAGLE-3 decoder layer (`midlayer`, 2H input) and the later plain layers (`layers.N`, width H).
- `draft`      `Eagle3Draft`, the forward in plain PyTorch over 1..N decoder layers: step 0, TTT steps, KV-cached
               chain drafting (one cache per layer).
- `mla`        `MlaAttention`: DeepSeek-V2 multi-latent attention for MLA drafts (SGLang
               `Eagle3DeepseekV2ForCausalLM`, Kimi-K2.x), its partial interleaved RoPE and YaRN softmax scale.
- `mla_vllm`   vLLM's dialect of the MLA draft as data (deepseek_eagle3.py: `Eagle3DeepseekV2/V3ForCausalLM`, the
               config fields it reads, its unused later-layer `hidden_norm`, its fused tensors); its forward is `draft`'s.
- `peagle`     `PEagleDraft`: P-EAGLE (parallel drafting), all K drafts in one forward with `mask_hidden` and the
               mask token; `draft_for(cfg)` builds the model a config describes.
- `ttt_attention` the draft's attention at every TTT step in memory linear in T (SDPA in query blocks, diagonal keys
               merged in the same softmax), exact against the materialised scores.
- `variants`   the same trained weights under other config values (`rebuilt`: a flag, RoPE, eps, activation).
- `target`     target-model facts, its embedding / lm_head read alone, its tokenizer.
- `audit`      the checkpoint audit tables notebook 00 shows.
"""

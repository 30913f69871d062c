"""SGLang's launch commands: ``python -m sglang.launch_server ...``, ``sglang serve ...``, ``python -m sglang.cli
serve ...``; the flags it takes (its `ServerArgs` field names, so they match /server_info and the rule table).
    FLAGS["--speculative-num-steps"] -> ("speculative_num_steps", "int")
"""
from __future__ import annotations

from ..engine_kit.launch_reading import flag_table, int_or_none, python_module

# flag names -> (ServerArgs field, kind); kind: str int float bool json list
_FLAG_SPEC = {
    "model-path model": ("model_path", "str"), "tokenizer-path": ("tokenizer_path", "str"),
    "host": ("host", "str"), "port": ("port", "int"), "tp-size tensor-parallel-size tp": ("tp_size", "int"),
    "dp-size data-parallel-size dp": ("dp_size", "int"), "pp-size pipeline-parallel-size": ("pp_size", "int"),
    "ep-size": ("ep_size", "int"), "mem-fraction-static": ("mem_fraction_static", "float"),
    "max-running-requests": ("max_running_requests", "int"), "max-total-tokens": ("max_total_tokens", "int"),
    "chunked-prefill-size": ("chunked_prefill_size", "int"), "max-prefill-tokens": ("max_prefill_tokens", "int"),
    "page-size": ("page_size", "int"), "attention-backend": ("attention_backend", "str"),
    "prefill-attention-backend": ("prefill_attention_backend", "str"),
    "decode-attention-backend": ("decode_attention_backend", "str"), "sampling-backend": ("sampling_backend", "str"),
    "speculative-algorithm": ("speculative_algorithm", "str"),
    "speculative-draft-model-path speculative-draft-model": ("speculative_draft_model_path", "str"),
    "speculative-draft-model-revision": ("speculative_draft_model_revision", "str"),
    "speculative-draft-model-quantization": ("speculative_draft_model_quantization", "str"),
    "speculative-num-steps": ("speculative_num_steps", "int"),
    "speculative-eagle-topk": ("speculative_eagle_topk", "int"),
    "speculative-num-draft-tokens": ("speculative_num_draft_tokens", "int"),
    "speculative-accept-threshold-single": ("speculative_accept_threshold_single", "float"),
    "speculative-accept-threshold-acc": ("speculative_accept_threshold_acc", "float"),
    "speculative-token-map": ("speculative_token_map", "str"),
    "speculative-attention-mode": ("speculative_attention_mode", "str"),
    "speculative-draft-window-size": ("speculative_draft_window_size", "int"),
    "speculative-adaptive": ("speculative_adaptive", "bool"),
    "speculative-use-rejection-sampling": ("speculative_use_rejection_sampling", "bool"),
    "enable-mixed-chunk": ("enable_mixed_chunk", "bool"), "disable-overlap-schedule": ("disable_overlap_schedule", "bool"),
    "disable-cuda-graph": ("disable_cuda_graph", "bool"), "disable-cuda-graph-padding": ("disable_cuda_graph_padding", "bool"),
    "disable-radix-cache": ("disable_radix_cache", "bool"), "cuda-graph-max-bs": ("cuda_graph_max_bs", "int"),
    "cuda-graph-bs": ("cuda_graph_bs", "list"), "quantization": ("quantization", "str"), "dtype": ("dtype", "str"),
    "kv-cache-dtype": ("kv_cache_dtype", "str"), "trust-remote-code": ("trust_remote_code", "bool"),
    "context-length": ("context_length", "int"), "served-model-name": ("served_model_name", "str"),
    "log-level": ("log_level", "str"), "decode-log-interval": ("decode_log_interval", "int"),
    "enable-metrics": ("enable_metrics", "bool"),
    "enable-deterministic-inference": ("enable_deterministic_inference", "bool"),
    "random-seed": ("random_seed", "int"), "device": ("device", "str"),
    "debug-tensor-dump-output-folder": ("debug_tensor_dump_output_folder", "str"),
    "enable-dp-attention": ("enable_dp_attention", "bool"), "skip-server-warmup": ("skip_server_warmup", "bool"),
    "chat-template": ("chat_template", "str"), "json-model-override-args": ("json_model_override_args", "str"),
    "schedule-policy": ("schedule_policy", "str"), "stream-interval": ("stream_interval", "int"),
    "enable-torch-compile": ("enable_torch_compile", "bool"),
    "enable-return-hidden-states": ("enable_return_hidden_states", "bool"),
    "speculative-adaptive-config": ("speculative_adaptive_config", "str"), "enable-lora": ("enable_lora", "bool"),
    "lora-paths": ("lora_paths", "str"), "max-loras-per-batch": ("max_loras_per_batch", "int"),
    "grammar-backend": ("grammar_backend", "str"), "disaggregation-mode": ("disaggregation_mode", "str"),
    "enable-dp-lm-head": ("enable_dp_lm_head", "bool"), "tool-call-parser": ("tool_call_parser", "str"),
    "reasoning-parser": ("reasoning_parser", "str"), "enable-hierarchical-cache": ("enable_hierarchical_cache", "bool"),
    "hicache-ratio": ("hicache_ratio", "float"), "hicache-storage-backend": ("hicache_storage_backend", "str"),
}


FLAGS = flag_table(_FLAG_SPEC)
# what a flag does, as the checks ask for it -> SGLang's field (engine_kit.home.EngineHome.roles)
ROLES = {"pipeline_parallel": "pp_size", "chunked_prefill_tokens": "chunked_prefill_size",
         "lora_adapters": "lora_paths"}
SPEC_FIELDS = ("speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps",
               "speculative_eagle_topk", "speculative_num_draft_tokens")


def entrypoint(tokens: list[str]) -> tuple[str, list[str]] | None:
    """(how SGLang was started, the flag tokens), or None when `tokens` are not an SGLang launch."""
    module = python_module(tokens)
    if module is not None:
        name, rest = module
        if name.startswith("sglang") and "launch_server" in name:
            return f"python -m {name}", rest
        if name.startswith("sglang") and rest[:1] == ["serve"]:
            return f"python -m {name} serve", rest[1:]
        return None
    if tokens[:1] and tokens[0].rsplit("/", 1)[-1] == "sglang" and tokens[1:2] == ["serve"]:
        return "sglang serve", tokens[2:]
    return None


def launch_fields(flags: dict, entrypoint: str, positionals: list, strict: bool, notes: list, unread: list):
    """The speculative settings LaunchArgs names, from SGLang's own fields; SGLang takes no positional words."""
    get = flags.get
    return {"model_path": get("model_path"), "draft_path": get("speculative_draft_model_path"),
            "algorithm": get("speculative_algorithm"), "num_steps": int_or_none(get("speculative_num_steps")),
            "topk": int_or_none(get("speculative_eagle_topk")),
            "num_draft_tokens": int_or_none(get("speculative_num_draft_tokens"))}, positionals

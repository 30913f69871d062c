"""vLLM's launch commands: ``vllm serve MODEL ...``, ``python -m vllm.entrypoints.openai.api_server ...``,
``python -m vllm.entrypoints.cli.main serve ...``; the flags it takes (its `EngineArgs` field names), the
positional model and ``--speculative-config`` (JSON, or its dotted form), the removed ``--speculative-model``.
    FLAGS["--speculative-config"] -> ("speculative_config", "json")
"""
from __future__ import annotations

from ..engine_kit.launch_reading import fail_or_note, flag_table, int_or_none, python_module
from ..errors import ServingArgsError

# flag names -> (EngineArgs field, kind); kind: str int float bool json list
_FLAG_SPEC = {
    "model": ("model", "str"), "speculative-config": ("speculative_config", "json"),
    "speculative-model": ("speculative_model", "str"), "num-speculative-tokens": ("num_speculative_tokens", "int"),
    "speculative-draft-tensor-parallel-size": ("speculative_draft_tensor_parallel_size", "int"),
    "tensor-parallel-size tp": ("tensor_parallel_size", "int"), "pipeline-parallel-size pp": ("pipeline_parallel_size", "int"),
    "data-parallel-size dp": ("data_parallel_size", "int"), "max-num-seqs": ("max_num_seqs", "int"),
    "max-model-len": ("max_model_len", "int"), "max-num-batched-tokens": ("max_num_batched_tokens", "int"),
    "gpu-memory-utilization": ("gpu_memory_utilization", "float"), "dtype": ("dtype", "str"),
    "quantization q": ("quantization", "str"), "kv-cache-dtype": ("kv_cache_dtype", "str"),
    "block-size": ("block_size", "int"), "seed": ("seed", "int"), "host": ("host", "str"), "port": ("port", "int"),
    "served-model-name": ("served_model_name", "str"), "trust-remote-code": ("trust_remote_code", "bool"),
    "enforce-eager": ("enforce_eager", "bool"), "disable-log-stats": ("disable_log_stats", "bool"),
    "enable-chunked-prefill": ("enable_chunked_prefill", "bool"),
    "enable-prefix-caching": ("enable_prefix_caching", "bool"), "async-scheduling": ("async_scheduling", "bool"),
    "attention-backend": ("attention_backend", "str"), "compilation-config O": ("compilation_config", "json"),
    "tokenizer": ("tokenizer", "str"), "chat-template": ("chat_template", "str"),
    "enable-lora": ("enable_lora", "bool"), "lora-modules": ("lora_modules", "str"), "max-loras": ("max_loras", "int"),
    "structured-outputs-config": ("structured_outputs_config", "json"),
    "guided-decoding-backend": ("guided_decoding_backend", "str"),
    "enable-auto-tool-choice": ("enable_auto_tool_choice", "bool"), "tool-call-parser": ("tool_call_parser", "str"),
    "reasoning-parser": ("reasoning_parser", "str"), "enable-expert-parallel": ("enable_expert_parallel", "bool"),
    "kv-transfer-config": ("kv_transfer_config", "json"), "attention-config": ("attention_config", "json"),
}


FLAGS = flag_table(_FLAG_SPEC, short=("tp", "dp", "pp", "q", "O"))    # vLLM's -tp etc.
# what a flag does, as the checks ask for it -> vLLM's field (engine_kit.home.EngineHome.roles)
ROLES = {"pipeline_parallel": "pipeline_parallel_size", "chunked_prefill_tokens": "max_num_batched_tokens",
         "lora_adapters": "lora_modules"}
SPEC_FIELDS = ("speculative_config",)


def entrypoint(tokens: list[str]) -> tuple[str, list[str]] | None:
    """(how vLLM was started, the flag tokens), or None when `tokens` are not a vLLM launch."""
    module = python_module(tokens)
    if module is not None:
        name, rest = module
        if name.startswith("vllm.entrypoints") and not (name == "vllm.entrypoints.cli.main" and rest[:1] == ["serve"]):
            return f"python -m {name}", rest
        if name in ("vllm", "vllm.entrypoints.cli.main") and rest[:1] == ["serve"]:
            return f"python -m {name} serve", rest[1:]
        return None
    if tokens[:1] and tokens[0].rsplit("/", 1)[-1] == "vllm" and tokens[1:2] == ["serve"]:
        return "vllm serve", tokens[2:]
    return None


def launch_fields(flags: dict, entrypoint: str, positionals: list, strict: bool, notes: list, unread: list):
    """The speculative settings LaunchArgs names, from the positional model and --speculative-config."""
    positionals = _positional_model(entrypoint, flags, positionals, notes)
    _speculative_config(flags, strict, notes, unread)
    spec = flags.get("speculative_config") if isinstance(flags.get("speculative_config"), dict) else None
    return {"model_path": flags.get("model"), "draft_path": spec.get("model") if spec else None,
            "algorithm": spec.get("method") if spec else None,
            "num_speculative_tokens": int_or_none(spec.get("num_speculative_tokens")) if spec else None,
            "speculative_config": spec}, positionals


def _positional_model(entrypoint: str, flags: dict, positionals: list[str], notes: list[str]):
    if entrypoint.endswith("serve") and positionals:
        if "model" in flags and flags["model"] != positionals[0]:
            notes.append(f"model given as positional {positionals[0]!r} and as --model {flags['model']!r}")
        flags.setdefault("model", positionals[0])
        positionals = positionals[1:]
    return positionals


def _speculative_config(flags: dict, strict: bool, notes: list[str], unread: list[str]) -> None:
    spec = flags.get("speculative_config")
    if spec is not None and not isinstance(spec, dict):
        if "speculative_config" not in unread:     # JSON that parsed, but to a list or a number
            fail_or_note(strict, notes, ServingArgsError("flag --speculative-config", "is not a JSON object",
                                                  expected='{"method": "eagle3", "model": ..., '
                                                           '"num_speculative_tokens": K}', found=repr(spec)[:120]))
            unread.append("speculative_config")
        return
    legacy = {k: flags[k] for k in ("speculative_model", "num_speculative_tokens") if k in flags}
    if legacy:
        notes.append("--speculative-model / --num-speculative-tokens were removed in vLLM #15466 (2025-04-01); "
                     "newer vLLM refuses them: use --speculative-config")
        spec = dict(spec or {})
        spec.setdefault("model", legacy.get("speculative_model"))
        spec.setdefault("num_speculative_tokens", legacy.get("num_speculative_tokens"))
        flags["speculative_config"] = spec

"""Parse a serving launch command (SGLang or vLLM) into the settings it requests.

Accepts what users paste: ``python -m sglang.launch_server ...``, ``sglang serve ...``, ``vllm serve MODEL
--speculative-config '{...}'``, ``python -m vllm.entrypoints.openai.api_server ...``, env prefixes, ``\\`` line
continuations, or a list of args. Unknown flags are kept (``LaunchArgs.unknown``), never dropped.
    args = parse_launch("python -m sglang.launch_server --model-path M --speculative-num-steps 3 ...")
"""
from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Sequence

import pandas as pd

from ..errors import Eagle3Error, ServingArgsError

# flag -> (field name, kind); kind: str int float bool json list. Field names are the engine's own
# (SGLang ServerArgs fields, vLLM EngineArgs fields), so they match /server_info and the rule table.
_S = {
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
_V = {
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


def _table(spec: dict, short=()) -> dict[str, tuple[str, str]]:
    out = {}
    for names, value in spec.items():
        for name in names.split():
            out["--" + name] = value
            if name in short:
                out["-" + name] = value
    return out


FLAGS = {"sglang": _table(_S), "vllm": _table(_V, short=("tp", "dp", "pp", "q", "O"))}  # vLLM's -tp etc.
SPEC_FIELDS = ("speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps",
               "speculative_eagle_topk", "speculative_num_draft_tokens")
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_PYTHON = re.compile(r"^python[0-9.]*(\.exe)?$")
_SHELL_STOP = re.compile(r"^(\||\|\||&&|;|&|\d*>.*|>.*|<.*|\d*>&\d+)$")
_WRAPPERS = {"env", "nohup", "exec", "time", "command", "$"}


@dataclass(frozen=True)
class LaunchArgs:
    """The settings a launch command requests (None = not given); every flag kept, unknown ones listed."""

    engine: str                         # "sglang" or "vllm"
    entrypoint: str                     # how it was started, e.g. "python -m sglang.launch_server"
    model_path: str | None
    draft_path: str | None
    algorithm: str | None               # SGLang --speculative-algorithm / vLLM speculative_config.method
    num_steps: int | None               # SGLang --speculative-num-steps
    topk: int | None                    # SGLang --speculative-eagle-topk
    num_draft_tokens: int | None        # SGLang --speculative-num-draft-tokens (verify width incl. root)
    num_speculative_tokens: int | None  # vLLM speculative_config.num_speculative_tokens (K)
    speculative_config: dict | None     # vLLM --speculative-config, parsed
    flags: dict[str, Any]               # every flag given, by the engine's field name, typed
    unknown: tuple[str, ...] = ()       # flags this parser does not know (their values are in `flags` too)
    env: dict[str, str] = field(default_factory=dict)   # VAR=value given before the command
    positionals: tuple[str, ...] = ()   # stray words that are neither flags nor values
    notes: tuple[str, ...] = ()         # what was read leniently: bad values, repeats, shell redirections
    argv: tuple[str, ...] = ()          # the flag part as tokens (what the engine's argparse would see)
    unread: tuple[str, ...] = ()        # fields whose value could not be read (strict=False): never evidence

    @property
    def speculation_unread(self) -> bool:
        """A speculative setting (algorithm, draft, knobs, vLLM --speculative-config) whose value could not be read:
        nothing about the draft's serving may be decided from this command."""
        return bool(set(self.unread) & (set(SPEC_FIELDS) | {"speculative_config"}))

    def get(self, name: str, default=None):
        """A flag's value by field name (``max_running_requests``) or flag (``--max-running-requests``)."""
        if name.startswith("-"):
            spec = FLAGS.get(self.engine, {}).get(name)
            name = spec[0] if spec else name.lstrip("-").replace("-", "_")
        return self.flags.get(name, default)

    def frame(self) -> pd.DataFrame:
        """One row per flag: field, value, whether this parser knows the flag."""
        known = {spec[0] for spec in FLAGS.get(self.engine, {}).values()}
        rows = [{"field": k, "value": v, "known": k in known} for k, v in self.flags.items()]
        return pd.DataFrame(rows, columns=["field", "value", "known"])


def parse_launch(command: str | Sequence[str], engine: str | None = None, strict: bool = True) -> LaunchArgs:
    """Parse a launch command (string or argv list) into LaunchArgs; strict=False keeps bad values as notes."""
    if engine is not None and engine not in FLAGS:
        raise ServingArgsError("parse_launch(engine=...)", "unknown engine", expected=tuple(FLAGS), found=engine)
    tokens = _tokenize(command)
    env, rest, notes = _strip_prefix(tokens)
    found_engine, entrypoint, rest = _entrypoint(rest, engine)
    rest, dropped = _cut_shell(rest)
    if dropped:
        notes.append(f"ignored shell syntax after the command: {' '.join(dropped)}")
    unread: list[str] = []
    flags, unknown, positionals = _read_flags(rest, found_engine, strict, notes, unread)
    if found_engine == "vllm":
        positionals = _vllm_positional_model(entrypoint, flags, positionals, notes)
        _vllm_spec(flags, strict, notes, unread)
    elif positionals:
        notes.append(f"stray words kept but not understood: {list(positionals)}")
    get = flags.get
    spec = get("speculative_config") if isinstance(get("speculative_config"), dict) else None
    if found_engine == "sglang":
        return LaunchArgs("sglang", entrypoint, get("model_path"), get("speculative_draft_model_path"),
                          get("speculative_algorithm"), _int(get("speculative_num_steps")),
                          _int(get("speculative_eagle_topk")), _int(get("speculative_num_draft_tokens")), None, None,
                          flags, tuple(unknown), env, tuple(positionals), tuple(notes), tuple(rest),
                          tuple(dict.fromkeys(unread)))
    return LaunchArgs("vllm", entrypoint, get("model"), spec.get("model") if spec else None,
                      spec.get("method") if spec else None, None, None, None,
                      _int(spec.get("num_speculative_tokens")) if spec else None, spec,
                      flags, tuple(unknown), env, tuple(positionals), tuple(notes), tuple(rest),
                      tuple(dict.fromkeys(unread)))


def _int(v):
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _tokenize(command) -> list[str]:
    if isinstance(command, (list, tuple)):
        bad = [t for t in command if not isinstance(t, str)]
        if bad:
            raise ServingArgsError("launch command (list)", "every argument must be a string",
                                   expected="a list of str", found=repr(bad[0])[:80])
        return [t for t in command]
    if not isinstance(command, str):
        raise ServingArgsError("launch command", "not a string or a list of arguments",
                               expected="str or list[str]", found=type(command).__name__)
    text = re.sub(r"\\[ \t]*\r?\n", " ", command)      # `\` line continuations
    try:
        return shlex.split(text, comments=False, posix=True)
    except ValueError as e:
        raise ServingArgsError("launch command", "cannot be split into arguments like a shell would",
                               expected="balanced quotes", found=str(e),
                               cause="an unbalanced ' or \" (often around --speculative-config JSON)") from None


def _strip_prefix(tokens: list[str]):
    env, notes, i = {}, [], 0
    while i < len(tokens) and (tokens[i] in _WRAPPERS or _ENV.match(tokens[i])):
        if "=" in tokens[i] and _ENV.match(tokens[i]):
            key, _, value = tokens[i].partition("=")
            env[key] = value
        i += 1
    return env, tokens[i:], notes


def _entrypoint(tokens: list[str], engine: str | None):
    if not tokens:
        raise ServingArgsError("launch command", "is empty", expected="a SGLang or vLLM launch command",
                               found="nothing")
    first = os.path.basename(tokens[0])
    if _PYTHON.match(first):
        i = 1
        while i < len(tokens) and tokens[i].startswith("-") and tokens[i] != "-m":
            i += 2 if tokens[i] in ("-X", "-W") else 1  # python's own options (-u, -O, -X dev, ...)
        if i + 1 < len(tokens) and tokens[i] == "-m":
            module = tokens[i + 1]
            if module.startswith("sglang") and "launch_server" in module:
                return "sglang", f"python -m {module}", tokens[i + 2:]
            if module.startswith("sglang") and tokens[i + 2:i + 3] == ["serve"]:
                return "sglang", f"python -m {module} serve", tokens[i + 3:]
            if module.startswith("vllm.entrypoints"):
                return "vllm", f"python -m {module}", tokens[i + 2:]
            if module in ("vllm", "vllm.entrypoints.cli.main") and tokens[i + 2:i + 3] == ["serve"]:
                return "vllm", f"python -m {module} serve", tokens[i + 3:]
    elif first in ("sglang", "vllm") and tokens[1:2] == ["serve"]:
        return first, f"{first} serve", tokens[2:]
    elif tokens[0].startswith("-"):
        found = engine or _guess_engine(tokens)
        if found:
            return found, "(flags only)", tokens
    raise ServingArgsError("launch command", "not a SGLang or vLLM launch command",
                           expected="python -m sglang.launch_server ..., sglang serve ..., vllm serve MODEL ..., "
                                    "python -m vllm.entrypoints.openai.api_server ..., or flags with engine=",
                           found=" ".join(tokens[:4])[:120],
                           cause="a different program, or a wrapper (docker, srun) in front of the command")


def _guess_engine(tokens: list[str]) -> str | None:
    names = {t.split("=")[0] for t in tokens if t.startswith("-")}
    hits = {e: len(names & set(table)) - len(names & set(FLAGS["vllm" if e == "sglang" else "sglang"]))
            for e, table in FLAGS.items()}
    best = max(hits, key=hits.get)
    return best if hits[best] > 0 else None


def _cut_shell(tokens: list[str]):
    for i, t in enumerate(tokens):
        if _SHELL_STOP.match(t):
            return tokens[:i], tokens[i:]
    return tokens, []


def _looks_like_value(token: str) -> bool:
    return not token.startswith("-") or bool(re.fullmatch(r"-\d+(\.\d*)?([eE][-+]?\d+)?", token))


def _read_flags(tokens: list[str], engine: str, strict: bool, notes: list[str], unread: list[str]):
    table, flags, unknown, positionals, i = FLAGS[engine], {}, [], [], 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if not tok.startswith("-") or tok in ("-", "--"):
            positionals.append(tok)
            continue
        name, eq, inline = tok.partition("=")
        negated = name.startswith("--no-") and name not in table and ("--" + name[5:]) in table
        spec = table.get("--" + name[5:] if negated else name)
        if spec is None and "." in name and engine == "vllm":   # vLLM dotted form: --speculative-config.method x
            head, _, key = name.partition(".")
            if table.get(head, ("", ""))[1] == "json":
                value = inline if eq else (tokens[i] if i < len(tokens) else None)
                i += 0 if eq else 1
                flags.setdefault(table[head][0], {})
                if isinstance(flags[table[head][0]], dict):
                    flags[table[head][0]][key.replace("-", "_")] = _maybe_number(value)
                continue
        if spec is None and name.startswith("--") and len(name) > 3:   # argparse accepts unique prefixes
            hits = {table[k] for k in table if k.startswith(name)}
            if len(hits) == 1:
                spec = hits.pop()
                notes.append(f"{name} read as an abbreviation of the {spec[0]} flag (argparse prefix matching; "
                             "the real parser knows more flags and may find it ambiguous)")
        if spec is None:
            unknown.append(name)
            field_name = name.lstrip("-").replace("-", "_")
            if eq:
                value = inline
            elif i < len(tokens) and _looks_like_value(tokens[i]) and not _SHELL_STOP.match(tokens[i]):
                value, i = tokens[i], i + 1
            else:
                value = True
            _store(flags, field_name, value, notes)
            continue
        field_name, kind = spec
        before = len(notes)
        if kind == "bool":
            value = (not negated) if not eq else _bool(inline, name, strict, notes)
        elif kind == "list":
            if eq:
                items = inline.split(",")
            else:
                items = []
                while i < len(tokens) and _looks_like_value(tokens[i]) and not _SHELL_STOP.match(tokens[i]):
                    items.append(tokens[i])
                    i += 1
            value = [_typed(x, "int", name, strict, notes) for x in items]
        else:
            if eq:
                raw = inline
            elif i < len(tokens) and (_looks_like_value(tokens[i]) or kind == "json"):
                raw, i = tokens[i], i + 1
            else:
                _fail(strict, notes, ServingArgsError(f"flag {name}", "has no value", expected=f"a {kind} value",
                                                      found="nothing", cause="the value was cut off or quoted away"))
                unread.append(field_name)
                continue
            value = _typed(raw, kind, name, strict, notes)
        if len(notes) > before:           # a value kept as text because it could not be typed
            unread.append(field_name)
        _store(flags, field_name, value, notes)
    return flags, unknown, positionals


def _store(flags: dict, name: str, value, notes: list[str]) -> None:
    if name in flags and flags[name] != value:
        notes.append(f"{name} given twice ({flags[name]!r}, then {value!r}): the engine keeps the last")
    flags[name] = value


def _fail(strict: bool, notes: list[str], err: Eagle3Error):
    if strict:
        raise err
    notes.append(str(err))


def _bool(raw: str, name: str, strict: bool, notes: list[str]):
    low = raw.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    _fail(strict, notes, ServingArgsError(f"flag {name}", "is a switch", expected="no value, or true/false",
                                          found=raw))
    return raw


def _maybe_number(value):
    for cast in (int, float):
        try:
            return cast(value)
        except (TypeError, ValueError):
            pass
    return value


def _typed(raw: str, kind: str, name: str, strict: bool, notes: list[str]):
    try:
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
        if kind == "json":
            return json.loads(raw)
    except (ValueError, RecursionError) as e:
        what = {"int": "an integer", "float": "a number", "json": "a JSON object"}[kind]
        cause = ("quote the JSON in single quotes so the shell keeps its double quotes" if kind == "json"
                 else None)
        _fail(strict, notes, ServingArgsError(f"flag {name}", f"value is not {what}", expected=what,
                                              found=repr(raw)[:120], cause=cause or str(e)[:120]))
        return raw
    return raw


def _vllm_positional_model(entrypoint: str, flags: dict, positionals: list[str], notes: list[str]):
    if entrypoint.endswith("serve") and positionals:
        if "model" in flags and flags["model"] != positionals[0]:
            notes.append(f"model given as positional {positionals[0]!r} and as --model {flags['model']!r}")
        flags.setdefault("model", positionals[0])
        positionals = positionals[1:]
    if positionals:
        notes.append(f"stray words kept but not understood: {list(positionals)}")
    return positionals


def _vllm_spec(flags: dict, strict: bool, notes: list[str], unread: list[str]) -> None:
    spec = flags.get("speculative_config")
    if spec is not None and not isinstance(spec, dict):
        if "speculative_config" not in unread:     # JSON that parsed, but to a list or a number
            _fail(strict, notes, ServingArgsError("flag --speculative-config", "is not a JSON object",
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

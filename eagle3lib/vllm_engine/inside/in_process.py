"""Not a script: how the in-process engine scripts (dump.py, draft_calls.py) run, imported from their own folder.

`engine_parser(max_tokens)` holds the options both take; `build_engine(args, spec)` builds vLLM's offline engine the
way both run it (eager, prefix caching off, one sequence at a time; ``--native-rope``: RoPE through vLLM's own
``forward_native``, swapped in before any layer is built, see dump.py). `run_reporting(main, args)` keeps a copy
of stdout for the one JSON line the caller reads, sends everything else the process writes (vLLM's whole log,
tracebacks) to ``args.log``, builds the engine core in this process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``, so hooks on the worker reach it) and turns any failure into
``{"ok": false, "error": ...}`` with exit code 1 (the log keeps the traceback).
"""
import argparse
import json
import os
import sys
import traceback


def engine_parser(max_tokens: int) -> argparse.ArgumentParser:
    """The options of an in-process engine script: models, prompts, where to write, K, lengths, dtype, RoPE."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--prompts", required=True, help="JSON list of {prompt_token_ids: [...]} or {prompt: text}")
    ap.add_argument("--out", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=max_tokens)
    ap.add_argument("--max-model-len", type=int, default=512)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--native-rope", action="store_true",
                    help="RoPE through vLLM's own forward_native instead of the CPU kernel")
    return ap


def build_engine(a, spec: dict):
    """vLLM's offline engine for options `a` and speculative_config `spec`."""
    from vllm import LLM

    if a.native_rope:        # before the engine: CustomOp binds its forward method when each layer is built
        from vllm.model_executor.layers.rotary_embedding.base import RotaryEmbedding
        RotaryEmbedding.forward_cpu = RotaryEmbedding.forward_native
    return LLM(model=a.target, dtype=a.dtype, enforce_eager=True, max_model_len=a.max_model_len,
               enable_prefix_caching=False, max_num_seqs=1, speculative_config=spec)


def run_reporting(main, args) -> None:
    """Call ``main(args, say)``; ``say(obj)`` prints one JSON line to the caller's stdout."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")     # engine core in this process: hooks reach it
    out = os.fdopen(os.dup(1), "w")                                  # our JSON line; vLLM's log goes to --log
    log = open(args.log, "w")
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)

    def say(obj):
        out.write(json.dumps(obj) + "\n")
        out.flush()

    try:
        main(args, say)
    except BaseException as e:   # noqa: BLE001 - the log keeps the traceback; the caller reads it
        traceback.print_exc()
        sys.stderr.flush()
        say({"ok": False, "error": f"{type(e).__name__}: {e}"[:2000]})
        sys.exit(1)

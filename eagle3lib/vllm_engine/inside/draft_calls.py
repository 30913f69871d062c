"""Run in the vLLM venv: every forward call of the EAGLE-3 draft during a real greedy speculative generation.

Builds the offline engine in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, prefix caching off, one request at a
time, as dump.py does) and records, per request, each call of the draft model in the order vLLM makes them:
- ``propose`` (one per engine step): the (T, k*H) aux states the runner handed over, ``token_indices_to_sample``
  (the row each request samples from), ``num_rejected_tokens_gpu`` (padded drafter batch) and ``next_token_ids``;
- each draft forward inside it (a forward pre-hook with kwargs and a forward hook on the draft): ``step`` (0 = the
  first pass over the verified tokens, 1..K-1 = the chained single-token passes), its ``input_ids``, ``positions``,
  the ``hidden_states`` it got (after ``fc`` at step 0: ``combine_hidden_states`` runs in ``propose``), the
  attention metadata of its MLA layer (num_decodes / num_prefills / num_decode_tokens, query_start_loc, seq_lens,
  the context lengths of a prefill with context, the decode kernel's seq_lens, slot_mapping) and its outputs:
  draft-vocab logits for every row (``logits_processor`` + ``lm_head``) and the hidden state it feeds back.
- the request's generated token ids.
``--native-rope``: RoPE through vLLM's ``forward_native`` (see dump.py).
Writes ``req_<n>.safetensors`` (tensors named ``c<j>.<field>`` for call j, ``p<i>.<field>`` for propose i,
``output_ids``) and ``req_<n>.json`` (per call: step, propose index, attention kind and lengths) into --out, the
engine log into --log, and prints one JSON line.
    python draft_calls.py --target T --draft D --prompts prompts.json --out RAW --log engine.log [--max-tokens 48]
"""
import json
import os


def _parse():
    from in_process import engine_parser    # this folder (the script's own) is on sys.path
    ap = engine_parser(max_tokens=48)
    ap.add_argument("--ignore-eos", action="store_true", help="generate --max-tokens whatever the target emits")
    return ap.parse_args()


REC = {"armed": False, "calls": [], "proposes": [], "step": 0}


def _lens(t):
    return None if t is None else [int(x) for x in t.detach().cpu().reshape(-1).tolist()]


def _metadata(md) -> dict:
    """The fields of an MLA attention metadata object that say how the call was run (lists of ints)."""
    if md is None:
        return {"kind": "none"}
    out = {"class": type(md).__name__}
    for name in ("num_reqs", "num_actual_tokens", "max_query_len", "max_seq_len", "num_decodes",
                 "num_decode_tokens", "num_prefills"):
        v = getattr(md, name, None)
        out[name] = int(v) if v is not None else None
    out["query_start_loc"] = _lens(getattr(md, "query_start_loc", None))
    out["seq_lens"] = _lens(getattr(md, "seq_lens", None))
    dec, pre = getattr(md, "decode", None), getattr(md, "prefill", None)
    out["decode_seq_lens"] = _lens(dec.seq_lens) if dec is not None else None
    out["prefill_query_start_loc"] = _lens(pre.query_start_loc) if pre is not None else None
    ctx = pre.chunked_context if pre is not None else None
    out["context_lens"] = [int(x) for x in ctx.context_lens_list] if ctx is not None else None
    kinds = []
    if out["num_decodes"]:
        kinds.append("decode")
    if out["num_prefills"]:
        kinds.append("prefill+context" if ctx is not None else "prefill")
    out["kind"] = "+".join(kinds) or "empty"
    return out


def _install(worker):
    """Runs inside the worker: wrap the drafter's propose and hook the draft model's forward."""
    import torch
    from vllm.forward_context import get_forward_context

    runner = worker.model_runner
    drafter = runner.drafter
    draft = drafter.model
    orig = drafter.propose

    def propose(*args, **kw):
        if REC["armed"]:
            REC["step"] = 0
            tis, rej = kw.get("token_indices_to_sample"), kw.get("num_rejected_tokens_gpu")
            REC["proposes"].append({
                "aux": kw["target_hidden_states"].detach().clone().cpu(),
                "target_token_ids": kw["target_token_ids"].detach().clone().cpu().long(),
                "target_positions": kw["target_positions"].detach().clone().cpu().long(),
                "next_token_ids": kw["next_token_ids"].detach().clone().cpu().long().reshape(-1),
                "token_indices_to_sample": None if tis is None else tis.detach().clone().cpu().long(),
                "num_rejected": None if rej is None else rej.detach().clone().cpu().long()})
        return orig(*args, **kw)

    def pre(_module, args, kwargs):
        if not REC["armed"]:
            return
        names = ("input_ids", "positions", "hidden_states")
        got = dict(zip(names, args)) | {k: kwargs[k] for k in names if k in kwargs}
        ctx = get_forward_context()
        md = ctx.attn_metadata
        if isinstance(md, list):
            md = md[0] if md else None
        if isinstance(md, dict):
            md = next(iter(md.values()), None)
        slot = ctx.slot_mapping
        if isinstance(slot, dict):
            slot = next(iter(slot.values()), None)
        n = int(got["positions"].shape[-1])
        REC["pending"] = {
            "step": REC["step"], "propose": len(REC["proposes"]) - 1, "meta": _metadata(md),
            "input_ids": got["input_ids"].detach().clone().cpu().long(),
            "positions": got["positions"].detach().clone().cpu().long(),
            "hidden_in": got["hidden_states"].detach().clone().cpu(),
            "slot_mapping": None if slot is None else slot.detach().clone().cpu().long().reshape(-1)[:n]}
        REC["step"] += 1

    def post(module, _args, _kwargs, output):
        if not REC["armed"] or "pending" not in REC:
            return
        call = REC.pop("pending")
        last, fed = output if isinstance(output, tuple) else (output, output)
        with torch.no_grad():
            call["logits"] = module.logits_processor(module.lm_head, last).detach().clone().cpu().float()
        call["hidden_out"] = fed.detach().clone().cpu()
        REC["calls"].append(call)

    drafter.propose = propose
    draft.register_forward_pre_hook(pre, with_kwargs=True)
    draft.register_forward_hook(post, with_kwargs=True)
    return {"drafter": type(drafter).__name__, "draft_class": type(draft).__name__,
            "runner_class": type(runner).__name__,
            "padded_drafter_batch": not bool(runner.vllm_config.speculative_config.disable_padded_drafter_batch)}


def record_calls(a, say):
    import torch
    import vllm
    from safetensors.torch import save_file
    from vllm import SamplingParams

    from in_process import build_engine
    prompts = json.load(open(a.prompts))
    spec = {"method": "eagle3", "model": a.draft, "num_speculative_tokens": a.k}
    llm = build_engine(a, spec)
    info = llm.collective_rpc(_install)[0]
    os.makedirs(a.out, exist_ok=True)
    files = []
    for n, p in enumerate(prompts):
        REC["calls"], REC["proposes"] = [], []
        REC["armed"] = True
        res = llm.generate([p], SamplingParams(max_tokens=a.max_tokens, temperature=0.0, ignore_eos=a.ignore_eos),
                           use_tqdm=False)
        REC["armed"] = False
        t = {"output_ids": torch.tensor(list(res[0].outputs[0].token_ids), dtype=torch.long),
             "prompt_ids": torch.tensor(list(res[0].prompt_token_ids), dtype=torch.long)}
        calls = []
        for j, c in enumerate(REC["calls"]):
            for key in ("input_ids", "positions", "hidden_in", "slot_mapping", "logits", "hidden_out"):
                if c[key] is not None:
                    t[f"c{j}.{key}"] = c[key].contiguous()
            calls.append({"step": c["step"], "propose": c["propose"], **c["meta"]})
        for i, pr in enumerate(REC["proposes"]):
            for key, v in pr.items():
                if v is not None:
                    t[f"p{i}.{key}"] = v.contiguous()
        name = f"req_{n:05d}"
        save_file(t, os.path.join(a.out, name + ".safetensors"))
        with open(os.path.join(a.out, name + ".json"), "w") as f:
            json.dump({"calls": calls, "proposes": len(REC["proposes"])}, f)
        files.append(name)
    say({"ok": True, "version": vllm.__version__, "files": files, "speculative_config": spec,
         "rope": "forward_native" if a.native_rope else "engine default", **info})


if __name__ == "__main__":
    from in_process import run_reporting    # this folder (the script's own) is on sys.path
    run_reporting(record_calls, _parse())

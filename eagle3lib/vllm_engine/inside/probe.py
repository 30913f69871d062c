"""Ask the installed vLLM what it makes of EAGLE-3 drafts beside their targets, from vLLM's own functions.

Runs in the vLLM venv (never in eagle3lib's): ``python probe.py --jobs jobs.json``, where jobs.json is a list of
{"draft", "target", "method" (None: vLLM infers it), "num_speculative_tokens", "max_model_len", "dtype"}. For each
job it builds vLLM's engine config (`EngineArgs.create_engine_config`, no weights), asks both model runners which
aux layer ids they read (V1 `GPUModelRunner._get_eagle3_aux_layers_from_config`, V2 `eagle3_utils.
get_eagle3_aux_layers_from_config`), builds the target and the draft on the meta device (`initialize_model`) and
runs the draft's own `load_weights` on meta tensors shaped from the checkpoint's safetensors header, then the
proposer's embedding / lm_head sharing. Nothing is re-implemented: every answer is what a vLLM call returned or
raised. The last stdout line is one JSON object {"vllm_version", "answers": [...]}; a stage that raises is an
answer ({"stage", "type", "message"}), never a crash. Imports only vLLM, torch and the standard library.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import struct
import sys
import tempfile
import traceback
from pathlib import Path
from types import SimpleNamespace

import torch

DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
          "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2}


class LogTap:
    """Collects vLLM's own log lines while one job runs (the evidence a notebook quotes). vLLM re-runs dictConfig
    whenever it configures logging (dropping any handler added before), so the tap sits in the record factory,
    which vLLM wraps rather than replaces."""

    def __init__(self):
        self.lines: list[str] = []
        self._inner = logging.getLogRecordFactory()
        logging.setLogRecordFactory(self._record)

    def _record(self, *args, **kwargs):
        rec = self._inner(*args, **kwargs)
        if rec.name.startswith("vllm") and rec.levelno >= logging.INFO:
            self.lines.append(f"{rec.levelname} {rec.name}: {rec.getMessage()}"[:400])
        return rec

    def take(self) -> list[str]:
        out, self.lines = self.lines, []
        return out


def failure(stage: str, exc: BaseException) -> dict:
    """A stage's exception as data: its type, message and the vLLM frame that raised it."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "site-packages/vllm" in f.filename]
    where = f"{frames[-1].filename.split('site-packages/')[-1]}:{frames[-1].lineno}" if frames else ""
    return {"stage": stage, "type": type(exc).__name__, "message": str(exc)[:1200], "raised_at": where}


def read_header(folder: str) -> tuple[dict, str]:
    """{key: (shape, dtype string)} from every safetensors file of a draft folder (headers only), and the text
    the cache key is made of."""
    out, raw = {}, []
    for f in sorted(Path(folder).glob("*.safetensors")):
        with open(f, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            text = fh.read(n).decode("utf-8")
        raw.append(text)
        for k, v in json.loads(text).items():
            if k != "__metadata__":
                out[k] = (tuple(v["shape"]), v["dtype"])
    return out, "".join(raw)


def engine_config(job: dict):
    """vLLM's own VllmConfig for the job (no weights are read)."""
    from vllm.engine.arg_utils import EngineArgs
    spec = {"model": job["draft"], "num_speculative_tokens": job.get("num_speculative_tokens", 3)}
    if job.get("method"):
        spec["method"] = job["method"]
    kw = {"max_model_len": job["max_model_len"]} if job.get("max_model_len") else {}
    return EngineArgs(model=job["target"], speculative_config=spec, dtype=job.get("dtype") or "float32",
                      enforce_eager=True, **kw).create_engine_config()


def runner_answer(vc) -> dict:
    """Which model runner this build would use, and why (the property vLLM itself consults)."""
    import vllm.envs as envs
    from vllm.triton_utils import HAS_TRITON
    use_v2 = vc.use_v2_model_runner
    unsupported = list(vc._get_v2_model_runner_unsupported_features()) if HAS_TRITON else []
    if envs.VLLM_USE_V2_MODEL_RUNNER is not None:
        why = f"VLLM_USE_V2_MODEL_RUNNER={int(envs.VLLM_USE_V2_MODEL_RUNNER)}"
    elif not HAS_TRITON:
        why = "no Triton on this platform (Model Runner V2 requires Triton)"
    elif unsupported:
        why = "V2 does not support " + ", ".join(unsupported)
    else:
        why = "V2 is the default where Triton works"
    return {"in_use": "v2" if use_v2 else "v1", "why": why, "has_triton": bool(HAS_TRITON),
            "v2_unsupported": unsupported}


def keys_holding(hf, ids, keys) -> list[str]:
    """The config keys among `keys` (dotted: "eagle_config.layer_ids"; the job's list, eagle3lib's table) whose
    value equals the ids a runner returned (which key it read them from). A nested key is also looked up under
    dflash_config, where DFlash drafts keep the same names."""
    if ids is None:
        return []
    split = [key.rpartition(".")[::2] for key in keys]
    cands = [(leaf, getattr(hf, leaf, None)) for sect, leaf in split if not sect]
    for sect in dict.fromkeys([s for s, _ in split if s] + ["dflash_config"]):
        d = getattr(hf, sect, None)
        if isinstance(d, dict):
            cands += [(f"{sect}.{leaf}", d.get(leaf)) for leaf in dict.fromkeys(lf for s, lf in split if s)]
    return list(dict.fromkeys(k for k, v in cands if isinstance(v, (list, tuple)) and tuple(v) == tuple(ids)))


def ids_answer(vc, keys) -> dict:
    """The aux layer ids V1 and V2 read from the draft config (None: the target's default is used), and which of
    `keys` held them."""
    from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import get_eagle3_aux_layers_from_config
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    sc = vc.speculative_config
    hf = sc.draft_model_config.hf_config
    v1 = GPUModelRunner._get_eagle3_aux_layers_from_config(SimpleNamespace(speculative_config=sc))
    v2 = get_eagle3_aux_layers_from_config(sc)
    return {"v1": list(v1) if v1 else None, "v1_key": keys_holding(hf, v1, keys),
            "v2": list(v2) if v2 else None, "v2_key": keys_holding(hf, v2, keys)}


def aux_answer(vc) -> dict:
    """Whether the V1 runner captures aux states for this draft: it asks the proposer
    (`SpecDecodeBaseProposer._get_eagle3_use_aux_hidden_state_from_config`, gpu_model_runner.py:643-648); False
    means the draft gets the target's last hidden state and no aux layer is set on the target (:5231)."""
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer
    sc = vc.speculative_config
    me = SimpleNamespace(method=sc.method, draft_model_config=sc.draft_model_config)
    return {"v1": bool(SpecDecodeBaseProposer._get_eagle3_use_aux_hidden_state_from_config(me))}


def setup_parallel(vc, state: dict) -> None:
    """A one-process world (gloo, once per probe process) and this job's model-parallel groups (vLLM creates the
    expert-parallel group only for an MoE model, so the groups are rebuilt for every job)."""
    from vllm.config import set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.distributed.parallel_state import destroy_model_parallel, model_parallel_is_initialized
    with set_current_vllm_config(vc):
        if not state.get("dist"):
            init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                         distributed_init_method=f"file://{state['tmp']}/dist_init")
            state["dist"] = True
        if model_parallel_is_initialized():
            destroy_model_parallel()
        initialize_model_parallel(1, 1)


def build(vc):
    """The target and the draft as vLLM builds them, on the meta device (no memory, no weights)."""
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader.utils import initialize_model
    with set_current_vllm_config(vc), torch.device("meta"):
        tgt = initialize_model(vllm_config=vc)
        d = initialize_model(vllm_config=vc, model_config=vc.speculative_config.draft_model_config)
    return tgt, d


def draft_answer(d) -> dict:
    """fc and its flags as the draft model built them."""
    m = getattr(d, "model", d)
    fc = getattr(m, "fc", None)
    fc_norm = getattr(m, "fc_norm", None)
    return {"class": type(d).__name__, "module": type(d).__module__,
            "num_layers": len(getattr(m, "layers", []) or []),
            "use_aux_hidden_state": getattr(m, "use_aux_hidden_state", None),
            "fc_slots": getattr(m, "num_aux_hidden_states", getattr(m, "num_aux_layers", None)),
            "fc_input_size": getattr(m, "fc_input_size", None),
            "fc_weight_shape": list(fc.weight.shape) if fc is not None else None,
            "norm_before_fc": getattr(m, "norm_before_fc", None),
            "input_norm": getattr(m, "input_norm", None) is not None,
            "fc_norm": None if fc_norm is None else len(fc_norm),
            "norm_output": getattr(m, "norm_output", None),
            "norm_before_residual": _residual_norm_first(m),
            "d2t_param": getattr(d, "draft_id_to_target_id", None) is not None,
            "rope": rope_answer(d)}


def rope_answer(d) -> dict | None:
    """The rotary embedding the first draft layer built: its class, base, cache length and the softmax scale."""
    m = getattr(d, "model", d)
    layers = getattr(m, "layers", None) or []
    att = getattr(layers[0], "self_attn", None) if len(layers) else None
    rot = getattr(att, "rotary_emb", None)
    if rot is None:
        return None
    params = getattr(getattr(d, "config", None), "rope_parameters", None) or {}
    return {"class": type(rot).__name__, "base": getattr(rot, "base", None),
            "max_position": getattr(rot, "max_position_embeddings", None),
            "is_neox_style": getattr(rot, "is_neox_style", None),
            "rope_type": params.get("rope_type") if isinstance(params, dict) else None,
            "softmax_scale": getattr(att, "scaling", None)}


def _residual_norm_first(m) -> bool | None:
    """Whether the first draft layer normalises the hidden state before taking it as the residual."""
    layers = getattr(m, "layers", None) or []
    fn = getattr(layers[0], "_residual_norm", None) if len(layers) else None
    return None if fn is None else getattr(fn, "__name__", "") == "_norm_before_residual"


def load_answer(d, header: dict) -> dict:
    """Run the draft's own load_weights on meta tensors; which checkpoint keys reach which parameter."""
    from vllm.model_executor.model_loader.weight_utils import default_weight_loader
    tensors = {k: torch.empty(shape, dtype=DTYPES.get(dt, torch.float32), device="meta")
               for k, (shape, dt) in header.items()}
    by_id = {id(t): k for k, t in tensors.items()}
    got: dict[str, list[str]] = {}
    for pname, p in d.named_parameters():
        orig = getattr(p, "weight_loader", default_weight_loader)

        def tap(param, loaded, *a, _orig=orig, _name=pname, **kw):
            # MLA / stacked loads may pass a slice: its base tensor is still the checkpoint's
            src = by_id.get(id(loaded)) or by_id.get(id(getattr(loaded, "_base", None)))
            got.setdefault(_name, []).append(src or "?")
            return _orig(param, loaded, *a, **kw)
        p.weight_loader = tap
    error = None
    try:
        d.load_weights(iter(tensors.items()))
    except Exception as e:           # noqa: BLE001 - the refusal is the answer
        error = failure("load", e)
    loaded = {src: pname for pname, srcs in got.items() for src in srcs if src != "?"}
    return {"loaded": loaded, "not_loaded": sorted(k for k in header if k not in loaded),
            "params_filled": sorted(got), "params_unfilled": sorted(n for n, _ in d.named_parameters() if n not in got),
            "error": error,
            "d2t_filled": "draft_id_to_target_id" in got,
            "has_own_embed_tokens": getattr(d, "has_own_embed_tokens", None),
            "has_own_lm_head": getattr(d, "has_own_lm_head", None)}


def share_answer(d, tgt, vc) -> dict:
    """The proposer's own embedding / lm_head sharing run on the built models, and the head the draft then uses.
    A draft that ships its own copy is compared with the target's by value (torch.equal) at load, which meta
    tensors cannot answer: that decision is reported as None."""
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer
    # the proposer's own attributes these two methods read (the rest of the proposer is never built)
    me = SimpleNamespace(model=d, vllm_config=vc, use_local_argmax_reduction=False)
    out = {"embed_shared": None, "lm_head_shared": None, "error": None}
    try:
        if getattr(d, "has_own_embed_tokens", True) is False:
            SpecDecodeBaseProposer._maybe_share_embeddings(me, tgt)
            out["embed_shared"] = d.model.embed_tokens is tgt.model.embed_tokens
        if getattr(d, "has_own_lm_head", True) is False:
            SpecDecodeBaseProposer._maybe_share_lm_head(me, tgt)
            out["lm_head_shared"] = d.lm_head is tgt.lm_head
    except Exception as e:           # noqa: BLE001 - a refusal is the answer
        out["error"] = failure("share", e)
    head = getattr(d, "lm_head", None)
    out["lm_head_vocab"] = getattr(head, "org_vocab_size", None)
    out["logit_columns_kept"] = getattr(getattr(d, "logits_processor", None), "org_vocab_size", None)
    return out


def vocab_context(vc) -> dict:
    sc = vc.speculative_config
    hf = sc.draft_model_config.hf_config
    return {"draft_vocab_size": getattr(hf, "draft_vocab_size", None) or getattr(hf, "vocab_size", None),
            "draft_full_vocab": getattr(hf, "vocab_size", None), "target_vocab": vc.model_config.get_vocab_size(),
            "draft_max_model_len": sc.draft_model_config.max_model_len,
            "draft_max_position_embeddings": getattr(hf, "max_position_embeddings", None),
            "target_max_model_len": vc.model_config.max_model_len,
            "target_max_position_embeddings": getattr(vc.model_config.hf_config, "max_position_embeddings", None)}


def probe_one(job: dict, state: dict) -> dict:
    """Every stage for one job; the first stage that raises ends it, recorded as `error`."""
    tap = state["tap"]
    tap.take()
    ans: dict = {"job": job, "error": None}
    try:
        header, _ = read_header(job["draft"])
        try:
            vc = engine_config(job)
        except Exception as e:       # noqa: BLE001 - a config vLLM refuses is an answer
            ans["error"] = failure("config", e)
            return ans
        sc = vc.speculative_config
        ans["runner"] = runner_answer(vc)
        ans["method"] = sc.method
        ans["num_speculative_tokens"] = sc.num_speculative_tokens
        ans["draft_architectures"] = list(sc.draft_model_config.architectures or [])
        ans["vocab_context"] = vocab_context(vc)
        if sc.method not in ("eagle", "eagle3"):
            return ans                   # not an EAGLE head: nothing EAGLE-3 to build
        ans["ids"] = ids_answer(vc, job["id_keys"])
        setup_parallel(vc, state)
        try:
            tgt, d = build(vc)
        except Exception as e:       # noqa: BLE001
            ans["error"] = failure("build", e)
            return ans
        ans["ids"]["default"] = list(tgt.get_eagle3_default_aux_hidden_state_layers())
        ans["aux_states"] = aux_answer(vc)
        chosen = ans["ids"][ans["runner"]["in_use"]]
        if ans["runner"]["in_use"] == "v1" and not ans["aux_states"]["v1"]:
            ans["ids"]["used"] = []          # the V1 runner sets no aux layers on the target (:5231)
        else:
            tgt.set_aux_hidden_state_layers(tuple(chosen) if chosen else tuple(ans["ids"]["default"]))
            ans["ids"]["used"] = list(tgt.model.aux_hidden_state_layers)
        ans["target_class"] = type(tgt).__name__
        ans["draft"] = draft_answer(d)
        ans["load"] = load_answer(d, header)
        ans["share"] = share_answer(d, tgt, vc)
    except Exception as e:           # noqa: BLE001 - an unexpected failure is still an answer
        ans["error"] = failure("probe", e)
    finally:
        ans["log"] = [ln for ln in tap.take() if "eagle" in ln.lower() or "draft" in ln.lower()
                      or "auxiliary" in ln.lower() or "speculat" in ln.lower()][:40]
    return ans


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", required=True, help="a JSON file: a list of probe jobs")
    a = ap.parse_args(argv)
    jobs = json.loads(Path(a.jobs).read_text())
    tap = LogTap()
    import vllm
    with tempfile.TemporaryDirectory() as tmp:
        state = {"tmp": tmp, "tap": tap}
        answers = [probe_one(job, state) for job in jobs]
    sys.stdout.flush()
    print(json.dumps({"vllm_version": vllm.__version__, "python": sys.executable, "answers": answers},
                     default=str))
    sys.stdout.flush()
    os._exit(0)                          # skip vLLM's atexit teardown of the gloo group (slow, noisy)


if __name__ == "__main__":
    sys.exit(main())

"""eagle3lib's in-process hook for the real SGLang: put this folder on PYTHONPATH of an SGLang server (the driver
does, sglang_engine.serve) and every process of it imports this file at start-up. It never imports eagle3lib.

With $EAGLE3LIB_SGLANG_HOOK_OUT set to a folder, it watches SGLang's own code as it runs and writes what it saw:
- ``events.jsonl``: one JSON line per event: the draft's weights as its ``load_weights`` took them (each checkpoint
  key, and whether a parameter loader took it), the draft's modules (fc width, aux slots, norms, lm_head, d2t),
  the parameters left with all-zero rows once loaded,
  whether the target's embedding / lm_head replaced the draft's (``set_embed`` / ``set_embed_and_head``), and the
  target layers SGLang captures for the draft (``set_eagle3_layers_to_capture``: the ids given, the layers kept);
- ``calls/<pid>_<n>.safetensors``: the tensor handed to the draft's fc at each prefill (forward mode EXTEND:
  ``aux`` (T, k*H) float32, the draft's ``input_ids`` (T,) as SGLang shifted them, ``positions`` (T,),
  ``extend_seq_lens`` (B,)), at most $EAGLE3LIB_SGLANG_HOOK_MAX_CALLS (default 64) files per process.
With $EAGLE3LIB_HIDE_AMX=1 the process is told the CPU has no AMX tiles (torch.cpu._is_amx_tile_supported, which
SGLang's probe reads): with ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 the engine runs as on a CPU without AMX.
Nothing here changes what SGLang computes; a module whose code differs from what the patches expect is left
alone and an event says so.
"""
import importlib.abc
import importlib.util
import json
import os
import sys
import threading

OUT = os.environ.get("EAGLE3LIB_SGLANG_HOOK_OUT", "")
MAX_CALLS = int(os.environ.get("EAGLE3LIB_SGLANG_HOOK_MAX_CALLS", "64") or 64)
_LOCK = threading.Lock()
_CALLS = [0]


def _event(kind, **fields):
    rec = {"event": kind, "pid": os.getpid(), **fields}
    with _LOCK, open(os.path.join(OUT, "events.jsonl"), "a", encoding="utf-8") as f:
        f.write(json.dumps(rec, default=str) + "\n")


def _zero_rows(model):
    """{parameter: [rows all zero, rows]} of each 2-D parameter with a row left all zero after loading (a trained
    matrix has none: SGLang's CPU loader zero-pads a shard the checkpoint holds shorter than the config sizes it)."""
    out = {}
    for name, p in model.named_parameters():
        if p.dim() == 2 and p.shape[0] and p.is_floating_point():
            z = int((p.detach().count_nonzero(dim=1) == 0).sum())
            if z:
                out[name] = [z, int(p.shape[0])]
    return out


def _draft_model_patch(module):
    """sglang.srt.models.llama_eagle3 (and files of the same shape): the fc input, the weights, embed / head."""
    model_cls = getattr(module, "LlamaModel", None)
    causal_cls = next((getattr(module, n) for n in ("LlamaForCausalLMEagle3", "KimiK25ForCausalLMEagle3")
                       if hasattr(module, n)), None)
    if model_cls is None or causal_cls is None:
        _event("hook_skipped", module=module.__name__, why="no LlamaModel / *ForCausalLMEagle3 class")
        return
    forward = model_cls.forward

    def forward_hooked(self, input_ids, positions, forward_batch, *args, **kwargs):
        try:
            _record_fc_input(self, input_ids, positions, forward_batch)
        except Exception as e:  # noqa: BLE001 - the hook must never break the engine
            _event("hook_error", where="fc input", error=f"{type(e).__name__}: {e}")
        return forward(self, input_ids, positions, forward_batch, *args, **kwargs)

    model_cls.forward = forward_hooked
    load = causal_cls.load_weights

    def load_hooked(self, weights):
        taken = [0]
        loaders = {}

        def counting(fn):
            def wrapped(*a, **k):
                taken[0] += 1
                return fn(*a, **k)
            return wrapped

        for _, p in self.named_parameters():
            if hasattr(p, "weight_loader"):
                loaders[id(p)] = p.weight_loader
                p.weight_loader = counting(p.weight_loader)
        default = getattr(module, "default_weight_loader", None)
        if default is not None:
            module.default_weight_loader = counting(default)
        rows = []

        def settle():
            if rows and "_before" in rows[-1]:
                rows[-1]["loaded"] = taken[0] > rows[-1].pop("_before")

        def watched():
            # a key's loader runs after the generator hands the key over and before the next key is asked for
            for name, w in weights:
                settle()
                rows.append({"key": name, "shape": list(w.shape), "dtype": str(w.dtype), "_before": taken[0]})
                yield name, w
            settle()

        try:
            out = load(self, watched())
            settle()
        finally:
            if default is not None:
                module.default_weight_loader = default
            for _, p in self.named_parameters():
                if id(p) in loaders:
                    p.weight_loader = loaders[id(p)]
        inner = getattr(self, "model", None)
        fc = getattr(inner, "fc", None)
        hot = getattr(self, "hot_token_id", None)
        _event("draft_loaded", model_class=type(self).__name__, keys=rows,
               params=sorted(n for n, _ in self.named_parameters()), zero_rows=_zero_rows(self),
               fc_in_features=getattr(fc, "in_features", None),
               num_aux_hidden_states=getattr(inner, "num_aux_hidden_states", None),
               norm_before_fc=getattr(inner, "input_norm", None) is not None,
               fc_norm=getattr(inner, "fc_norm", None) is not None,
               norm_output=bool(getattr(inner, "norm_output", False)),
               load_lm_head_from_target=bool(getattr(self, "load_lm_head_from_target", False)),
               tie_word_embeddings=bool(getattr(self.config, "tie_word_embeddings", False)),
               lm_head_rows=int(getattr(getattr(self, "lm_head", None), "weight", None).shape[0])
               if getattr(getattr(self, "lm_head", None), "weight", None) is not None else None,
               d2t_read=hot is not None, hot_token_ids=hot.tolist() if hot is not None and hot.numel() <= 4096
               else None)
        return out

    causal_cls.load_weights = load_hooked
    for name in ("set_embed", "set_embed_and_head"):
        orig = getattr(causal_cls, name, None)
        if orig is None:
            continue

        def make(orig, name):
            def hooked(self, *args, **kwargs):
                inner = getattr(self, "model", None)
                own = getattr(getattr(inner, "embed_tokens", None), "weight", None)
                out = orig(self, *args, **kwargs)
                after = getattr(getattr(inner, "embed_tokens", None), "weight", None)
                _event(name, draft_embedding_replaced=own is not None and after is not None
                       and after.data_ptr() != own.data_ptr(),
                       lm_head_replaced=name == "set_embed_and_head")
                return out
            return hooked

        setattr(causal_cls, name, make(orig, name))
    _event("hook_installed", module=module.__name__)


def _record_fc_input(model, input_ids, positions, forward_batch):
    spec = getattr(forward_batch, "spec_info", None)
    hidden = getattr(spec, "hidden_states", None)
    mode = getattr(forward_batch, "forward_mode", None)
    if hidden is None or mode is None or not mode.is_extend() or getattr(mode, "is_draft_extend_v2", None) and \
            mode.is_draft_extend_v2():
        return
    if _CALLS[0] >= MAX_CALLS:      # a prefill's draft extend carries the target's states, aux or not (no fc)
        return
    from safetensors.torch import save_file   # the SGLang venv has it (transformers needs it)
    _CALLS[0] += 1
    lens = getattr(forward_batch, "extend_seq_lens", None)
    tensors = {"aux": hidden.detach().float().cpu().contiguous(),
               "input_ids": input_ids.detach().long().cpu().contiguous(),
               "positions": positions.detach().long().cpu().contiguous()}
    if lens is not None:
        tensors["extend_seq_lens"] = lens.detach().long().cpu().contiguous()
    os.makedirs(os.path.join(OUT, "calls"), exist_ok=True)
    name = f"{os.getpid()}_{_CALLS[0]:05d}.safetensors"
    save_file(tensors, os.path.join(OUT, "calls", name), metadata={"forward_mode": str(mode)})


def _target_patch(module):
    """A target model file (llama, qwen2, qwen3, deepseek_v2, ...): which layers it captures for the draft."""
    for cls in [c for c in vars(module).values() if isinstance(c, type) and "set_eagle3_layers_to_capture" in vars(c)]:
        orig = cls.set_eagle3_layers_to_capture

        def make(orig, cls):
            def hooked(self, layer_ids=None, *args, **kwargs):
                out = orig(self, layer_ids, *args, **kwargs)
                kept = getattr(getattr(self, "model", None), "layers_to_capture", None)
                _event("target_capture", target_class=cls.__name__, module=module.__name__,
                       layer_ids=list(layer_ids) if layer_ids is not None else None,
                       layers_to_capture=list(kept) if kept is not None else None,
                       num_layers=getattr(self.config, "num_hidden_layers", None))
                return out
            return hooked

        cls.set_eagle3_layers_to_capture = make(orig, cls)


DRAFT_MODULES = ("sglang.srt.models.llama_eagle3", "sglang.srt.models.kimi_k25_eagle3")
TARGET_MODULES = ("sglang.srt.models.llama", "sglang.srt.models.qwen2", "sglang.srt.models.qwen3",
                  "sglang.srt.models.deepseek_v2", "sglang.srt.models.qwen3_moe", "sglang.srt.models.gpt_oss")


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs a patch on a module right after SGLang's own code for it ran."""

    def __init__(self, patches):
        self.patches = patches

    def find_spec(self, name, path, target=None):
        if name not in self.patches:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _PatchedLoader(spec.loader, self.patches[name])
                return spec
        return None


class _PatchedLoader(importlib.abc.Loader):
    def __init__(self, loader, patch):
        self.loader, self.patch = loader, patch

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        try:
            self.patch(module)
        except Exception as e:  # noqa: BLE001
            _event("hook_error", where=module.__name__, error=f"{type(e).__name__}: {e}")


if os.environ.get("EAGLE3LIB_HIDE_AMX") == "1":
    import torch
    torch.cpu._is_amx_tile_supported = lambda: False      # what SGLang's cpu_has_amx_support reads

if OUT:
    os.makedirs(OUT, exist_ok=True)
    sys.meta_path.insert(0, _AfterImport({**{m: _draft_model_patch for m in DRAFT_MODULES},
                                          **{m: _target_patch for m in TARGET_MODULES}}))

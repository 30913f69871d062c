"""Where an HF causal LM keeps its decoder stack: the module called on token ids, its layers and the final norm.

Llama, Qwen3, Qwen3-MoE, DeepSeek-V3 / Kimi-K2, gpt-oss and VLM wrappers (DECODER_PATHS). Usage:
    base, layers, norm = decoder_stack(model)
"""
from __future__ import annotations

import torch

from ..errors import LayoutError

# Where causal LMs keep their decoder stack (a module with `layers` and a final `norm`), first match wins:
# Llama / Qwen3 / Qwen3-MoE / DeepSeek-V3 / gpt-oss `XxxForCausalLM.model`; VLM wrappers (Kimi-K2.5's
# `Kimi_K25ForConditionalGeneration.model.language_model`, Llava-style `language_model.model`); a bare decoder.
DECODER_PATHS = ("model", "model.language_model", "language_model.model", "language_model", "")


def _submodule(model, path: str):
    for part in path.split(".") if path else ():
        model = getattr(model, part, None)
        if model is None:
            return None
    return model


def decoder_stack(model):
    """(decoder, layers, final norm) of an HF causal LM: the module called on token ids, its decoder layers (each
    called on the residual stream) and the norm applied after the last one (paths in DECODER_PATHS)."""
    for path in DECODER_PATHS:
        base = _submodule(model, path)
        if base is not None and isinstance(getattr(base, "layers", None), torch.nn.ModuleList) \
                and isinstance(getattr(base, "norm", None), torch.nn.Module):
            return base, base.layers, base.norm
    raise LayoutError(f"target model {type(model).__name__}", "no decoder stack found",
                      expected=" or ".join(f"{p + '.' if p else ''}{{layers, norm}}" for p in DECODER_PATHS),
                      found=f"children {[n for n, _ in model.named_children()][:8]}",
                      cause="an architecture whose decoder stack is named differently (e.g. GPT-2's transformer.h)")

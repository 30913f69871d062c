"""Names for the residual-stream boundaries of a target model, and layer-id conventions.

A *layout* is the ordered tuple of boundaries a draft's aux slots hold, e.g. the seed's training layout
``("embed", "layer_in.4", "layer_in.32", "layer_in.60")`` for [embed, out L3, out L31, out L59].

Boundary names (L = number of target decoder layers):
    embed           embedding output = input of layer 0 = HF ``hidden_states[0]``
    layer_in.i      input of layer i = raw (pre-norm) output of layer i-1 = HF ``hidden_states[i]``, 1 <= i < L
    final_prenorm   raw output of the last layer (what engines capture at id L)
    final_postnorm  final-norm output = HF ``hidden_states[L]`` (what SpecForge stores as ``hidden_state``)

Layer-id conventions (eagle3-formats.md §4):
    "input"   capture-before index (vLLM, speculators, EAGLE, SGLang's internal list): 0 = embed, L = final pre-norm
    "output"  output-of-layer id (SGLang/SpecForge draft configs, ModelOpt): id j = input of layer j+1; -1 = embed
    "hf"      index into HF ``output_hidden_states``: like "input" but L = final POST-norm
"""
from __future__ import annotations

import operator
import re

from .errors import LayoutError

CONVENTIONS = ("input", "output", "hf")
ZERO = "zeros"     # a slot name meaning "fed zeros" (what a server feeds for a slot it lacks)
NOT_CAPTURED = "never captured"   # a slot an engine's ids capture nothing for (an index outside its layer loop)
_LAYER_IN = re.compile(r"^layer_in\.(\d+)$")
_ALIASES = re.compile(r"^(?:layer_out|out)\.(\d+)$")


def boundary_names(num_layers: int) -> list[str]:
    """Every residual-stream boundary of an L-layer target, in stream order."""
    return ["embed"] + [f"layer_in.{i}" for i in range(1, num_layers)] + ["final_prenorm", "final_postnorm"]


def normalize(name: str, num_layers: int | None = None) -> str:
    """Canonical boundary name: accepts ``layer_in.0`` (-> embed), ``layer_out.j`` / ``out.j`` (-> input of j+1)."""
    if not isinstance(name, str):
        raise LayoutError(f"boundary {name!r}", "a boundary name must be a string",
                          expected="embed, layer_in.<i>, layer_out.<j>, final_prenorm or final_postnorm",
                          found=f"{type(name).__name__} {name!r}", cause="layer ids given where names are expected "
                          "(use from_ids)" if isinstance(name, int) else None)
    name = name.strip()
    m = _ALIASES.match(name)
    if m:
        name = f"layer_in.{int(m.group(1)) + 1}"
    m = _LAYER_IN.match(name)
    if m:
        i = int(m.group(1))
        if i == 0:
            return "embed"
        if num_layers is not None and i == num_layers:
            return "final_prenorm"
        if num_layers is not None and i > num_layers:
            raise LayoutError(f"boundary '{name}'", "layer index beyond the target",
                              expected=f"an index in 0..{num_layers}", found=i,
                              cause="the layer ids are for a deeper target, or off by one")
        return f"layer_in.{i}"
    if name in ("embed", "final_prenorm", "final_postnorm"):
        return name
    raise LayoutError(f"boundary '{name}'", "unknown boundary name",
                      expected="embed, layer_in.<i>, layer_out.<j>, final_prenorm or final_postnorm", found=name)


def input_index(name: str, num_layers: int) -> int:
    """Capture-before index of a boundary (0 = embed, L = final pre-norm); final_postnorm -> L as well."""
    name = normalize(name, num_layers)
    if name == "embed":
        return 0
    if name in ("final_prenorm", "final_postnorm"):
        return num_layers
    return int(name.split(".")[1])


def from_ids(ids, convention: str, num_layers: int) -> tuple[str, ...]:
    """Layer ids written in `convention` -> boundary names (in the order given)."""
    if convention not in CONVENTIONS:
        raise LayoutError("layer-id convention", "unknown convention", expected=CONVENTIONS, found=convention)
    out = []
    for raw in ids:
        try:
            i = int(raw) if isinstance(raw, str) else operator.index(raw)   # numpy/torch ints too, not 2.5
        except (TypeError, ValueError):
            raise LayoutError(f"layer id {raw!r}", "not an integer", expected="an integer layer id",
                              found=f"{type(raw).__name__} {raw!r}") from None
        idx = i + 1 if convention == "output" else i
        if idx < 0 or idx > num_layers:
            lo, hi = (-1, num_layers - 1) if convention == "output" else (0, num_layers)
            raise LayoutError(f"layer id {i} ({convention}-of-layer convention)", "outside the target's layers",
                              expected=f"{lo}..{hi} for a {num_layers}-layer target", found=i,
                              cause="ids written for another target or in the other convention")
        if idx == 0:
            out.append("embed")
        elif idx == num_layers:
            out.append("final_postnorm" if convention == "hf" else "final_prenorm")
        else:
            out.append(f"layer_in.{idx}")
    return tuple(out)


def to_ids(layout, convention: str, num_layers: int) -> list[int]:
    """Boundary names -> layer ids in `convention` (final_postnorm only exists in the "hf" convention)."""
    if convention not in CONVENTIONS:
        raise LayoutError("layer-id convention", "unknown convention", expected=CONVENTIONS, found=convention)
    ids = []
    for name in layout:
        name = normalize(name, num_layers)
        if name == "final_postnorm" and convention != "hf":
            raise LayoutError(f"boundary '{name}'", f"not expressible in the {convention}-of-layer convention",
                              expected="a pre-norm boundary", found=name,
                              cause="engines capture the raw residual stream; the post-norm state needs a patch")
        if name == "final_prenorm" and convention == "hf":
            raise LayoutError(f"boundary '{name}'", "not expressible as an HF hidden_states index",
                              expected="a boundary other than final_prenorm", found=name,
                              cause="HF hidden_states[L] is post-norm")
        idx = input_index(name, num_layers)
        ids.append(idx - 1 if convention == "output" else idx)
    return ids


def parse_layout(spec, num_layers: int | None = None) -> tuple[str, ...]:
    """A layout from a comma-separated string or a sequence of names."""
    if isinstance(spec, str):
        spec = [s for s in spec.split(",") if s.strip()]
    return tuple(normalize(s, num_layers) for s in spec)


def training_default_ids(num_layers: int) -> list[int]:
    """The capture the training tools fix when a draft config names no layer ids: input-of-layer indices
    [2, L//2, L-3] (SafeAILab EAGLE's hard-coded capture; the same boundaries as SpecForge's output-of-layer
    [1, L//2-1, L-4]). What a serving engine captures then is its engine facts' "default_ids" rows
    (`engines.facts.default_ids`, by version), which for SGLang and vLLM today name the same indices."""
    L = int(num_layers)
    return [2, L // 2, L - 3]


def training_default_layout(num_layers: int) -> tuple[str, ...]:
    """`training_default_ids` as boundary names (three `layer_in.*` slots)."""
    return from_ids(training_default_ids(num_layers), "input", num_layers)

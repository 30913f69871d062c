"""`CaptureSpec`: which target boundaries a serving engine hands the draft, and a hook tap that gathers them.

A spec is explicit boundary names (`from_layout`, any order), raw ids in a convention (`from_ids`), or ids read the
way an engine reads them (`sglang`: +1 rule by version; `vllm`: input-of-layer ids; both concatenate in ascending
layer order; rule in `advice.captured_by`). `pad_policy` says what feeding k captured slots to an fc trained on m > k
does: "error" (default) refuses; "zeros" / "repeat_last" fill slots k..m-1. "zeros" equals an fc cut to its first k
column blocks, i.e. a patched server that passes the states it has (the seed: [low, mid, high] into an fc trained
on [embed, low, mid, high]): fc slot 0 (trained on embed) then reads low, slot 1 mid, slot 2 high, slot 3 nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor

from ..engines.advice import captured_by
from ..engines.capture_rules import FIRST_ID_RULE_ARCHS, FIRST_ID_RULE_VERSION
from ..hidden.decoders import decoder_stack
from ..errors import LayoutError
from ..layout import normalize, parse_layout
from ..engines.versions import DEFAULT_VERSION, parse_version

PAD_POLICIES = ("error", "zeros", "repeat_last")


@dataclass(frozen=True)
class CaptureSpec:
    """How an engine gathers aux hidden states: explicit slots, or ids read by a named engine rule."""

    slots: tuple[str, ...] | None = None   # boundary names in fc order; "layer_in.<L>" = final pre-norm
    engine: str | None = None              # advice.ENGINES name when `ids` are read as that engine reads them
    ids: tuple[int, ...] | None = None     # the configured ids (engine specs; None = the engine's default)
    final_norm: bool = False               # a captured final pre-norm state goes through the final norm
    pad_policy: str = "error"              # fewer slots than fc takes: "error", "zeros", "repeat_last"
    label: str = ""                        # how the spec was written, for messages and records

    def __post_init__(self):
        where = f"capture {self.label or self.slots or self.ids!r}"
        if self.pad_policy not in PAD_POLICIES:
            raise LayoutError(f"{where}: setting pad_policy", "unknown padding policy", expected=PAD_POLICIES,
                              found=repr(self.pad_policy))
        if (self.slots is None) == (self.engine is None):
            raise LayoutError(where, "give either slots or an engine rule", expected="slots=... or engine=...",
                              found=f"slots={self.slots!r}, engine={self.engine!r}")
        if self.slots is not None:
            if not self.slots:
                raise LayoutError(where, "no slots", expected="at least one boundary", found="()")
            object.__setattr__(self, "slots", tuple(normalize(s) for s in self.slots))
        if self.ids is not None:
            object.__setattr__(self, "ids", tuple(int(i) for i in self.ids))
        if not self.label:
            object.__setattr__(self, "label", self._describe())

    def _describe(self) -> str:
        if self.slots is not None:
            return "[" + ", ".join(self.slots) + "]"
        return f"{self.engine} ids {list(self.ids) if self.ids is not None else 'default'}"

    # ---- constructors -----------------------------------------------------------------------------------
    @classmethod
    def from_layout(cls, names, *, pad_policy: str = "error", label: str = "") -> CaptureSpec:
        """Explicit boundaries (layout.py names or a comma string), fed to fc in the order given."""
        return cls(slots=parse_layout(names), pad_policy=pad_policy, label=label)

    @classmethod
    def from_ids(cls, ids, convention: str, *, pad_policy: str = "error", label: str = "") -> CaptureSpec:
        """Layer ids in "input" (0 = embed) or "output" (-1 = embed) convention, in the order given."""
        if convention not in ("input", "output"):
            raise LayoutError("CaptureSpec.from_ids: setting convention", "unknown convention",
                              expected=("input", "output"), found=convention,
                              cause="for HF hidden_states indices use from_layout with final_postnorm")
        shift = 1 if convention == "output" else 0
        idx = [int(i) + shift for i in ids]
        if any(i < 0 for i in idx):
            raise LayoutError(f"CaptureSpec.from_ids({list(ids)}, {convention!r})", "an id names no boundary",
                              expected="ids >= -1 (output convention) or >= 0 (input)", found=list(ids))
        return cls(slots=tuple(f"layer_in.{i}" for i in idx), pad_policy=pad_policy,
                   label=label or f"{convention}-of-layer ids {list(ids)}")

    @classmethod
    def sglang(cls, ids, version: str = DEFAULT_VERSION, *, target_arch: str | None = None,
               pad_policy: str = "error", label: str = "") -> CaptureSpec:
        """What SGLang `version` captures for draft-config ids: +1 on every id; from ~v0.5.12 (PR #25454) only
        when ids[0] == 1, in model files that carry the PR (target_arch None assumes they do, as §4.2 states)."""
        v = parse_version(version)
        first_id = v >= parse_version(FIRST_ID_RULE_VERSION) and (
            target_arch is None or target_arch.startswith(FIRST_ID_RULE_ARCHS))
        engine = "sglang-first-id" if first_id else "sglang"
        ids = None if ids is None else tuple(int(i) for i in ids)
        return cls(engine=engine, ids=ids, pad_policy=pad_policy,
                   label=label or f"SGLang {v} ids {list(ids) if ids is not None else 'default'} ({engine} rule)")

    @classmethod
    def vllm(cls, ids, *, pad_policy: str = "error", label: str = "") -> CaptureSpec:
        """What vLLM captures for `eagle_aux_hidden_state_layer_ids` (input-of-layer, no +1, ascending)."""
        ids = None if ids is None else tuple(int(i) for i in ids)
        return cls(engine="vllm", ids=ids, pad_policy=pad_policy,
                   label=label or f"vLLM ids {list(ids) if ids is not None else 'default'}")

    def with_pad(self, pad_policy: str) -> CaptureSpec:
        """The same capture with another padding policy."""
        return replace(self, pad_policy=pad_policy)

    # ---- resolution -------------------------------------------------------------------------------------
    def layout(self, num_layers: int) -> tuple[str, ...]:
        """Boundary names of the captured slots, in the order the draft's fc receives them."""
        L = int(num_layers)
        try:
            if self.slots is not None:
                names = tuple(normalize(s, L) for s in self.slots)
            else:
                names = captured_by(self.engine, self.ids, L)
        except LayoutError as e:
            raise LayoutError(f"capture {self.label}", f"asks for a boundary the {L}-layer target does not have",
                              expected=f"embed, layer_in.1..{L - 1}, final_prenorm (= layer_in.{L}) or "
                              "final_postnorm", found=e.found,
                              cause=e.cause or "ids written for a deeper target, or in the other convention") from None
        if self.final_norm:
            names = tuple("final_postnorm" if n == "final_prenorm" else n for n in names)
        return names

    def check(self, k: int, fc_slots: int) -> None:
        """Raise the LayoutError feeding k captured slots to an fc over `fc_slots` slots gives (None if it fits)."""
        if k > fc_slots:
            raise LayoutError(f"capture {self.label}", "captures more slots than the draft's fc takes",
                              expected=f"at most {fc_slots} slots", found=k,
                              cause="the capture is for another draft; no engine drops slots")
        if k < fc_slots and self.pad_policy == "error":
            raise LayoutError(f"capture {self.label}: setting pad_policy='error'",
                              f"captures {k} slots but the draft's fc takes {fc_slots}",
                              expected=f"{fc_slots} captured slots, or pad_policy in {PAD_POLICIES[1:]}",
                              found=k, cause="the serving capture lacks a slot the draft was trained on (e.g. "
                              "the embedding output); pad_policy='zeros' reproduces a server that feeds what it "
                              "has into the wider fc")

    def fit(self, states: list[Tensor], fc_slots: int) -> Tensor:
        """Concatenate k captured (B, T, H) states for an fc over `fc_slots` slots: (B, T, fc_slots*H)."""
        self.check(len(states), fc_slots)
        if len(states) < fc_slots:    # slots k..m-1 of fc get zeros or copies of the last captured state
            fill = torch.zeros_like(states[-1]) if self.pad_policy == "zeros" else states[-1]
            states = list(states) + [fill] * (fc_slots - len(states))
        return torch.cat(states, dim=-1)                      # fc_slots x (B, T, H) -> (B, T, fc_slots*H)


def decoder_parts(model):
    """(layers, final norm) of an HF causal LM (`hidden.decoders.decoder_stack`), or a LayoutError."""
    _, layers, norm = decoder_stack(model)
    return layers, norm


class HiddenTap:
    """Forward (pre-)hooks that keep the latest (B, T, H) state of each named boundary of every target forward.

    embed / layer_in.i = input of layer 0 / i (pre-hook); final_prenorm = input of the final norm; final_postnorm =
    its output. Use as a context manager: hooks are removed on exit.
    """

    def __init__(self, model, names):
        self.model, self.names = model, tuple(dict.fromkeys(names))
        self.states: dict[str, Tensor] = {}
        self._handles: list = []

    def __enter__(self) -> HiddenTap:
        layers, norm = decoder_parts(self.model)

        def pre(name):
            def hook(module, args, kwargs):
                self.states[name] = args[0] if args else kwargs["hidden_states"]
            return hook

        for name in self.names:
            if name in ("final_prenorm", "final_postnorm"):
                continue
            i = 0 if name == "embed" else int(name.split(".")[1])
            self._handles.append(layers[i].register_forward_pre_hook(pre(name), with_kwargs=True))
        if "final_prenorm" in self.names:
            self._handles.append(norm.register_forward_pre_hook(lambda m, a: self.states.__setitem__(
                "final_prenorm", a[0])))
        if "final_postnorm" in self.names:
            self._handles.append(norm.register_forward_hook(lambda m, a, out: self.states.__setitem__(
                "final_postnorm", out)))
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def take(self, layout) -> list[Tensor]:
        """The states of the last forward, in `layout` order (each (B, T, H))."""
        missing = [n for n in layout if n not in self.states]
        if missing:
            raise LayoutError(f"target {type(self.model).__name__}", "hooks did not fire for some boundaries",
                              expected=list(layout), found=sorted(self.states),
                              cause="the model's forward does not call model.layers[i] / model.norm")
        return [self.states[n] for n in layout]

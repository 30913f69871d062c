"""What an engine loads of one draft, aspect by aspect, each with the source that answered (`EngineView`), and what
a deployment left beside its launch for the engine's home to read (`Served`).

Aspects (`ASPECTS`) and what each can be:
- `layout`    the boundaries it feeds the fc, in fc order (None = a slot that gets nothing), and whether the
              captured slots fit the fc the engine builds (else the engine crashes on the first request); a vLLM
              draft whose eagle_config opts out of aux states (`use_aux_hidden_state` false) gets, on the V1
              runner, the target's last hidden state and no fc (`fc_slots` 0): ("final_postnorm",);
- `d2t`       "checkpoint" (the draft's offsets) or "zeros" (left at init: draft id i is target id i);
- `embedding` "target" (the target's embed_tokens) or "own" (the draft's shipped copy);
- `lm_head`   "own", "target" (the whole target head) or "target_sliced" (the first draft_vocab_size rows of the
              target's head, vLLM's borrow for a reduced-vocab draft) or "random" (left at init);
- `mis_shaped` only for a checkpoint holding q/k/v projections in another shape than its config sizes them:
              "padded" (SGLang on the CPU device: the checkpoint's rows first, zeros past them), None where no row
              says (the replay keeps eagle3lib's loader's stand-in).
A view starts from the tables (each home's `table_view`, asked by `serving.loaded_view.engine_view`); each engine's
home overrules its aspects with what the running engine said (`EngineHome.said`: its log, its own code asked, the
load a hook recorded), and the view says which source answered each aspect.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Mapping

import pandas as pd

ASPECTS = ("layout", "d2t", "embedding", "lm_head", "mis_shaped")
# strongest first: what the engine fed the draft (a serving dump, identified), what it logged, its own code asked
# here (the vLLM probe), eagle3lib's tables
SOURCES = ("dump", "log", "probe", "table", "unknown")
LAST_HIDDEN = ("final_postnorm",)      # what vLLM's V1 runner feeds a draft that opts out of aux states


@dataclass(frozen=True)
class Aspect:
    """One aspect of the draft as an engine loads it."""
    name: str
    value: object          # see the module docstring; None = not known
    source: str            # one of SOURCES
    detail: str            # where it was read (table row / probe field / log line) and why


@dataclass(frozen=True)
class EngineView:
    """The draft as `engine` loads it; `refused` names why the engine would not serve it (None: it serves)."""
    engine: str
    version: str | None
    runner: str | None                      # vLLM model runner ("v1" / "v2"), when known
    aspects: Mapping[str, Aspect]
    fc_slots: int | None = None             # aux slots the engine's fc takes
    refused: str | None = None              # the engine's error (or the table's prediction of it)
    refused_source: str = ""

    def value(self, name: str):
        a = self.aspects.get(name)
        return None if a is None else a.value

    def source(self, name: str) -> str:
        a = self.aspects.get(name)
        return "unknown" if a is None else a.source

    def overruled(self, name: str, value, source: str, detail: str) -> EngineView:
        """The view with aspect `name` answered by a stronger `source` (a weaker one never overrules)."""
        old = self.aspects.get(name)
        if old is not None and SOURCES.index(source) > SOURCES.index(old.source) and old.value is not None:
            return self
        return dataclasses.replace(self, aspects={**self.aspects, name: Aspect(name, value, source, detail)})

    def with_refusal(self, why: str | None, source: str) -> EngineView:
        """The view with the engine's refusal (or its absence: `why` None) as `source` saw it."""
        if why is None and self.refused is not None and SOURCES.index(source) <= SOURCES.index(self.refused_source):
            return dataclasses.replace(self, refused=None, refused_source=source)
        return dataclasses.replace(self, refused=why, refused_source=source) if why else self

    def frame(self) -> pd.DataFrame:
        """One row per aspect: what the engine loads, which source answered, and how."""
        rows = [{"aspect": a.name, "engine loads": _show(a.value), "source": a.source, "detail": a.detail}
                for a in self.aspects.values()]
        if self.refused:
            rows.append({"aspect": "serves", "engine loads": "refused", "source": self.refused_source,
                         "detail": self.refused})
        return pd.DataFrame(rows, columns=["aspect", "engine loads", "source", "detail"])

    def to_dict(self) -> dict:
        return {"engine": self.engine, "version": self.version, "runner": self.runner, "fc_slots": self.fc_slots,
                "refused": self.refused, "refused_source": self.refused_source,
                "aspects": {k: {"value": list(a.value) if isinstance(a.value, tuple) else a.value,
                                "source": a.source, "detail": a.detail} for k, a in self.aspects.items()}}


def _show(v) -> str:
    if isinstance(v, tuple):
        return ", ".join("nothing" if x is None else str(x) for x in v)
    return "not known" if v is None else str(v)


@dataclass(frozen=True)
class Served:
    """What a deployment left for its engine's home to read beside the launch (`EngineHome.said`): the draft and
    target it served (their folders; the target's layer count, whether the draft's vocabulary is reduced), the
    server's log and the served runs' files, the load eagle3lib's hook recorded in a serving dump, an answer of the
    engine's own code already asked (vLLM's probe) and whether to ask it here."""
    draft: str
    target: str
    num_layers: int
    reduced_vocab: bool
    logs: tuple[str, ...] = ()
    load: Mapping | None = None
    probe: object = None
    use_probe: bool = True
    num_speculative_tokens: int = 3

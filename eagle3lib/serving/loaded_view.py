"""What a serving engine loads for one draft, by the tables: the draft as the engine will run it, aspect by aspect,
each with the source that answered.

The aspects (`engine_kit.view.ASPECTS`) and what each can be: `engine_kit.view`.
`engine_view(engine, ...)` asks the engine's home (`EngineHome.table_view`: `vllm_engine.loads`, `sglang_engine.loads`,
built on `engine_kit.table_view`), which answers from `engines.facts` and its own id reading at a version; a higher
layer then overrules aspects with what the running engine answered (each home's `said`: the vLLM probe, the server's
own log), and the view says which source answered each aspect. `replay.as_served` replays the draft in a view, so a
served accept length can be set beside the draft as the engine really runs it.
Usage: ``v = engine_view("vllm", draft_raw=raw, tensors=headers, target_info=info, version="0.32.0")``.
"""
from __future__ import annotations

from typing import Mapping

from ..engine_kit.view import Aspect, EngineView
from .homes import home


def engine_view(engine: str, *, draft_raw: Mapping, tensors: Mapping[str, tuple], target_info, version=None,
                runner: str | None = None, mis_shaped: tuple[str, ...] = (), device: str | None = None) -> EngineView:
    """The draft as `engine` at `version` loads it, by its home's tables (see the module docstring). `mis_shaped`: the
    checkpoint keys held in another shape than the config sizes them (the loader's report); `device`: the launch's
    (--device), where it names one. A home without a table view leaves every aspect unknown, naming it."""
    eng = engine.lower()
    view = home(eng).table_view
    if view is None:
        return EngineView(eng, str(version) if version else None, runner, {
            a: Aspect(a, None, "unknown", f"{eng}'s home has no table view (EngineHome.table_view)")
            for a in ("layout", "d2t", "embedding", "lm_head")})
    return view(draft_raw=draft_raw, tensors=tensors, target_info=target_info, version=version, runner=runner,
                mis_shaped=tuple(mis_shaped), device=device)

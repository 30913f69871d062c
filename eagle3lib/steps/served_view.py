"""The draft as the serving engine really loads it, from the best source for each aspect.

`deployment_view(engine, art, ...)` starts from the tables at the engine's version
(`serving.loaded_view.engine_view`) and lets what the running engine said overrule them, as the engine's home reads
it (`EngineHome.said`): vLLM's own code asked about this draft where vLLM is installed and its server's log
(`vllm_engine.said`), SGLang's log and the load a dump of eagle3lib's SGLang hook records (`sglang_engine.said`).
Each aspect says which source answered (`EngineView.frame()`). What the running engine said becomes findings in
`checks.engine_said`; the served τ beside the draft replayed as trained and as the engine loads it is
`steps.served_prediction`'s (replay.as_served, checks.served_loss.as_served_findings).
"""
from __future__ import annotations

from ..checks.inputs import Artifacts
from ..engine_kit.view import EngineView, Served
from ..serving.homes import home
from ..serving.loaded_view import engine_view


def deployment_view(engine: str, art: Artifacts, *, version: str | None = None, logs=(), load=None, probe=None,
                    use_probe: bool = True, num_speculative_tokens: int = 3, mis_shaped: tuple[str, ...] = (),
                    device: str | None = None) -> tuple[EngineView, list[str], list[str]]:
    """(the draft of `art` (a case's artifacts: its draft and target) as `engine` loads it, notes, problems): the
    tables' view at the engine's version, overruled by what the running engine said, as its home reads it
    (`EngineHome.said`) from what the deployment left: `logs` (the server's log, the served runs' files), `load` (the
    load eagle3lib's hook recorded in a serving dump), `probe` (vLLM's own code already asked; else asked there when
    `use_probe`). `mis_shaped`: checkpoint keys held in another shape than the config's (the loader's report),
    `device`: the launch's."""
    if art.draft_raw is None or art.target_info is None:
        raise _unreadable(art)
    info = art.target_info

    def view_for(at_version, runner):
        return engine_view(engine, draft_raw=art.draft_raw, tensors=art.tensors or {}, target_info=info,
                           version=at_version, runner=runner, mis_shaped=tuple(mis_shaped), device=device)
    said = home(engine).said
    if said is None:
        return view_for(version, None), [], []
    reduced = art.draft_cfg is not None and art.draft_cfg.draft_vocab_size != info.vocab_size
    return said(view_for, Served(str(art.draft_path), str(art.target_path), info.num_layers, reduced, tuple(logs),
                                 load, probe, use_probe, num_speculative_tokens), version)


def _unreadable(art):
    from ..errors import ConfigError
    return ConfigError("deployment_view", "the draft or target config cannot be read", expected="config.json of "
                       "both", found="; ".join(f"{k}: {v}" for k, v in art.problems.items()) or "not given")

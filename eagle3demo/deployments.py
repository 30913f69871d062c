"""The demo world's draft as a user would deploy it on vLLM: one healthy deployment and broken ones, each a copy of
the trained demo draft with one defect planted, and the cause it must be diagnosed with.

The trained draft (SpecForge format) stores its aux ids as SpecForge writes them: output-of-layer ids
[-1, 1, 3, 5] in `eagle_config`, i.e. the inputs of layers [0, 2, 4, 6]. vLLM reads input-of-layer ids, so the
healthy deployment writes [0, 2, 4, 6] there (as the issue's user did); the draft as SpecForge left it makes vLLM
capture only three slots for a four-slot fc, and the first request fails.

The mla world (`MLA_DEPLOYMENTS`, `table("mla")`) deploys on vLLM's DeepSeek target, which cannot hand its draft
the embedding (id 0: deepseek_v2.py:1562 adds a None residual): its healthy deployment is the draft retrained on
the serving layout (`DemoPaths.retrained_draft`, vLLM ids [2, 4, 6]), its broken one the seed's draft as trained
(ids [0, 2, 4, 6], the embedding slot); both written in vLLM's MLA dialect (model_type deepseek_v2, top-level ids).

`write_deployment(name, out)` writes one deployment's draft folder; `DEPLOYMENTS` says what each one is and which cause the
diagnosis must name (None: healthy, "no fault found"; `refused`: the engine fails on it, the error is the finding).
Usage: ``draft = write_deployment("off_by_one", tmp / "draft"); DEPLOYMENTS["off_by_one"].cause``;
``write_deployment("healthy", tmp / "draft", world="mla")``.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from safetensors.torch import load_file

from eagle3lib.demo import world as demo
from eagle3lib.engines.draft_edit import edited_copy
from eagle3lib.errors import DataError

VLLM_IDS = [0, 2, 4, 6]             # the trained layout [embed, layer_in.2, layer_in.4, layer_in.6], vLLM's ids


@dataclass(frozen=True)
class Deployment:
    """One way the demo draft is deployed: what was changed, and the cause the diagnosis must name."""
    name: str
    what: str
    cause: str | None                 # the one cause to confirm (None: healthy)
    refused: bool = False             # the engine fails on it (the error is the evidence)
    diagnosed: bool = True            # False: served and measured, but the diagnosis cannot name it yet (why)
    config: Callable[[dict], None] | None = None
    weights: Callable[[dict, Path], None] | None = None
    source: str = "draft"             # which trained draft of the world (a DemoPaths attribute: "retrained_draft")
    dialect: str | None = None        # re-saved in this format first (save_draft), as a user converts it; None: as is
    method: str = "eagle3"            # the speculative method the launch names (--speculative-config method)
    num_speculative_tokens: int | None = None    # the launch's K (None: demo.vllm_world's default)


def _vllm_ids(c: dict) -> None:
    c["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = list(VLLM_IDS)


def _off_by_one(c: dict) -> None:
    _vllm_ids(c)
    c["eagle_aux_hidden_state_layer_ids"] = [i + 1 for i in VLLM_IDS]   # the top level wins on vLLM's V1 runner


def _rope(c: dict) -> None:
    _vllm_ids(c)
    c["rope_theta"] = 1_000_000.0      # trained at the target's 10000


def _also(**fields) -> Callable[[dict], None]:
    """vLLM's ids, and config fields the draft was not trained with (a converter's or a hand edit)."""
    def edit(c: dict) -> None:
        _vllm_ids(c)
        c.update(fields)
    return edit


def _d2t_absolute(w: dict, target: Path) -> None:
    w["d2t"] = w["d2t"] + torch.arange(w["d2t"].numel(), dtype=w["d2t"].dtype)   # absolute ids, not offsets


def _specforge_as_is(c: dict) -> None:
    pass                               # [-1, 1, 3, 5] as SpecForge wrote them


def _rename_d2t(w: dict, target: Path) -> None:
    w["draft_id_to_target_id"] = w.pop("d2t")          # vLLM's in-memory name: its loader drops it


def _own_embedding(w: dict, target: Path) -> None:
    emb = load_file(str(target / "model.safetensors"))["model.embed_tokens.weight"]
    g = torch.Generator().manual_seed(1)
    w["embed_tokens.weight"] = (torch.randn(emb.shape, generator=g) * emb.std()).contiguous()


def _no_lm_head(w: dict, target: Path) -> None:
    del w["lm_head.weight"]


D = Deployment
DEPLOYMENTS = {d.name: d for d in (
    D("healthy", "ids written for vLLM: eagle_config ids [0, 2, 4, 6] (input-of-layer)", None, config=_vllm_ids),
    D("off_by_one", "top-level ids [1, 3, 5, 7]: one layer deeper than trained", "layer_id_off_by_one",
      config=_off_by_one),
    D("d2t_renamed", "d2t stored as 'draft_id_to_target_id'", "d2t_mapping", config=_vllm_ids, weights=_rename_d2t),
    D("own_embedding", "the draft ships a random embed_tokens of its own", "wrong_embedding", config=_vllm_ids,
      weights=_own_embedding),
    D("rope_theta", "config rope_theta 1e6, trained at 1e4", "rope_mismatch", config=_rope),
    D("no_lm_head", "lm_head.weight lost from the checkpoint", "lm_head_missing", config=_vllm_ids,
      weights=_no_lm_head),
    D("norm_flag_added", "norm_before_residual: true added to the config; the draft was trained without it",
      "draft_config_differs", config=_also(norm_before_residual=True)),
    D("rope_scaling_added", "a linear rope_scaling of factor 4 added to the config; trained without scaling",
      "rope_mismatch", config=_also(rope_scaling={"rope_type": "linear", "factor": 4.0})),
    D("hidden_act_gelu", "hidden_act gelu in the config; trained with silu (vLLM's Llama MLP runs silu only; the "
      "demo draft replays its training samples alike under either)", "engine_cannot_run", refused=True,
      config=_also(hidden_act="gelu")),
    D("d2t_absolute", "d2t holds absolute target ids instead of offsets", "d2t_mapping", refused=True,
      config=_vllm_ids, weights=_d2t_absolute),
    D("method_eagle", "the healthy draft launched with method eagle (an EAGLE-1/2 method for an EAGLE-3 draft)",
      "wrong_method", refused=True, config=_vllm_ids, method="eagle"),
    D("healthy_k5", "the healthy draft served with K = 5 speculative tokens", None, config=_vllm_ids,
      num_speculative_tokens=5),
    D("specforge_as_is", "the draft as SpecForge wrote it: eagle_config ids [-1, 1, 3, 5] (output-of-layer, read as "
      "input-of: 3 slots captured for a 4-slot fc)", "layer_id_off_by_one", refused=True, config=_specforge_as_is),
)}


def _top_ids(ids: list[int]) -> Callable[[dict], None]:
    def edit(c: dict) -> None:
        c["eagle_aux_hidden_state_layer_ids"] = list(ids)    # vLLM's DeepSeek target reads the top level
    return edit


MLA_DEPLOYMENTS = {d.name: d for d in (
    D("healthy", "the draft retrained on the serving layout [layer_in.2, layer_in.4, layer_in.6] (no embedding "
      "slot), in vLLM's MLA dialect with its input-of-layer ids [2, 4, 6]", None, config=_top_ids([2, 4, 6]),
      source="retrained_draft", dialect="vllm"),
    D("embedding_slot", "the seed's draft as trained on [embed, layer_in.2, layer_in.4, layer_in.6], in vLLM's MLA "
      "dialect with its input-of-layer ids [0, 2, 4, 6]: vLLM's DeepSeek target cannot hand over the embedding "
      "(id 0)", "aux_layout_mismatch", refused=True, config=_top_ids([0, 2, 4, 6]), dialect="vllm"),
)}
TABLES = {"llama": DEPLOYMENTS, "mla": MLA_DEPLOYMENTS}


def table(world: str | None = None) -> dict[str, Deployment]:
    """The deployments of demo world `world` (default: the process's, demo.world_name())."""
    return TABLES[demo.world_name(world)]


def deployment(name: str, world: str | None = None) -> Deployment:
    """The deployment called `name` (of `world`, default the process's); DataError naming the known ones otherwise."""
    known = table(world)
    if name not in known:
        raise DataError(f"deployment {name!r}", f"unknown {demo.world_name(world)} demo deployment",
                        expected=sorted(known), found=name)
    return known[name]


def write_deployment(name: str, out, *, draft=None, target=None, world: str | None = None) -> Path:
    """The draft folder of deployment `name`: a copy of the demo draft (`draft`, else the world's trained draft the
    deployment names) with its defect planted. `target`: the target whose embedding a planted copy is drawn like."""
    dep = deployment(name, world)
    w = demo.paths(world=world)
    src, target = Path(draft or getattr(w, dep.source)), Path(target or w.target)
    if dep.dialect is None:
        return edited_copy(src, out, config=dep.config, tensors=dep.weights, target=target, fresh=True)
    out = Path(out)
    converted = out.with_name(f".{out.name}.{dep.dialect}")
    try:
        return edited_copy(resaved(src, converted, target, dep.dialect), out, config=dep.config, tensors=dep.weights,
                           target=target, fresh=True)
    finally:
        shutil.rmtree(converted, ignore_errors=True)


def resaved(src, out, target, format: str) -> Path:
    """Draft folder `src` loaded (its embedding from `target`) and written to `out` in `format`, as a user converts
    a SpecForge draft for an engine (save_draft: vLLM's MLA dialect is model_type deepseek_v2, top-level ids)."""
    from eagle3lib.model.checkpoint import load_draft, save_draft
    loaded = load_draft(src, target=target)
    return save_draft(loaded.model, loaded.cfg, out, format=format)

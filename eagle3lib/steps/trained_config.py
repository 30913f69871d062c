"""Notebook 02's (and the diagnosis') question before any served number: is the shipped config what was trained?

The training samples are the ground truth (replay.counterfactual): the draft is replayed on them under its shipped
config and under every engine-read field set otherwise, with the target's values, the training config's (when
given) and common ones as candidates. `trained_config_search` gathers those values from the files and runs it;
its `Search.trained_changes` is the configuration that reproduces training, which the as-served replay then
takes as "as trained" (steps.served_prediction). When no config field restores what the draft falls short of,
`trained_artifacts` searches the shipped tensors (replay.artifacts: d2t recovered from the training targets,
lm_head rows, tied weights, the embedding). `trained_searches` runs both once per case (`once.kept`): the served
prediction (notebook 01) and the training-sample replay (notebook 02) ask the same question of the same setup.
"""
from __future__ import annotations

from pathlib import Path

from ..checks.inputs import tensor_headers
from ..checks.rope import rope_fields
from ..errors import Eagle3Error
from ..model.checkpoint import canonicalize
from ..model.config import read_config_json
from ..model.safefiles import load_state_dict
from ..model.variants import shape_implied
from ..model.target import load_target_info
from ..once import files_signature, kept
from ..replay.artifacts import ArtifactSearch, fails_own_samples, search_artifacts
from ..replay.counterfactual import Search, search
from ..replay.run import setup_fingerprint
from ..replay.stats import ReplaySetup

N_SAMPLES = 16         # training samples per candidate (the search replays step 0 only: CPU seconds on the demo)


def target_fields(target_path: str) -> dict:
    """The target's values of the fields a draft config copies from it ({} when it cannot be read)."""
    if not target_path:
        return {}
    try:
        tc = load_target_info(target_path).text_config
    except Eagle3Error:
        return {}
    return {**rope_fields(tc), "rms_norm_eps": tc.get("rms_norm_eps"), "hidden_act": tc.get("hidden_act"),
            "max_position_embeddings": tc.get("max_position_embeddings")}


def training_fields(training_config: str) -> dict | None:
    """The training run's config (None when not given or unreadable: the search then proposes no value from it)."""
    if not training_config:
        return None
    try:
        return read_config_json(training_config, "training")[0]
    except Eagle3Error:
        return None


def unused_tensors(draft_path: str, setup: ReplaySetup) -> dict:
    """Checkpoint tensors the shipped config leaves out of the model (an input_norm a config without norm_before_fc
    drops) or holds in another shape (a k_proj the config's num_key_value_heads sizes otherwise: the loader's
    stand-in runs instead), so a candidate that switches their module on or resizes it runs the trained weights."""
    have = {k: tuple(v.shape) for k, v in setup.model.state_dict().items()}
    try:       # the headers' shapes first: only the tensors that differ are read (the setup holds the rest)
        shapes = tensor_headers(Path(draft_path))                          # stored name -> (shape, dtype)
        named, _ = canonicalize({k: k for k in shapes})                    # canonical name -> stored name
        differ = [stored for canon, stored in named.items() if have.get(canon) != shapes[stored][0]]
        sd, _ = canonicalize(load_state_dict(draft_path, keys=differ)) if differ else ({}, [])
    except Eagle3Error:
        return {}
    return {k: v.to(device=setup.device) for k, v in sd.items() if have.get(k) != tuple(v.shape)}


def trained_config_search(setup: ReplaySetup, data, *, recorded: float | None = None, recorded_from: str = "",
                          training_config: str = "", n: int = N_SAMPLES, recapture=None) -> Search:
    """The counterfactual search on `n` training samples of `data` for the draft of `setup`."""
    extra = unused_tensors(setup.draft_path, setup)
    implied = shape_implied(setup.cfg, {**{k: tuple(v.shape) for k, v in setup.model.state_dict().items()},
                                        **{k: tuple(v.shape) for k, v in extra.items()}}) if extra else {}
    return search(setup, data, target=target_fields(setup.target_path or ""),
                  training=training_fields(training_config), recorded=recorded, recorded_from=recorded_from, n=n,
                  extra=extra, recapture=recapture, implied=implied)


def trained_artifacts(setup: ReplaySetup, data, found: Search, *, n: int = N_SAMPLES,
                      recapture=None) -> ArtifactSearch | None:
    """The artifact search when the draft still fails its own training samples after the config search (None
    when it does not: the shipped tensors reproduce training, or a config field restores it)."""
    best = found.restoring.acc0 if found.restoring is not None else found.shipped_acc0
    if not fails_own_samples(best, found.recorded):
        return None
    try:
        raw, _ = read_config_json(setup.draft_path, "draft")
    except Eagle3Error:
        raw = {}
    names = set(shipped_tensors(setup))
    return search_artifacts(setup, data, recorded=found.recorded, shipped_acc0=found.shipped_acc0,
                            positions=found.positions, n=n, recapture=recapture,
                            own_embed="embed_tokens.weight" in names, tied=bool(raw.get("tie_word_embeddings")))


def trained_searches(setup: ReplaySetup, data: str, *, recorded: float | None = None, recorded_from: str = "",
                     training_config: str = "") -> tuple[Search, ArtifactSearch | None]:
    """(`trained_config_search`, `trained_artifacts` after it) on the training samples `data` (a path), computed once
    per case for this setup (its model as loaded, layout, dtype and device), data and recorded accuracy."""
    key = ("trained searches", setup.draft_path, setup.target_path, setup.training_layout, str(setup.dtype),
           str(setup.device), id(setup.model), setup_fingerprint(setup), str(Path(data).resolve()),
           files_signature(data), recorded, recorded_from, training_config)

    def run():
        found = trained_config_search(setup, data, recorded=recorded, recorded_from=recorded_from,
                                      training_config=training_config)
        return found, trained_artifacts(setup, data, found)
    return kept(key, run)


def shipped_tensors(setup: ReplaySetup) -> tuple[str, ...]:
    """The canonical names of the tensors the draft's checkpoint carries ((): unreadable)."""
    try:
        sd, _ = canonicalize(tensor_headers(Path(setup.draft_path)))      # names from the headers: no tensor read
    except Eagle3Error:
        return ()
    return tuple(sd)

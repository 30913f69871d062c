"""The draft replayed as an engine really loads it, aspect by aspect, beside the draft as it was trained.

An `engine_kit.view.EngineView` says what the engine feeds and loads (layout, d2t, embedding, lm_head; which
source answered each). `replay_as_served(setup, data, view, num_steps=K)` replays the chain of K drafts (simulated
greedy acceptance, the served τ's definition: accepted tokens per round + the bonus token, counted where the
engine drafts: at the positions its verification walk visits, engines.verification.verification_walk) three ways:
- **as trained**: the identified training layout, the checkpoint's d2t, the embedding it was trained with (the
  target's; a shipped copy that differs is measured both ways and the better one is taken as trained), its own
  lm_head, and its config's RoPE — or the training config's / the target's RoPE when `trained_rope` says so;
- **as served**: every aspect as the view says;
- **one aspect at a time**: as trained with only that aspect as served, so a drop is pinned on its aspect.
`variant(model, **fields)` runs the same weights under other config values (RoPE fields; flags switched off).
The served τ then decides (steps.served_prediction): equal to the trained replay rules every differing aspect out;
equal to the as-served replay while that is lower confirms the aspects whose own replay drops.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field, replace

import pandas as pd
import torch

from ..errors import ConfigError, Eagle3Error
from ..engines import facts
from ..engine_kit.table_view import QKV_KEYS
from ..model.checkpoint import FILLS
from ..model.draft import Eagle3Draft
from ..model.layers import Rotary
from ..model.variants import rebuilt
from ..model.target import load_target_tensor
from .run import replay
from .stats import ReplaySetup
from ..layout import ZERO

# config fields a variant may change: RoPE anything; flags only switched off (their weights stay unused)
FLAG_FIELDS = ("norm_before_fc", "fc_norm", "norm_output", "norm_before_residual")
ASPECT_CAUSE = {"d2t": "d2t_mapping", "embedding": "wrong_embedding", "lm_head": "lm_head_missing",
                "rope": "rope_mismatch", "config": "draft_config_differs"}
# layout: the kind of layout difference decides (hidden.explain); config: a RoPE field is rope_mismatch
CONFIG_ROPE = ("rope_theta", "rope_scaling", "partial_rotary_factor", "max_position_embeddings")


@contextlib.contextmanager
def variant(model: Eagle3Draft, **changes):
    """Temporarily run `model` with its config fields changed (RoPE fields; flags switched off only)."""
    bad = [k for k in changes if k not in CONFIG_ROPE + FLAG_FIELDS]
    turned_on = [k for k in changes if k in FLAG_FIELDS and changes[k] and not getattr(model.cfg, k)]
    if bad or turned_on:
        raise ConfigError("replay.as_served.variant", "cannot replay this variant",
                          expected=f"RoPE fields {CONFIG_ROPE} or flags switched off {FLAG_FIELDS}",
                          found=bad or turned_on, cause="a flag switched on has no trained weights to use")
    old = (model.cfg, model.rotary, model.midlayer.norm_before_residual)
    cfg = replace(model.cfg, **changes)
    device = model.fc.weight.device
    model.cfg, model.rotary = cfg, Rotary(cfg).to(device)
    model.midlayer.norm_before_residual = cfg.norm_before_residual
    try:
        yield model
    finally:
        model.cfg, model.rotary, model.midlayer.norm_before_residual = old


@dataclass(frozen=True, eq=False)
class Tensors:
    """The alternatives an engine may load instead of the draft's own tensors (None where not available)."""
    own_embed: torch.Tensor | None          # the draft's shipped embed_tokens (None: it ships none)
    target_embed: torch.Tensor | None       # (V, H) the target's
    target_head: torch.Tensor | None        # (V, Ht) the target's lm_head


def alternatives(setup: ReplaySetup, own_embed: torch.Tensor | None) -> Tensors:
    """The target's embedding and lm_head for `setup` (read from its target folder), beside the draft's own."""
    emb = None
    if setup.target_path:
        try:
            emb = load_target_tensor(setup.target_path, "embed")
        except Eagle3Error:
            emb = None
    return Tensors(own_embed, emb, setup.lm_head)


@contextlib.contextmanager
def loaded_as(setup: ReplaySetup, tensors: Tensors, *, d2t: str | None = None, embedding: str | None = None,
              lm_head: str | None = None):
    """Temporarily give `setup.model` the tensors an engine would load (None: keep the model's own). Nothing is
    written in place: each tensor is swapped for another and the very same ones are put back (a setup shared
    within a case, `replay.run.load_setup`, is left as it was found)."""
    m = setup.model
    saved = (m.d2t, m.embed_tokens.weight.data, m.lm_head.weight.data)
    try:
        if d2t == "zeros":
            m.d2t = torch.zeros_like(saved[0])             # draft id i is served as target id i
        if embedding in ("own", "target"):
            t = tensors.own_embed if embedding == "own" else tensors.target_embed
            if t is None:
                raise ConfigError("replay.as_served", f"no {embedding} embedding to load", expected="a tensor",
                                  found=None)
            m.embed_tokens.weight.data = t.to(m.embed_tokens.weight)
        if lm_head in ("target", "target_sliced"):
            if tensors.target_head is None:
                raise ConfigError("replay.as_served", "no target lm_head to borrow", expected="the target's "
                                  "lm_head", found=None, cause="no target given, or it has no lm_head")
            rows = m.lm_head.weight.shape[0]                # (Vd, H): the first Vd rows of the target's head
            m.lm_head.weight.data = tensors.target_head[:rows].to(m.lm_head.weight)
        elif lm_head == "random":
            g = torch.Generator().manual_seed(0)
            w = torch.empty_like(m.lm_head.weight, device="cpu")
            m.lm_head.weight.data = torch.nn.init.kaiming_uniform_(w, a=5 ** 0.5, generator=g).to(m.lm_head.weight)
        yield m
    finally:
        m.d2t = saved[0]
        m.embed_tokens.weight.data, m.lm_head.weight.data = saved[1], saved[2]


@contextlib.contextmanager
def engine_filled(setup: ReplaySetup, how: str | None, keys: tuple[str, ...]):
    """Temporarily give `setup.model` the engine's stand-in for the tensors the checkpoint holds in another shape
    (`setup.filled`, those of `keys`): "padded" puts each in its leading rows, zeros past them (None: keep the
    loader's). Yields the keys changed."""
    swap = [f for f in setup.filled if how == "padded" and f.padded is not None and f.key.endswith(keys)]
    params = dict(setup.model.named_parameters())
    saved = {f.key: params[f.key].data for f in swap if f.key in params}
    try:
        for f in swap:
            if f.key in saved:
                params[f.key].data = f.padded.to(saved[f.key])
        yield tuple(saved)
    finally:
        for k, t in saved.items():
            params[k].data = t


@dataclass(frozen=True)
class Replayed:
    """One variant's replay: what it changed, its layout and its numbers."""
    label: str                      # "as trained", "as served", or the aspect served alone
    aspects: tuple[str, ...]        # the aspects set as served
    layout: tuple[str, ...]
    tau: float                      # simulated τ of the chain where the engine drafts (its verification walk),
                                    # bonus token included: what a served τ counts (every position when no walk)
    acc0: float
    positions: int
    tau_every_position: float = float("nan")   # the chain's τ over every full-horizon position
    drafts: int = 0                            # the walk's drafts behind `tau`
    per_position: tuple[float, ...] = ()       # P(draft position i accepted) on the walk, i = 1..K


@dataclass(frozen=True)
class AsServed:
    """The replays of one draft as trained, as served and one aspect at a time; what differs and from where."""
    num_steps: int
    trained: dict                   # aspect -> value as trained
    served: dict                    # aspect -> value as the engine loads it
    sources: dict                   # aspect -> which source answered (engine_kit.view.SOURCES)
    replays: tuple[Replayed, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)
    unknown: tuple[str, ...] = ()   # causes whose trained tensors the checkpoint lacks: 'as trained' replays the
                                    # loader's stand-in (setup.filled), so it cannot rule them out
    unseen: dict = field(default_factory=dict)   # cause -> why these replays cannot see it (a field they do not run)

    @property
    def differing(self) -> tuple[str, ...]:
        return tuple(a for a in self.served if self.served[a] != self.trained.get(a))

    def get(self, label: str) -> Replayed | None:
        return next((r for r in self.replays if r.label == label), None)

    def frame(self) -> pd.DataFrame:
        rows = [{"replay": r.label, "aspects as served": ", ".join(r.aspects) or "-", "layout": ", ".join(r.layout),
                 "acc step 0": round(r.acc0, 4), "τ (chain, where the engine drafts)": round(r.tau, 3),
                 "drafts": r.drafts, "τ (every position)": round(r.tau_every_position, 3), "positions": r.positions}
                for r in self.replays]
        return pd.DataFrame(rows)

    def to_dict(self) -> dict:
        return {"num_steps": self.num_steps, "trained": {k: _plain(v) for k, v in self.trained.items()},
                "served": {k: _plain(v) for k, v in self.served.items()}, "sources": dict(self.sources),
                "replays": [{"label": r.label, "aspects": list(r.aspects), "layout": list(r.layout),
                             "tau": r.tau, "acc0": r.acc0, "positions": r.positions,
                             "tau_every_position": r.tau_every_position, "drafts": r.drafts}
                            for r in self.replays],
                "notes": list(self.notes), "unknown": list(self.unknown)}


def _plain(v):
    return list(v) if isinstance(v, tuple) else v


def _run(setup, data, tensors, values: dict, *, label, aspects, num_steps, n, seed, recapture,
         extra=None, past_stop=False) -> Replayed:
    lay = tuple(x if x is not None else ZERO for x in values["layout"])
    rope = values.get("rope") or {}
    if values.get("config"):                 # the config fields that reproduce training (replay.counterfactual)
        m = rebuilt(setup.model, extra=extra, **values["config"]).model
        setup = replace(setup, model=m, cfg=m.cfg)
    with loaded_as(setup, tensors, d2t=values.get("d2t"), embedding=values.get("embedding"),
                   lm_head=values.get("lm_head")), variant(setup.model, **rope):
        r = replay(setup, data, layout=lay, label=label, n=n, seed=seed, num_steps=num_steps, fill="zeros",
                   recapture=recapture, progress=False, past_stop=past_stop)
    s = r.summary()
    every = float(s["simulated_accept_length"]) if s["simulated_accept_length"] is not None else float("nan")
    walked = s["walked_accept_length"]
    return Replayed(label, tuple(aspects), tuple(r.layout), float(walked) if walked is not None else every,
                    float(s["acc_per_step"][0]) if s["acc_per_step"][0] is not None else float("nan"),
                    int(s["positions"]), every, int(s["walked_drafts"]), r.walked_per_position)


def replay_as_served(setup: ReplaySetup, data, view, *, num_steps: int, shipped=(), n: int = 16, seed: int = 0,
                     own_embed: torch.Tensor | None = None, trained_rope: dict | None = None,
                     recapture=None, trained_config: dict | None = None, extra: dict | None = None) -> AsServed:
    """Replay the draft as trained, as `view` serves it, and with each differing aspect served alone.

    shipped: the tensor names the draft's checkpoint carries; own_embed: its shipped embed_tokens (read by the
    caller); trained_rope: RoPE fields the draft was trained with where they differ from its config (e.g.
    {"rope_theta": 1e4}, from the training config or the target), else None; recapture: what captures the
    boundaries a served layout needs and the samples lack (layoutsearch.Recapture; None: they are zeros, noted);
    trained_config: the config fields that reproduce training where the shipped config differs (the counterfactual
    search's `Search.trained_changes`): 'as trained' runs them, the engine reads the shipped ones (aspect
    "config"); extra: checkpoint tensors the shipped config leaves unused, for a field that switches them on."""
    if setup.training_layout is None:
        raise ConfigError("replay.as_served", "no trained layout", expected="the identified training layout",
                          found=None, cause="give training data (its slots are identified against the target)")
    tensors = alternatives(setup, own_embed)
    served = {"layout": tuple(view.value("layout") or ()), "d2t": view.value("d2t") or "checkpoint",
              "embedding": view.value("embedding") or "target", "lm_head": view.value("lm_head") or "own"}
    trained = {"layout": tuple(setup.training_layout), "d2t": "checkpoint", "embedding": "target", "lm_head": "own"}
    sources = {a: view.source(a) for a in served}
    notes = []
    if served["lm_head"] != "own" and "lm_head.weight" not in set(shipped):
        notes.append("the checkpoint has no lm_head: the trained head is not known, so 'as trained' uses what "
                     "eagle3lib's loader gave (the target's)")
        trained["lm_head"] = served["lm_head"]
    # an engine that counts acceptance before its stop check counts a draft of the token after the answer's end
    past_stop = facts.reads(view.engine, "metric", "accepted_past_stop_counted", view.version) is True
    kw = dict(num_steps=num_steps, n=n, seed=seed, recapture=recapture, extra=extra, past_stop=past_stop)
    if recapture is None and any(b is not None and b not in setup.training_layout for b in served["layout"]):
        notes.append("the served layout needs boundaries the training samples lack and nothing recaptures them: "
                     "they are replayed as zeros")
    # aspects the checkpoint alone does not settle: the one that replays best is the one the draft was trained with
    open_ = []
    if tensors.own_embed is not None and tensors.target_embed is not None:
        open_.append(("embedding", {"own": "own", "target": "target"}, "its own embed_tokens", "the target's"))
    if trained_config:                        # the training samples say the shipped config is not what was trained
        served["config"], sources["config"] = {}, "config"
        trained["config"] = dict(trained_config)
        notes.append("config: the training samples are replayed best with " + ", ".join(
            f"{k} {v!r}" for k, v in trained_config.items()) + " (replay.counterfactual); the engine reads the "
            "shipped config")
        if set(trained_config) & set(CONFIG_ROPE):
            trained_rope = None               # the search already settled the RoPE
    if trained_rope:                          # the engine reads the config's RoPE; the target's / training's differ
        served["rope"], sources["rope"] = {}, "config"
        open_.append(("rope", {"config": {}, "other": dict(trained_rope)}, "the config's RoPE",
                      "RoPE " + ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}"
                                          for k, v in trained_rope.items())))
    for aspect, alts, first, second in open_:
        acc = {k: _run(setup, data, tensors, {**trained, aspect: v}, label=f"{aspect} {k}", aspects=(),
                       **kw).acc0 for k, v in alts.items()}
        best = max(acc, key=lambda k: acc[k])
        trained[aspect] = alts[best]
        a, b = acc[list(alts)[0]], acc[list(alts)[1]]
        notes.append(f"{aspect}: step-0 accuracy {a:.3f} with {first} vs {b:.3f} with {second}: the draft was "
                     f"trained with {first if best == list(alts)[0] else second}")
    fill = view.value("mis_shaped")
    with engine_filled(setup, fill, QKV_KEYS) as swapped:      # tensors of another shape, as the engine loads them
        if swapped:
            notes.append(f"{', '.join(swapped)}: held in another shape than the config's; replayed as the engine "
                         f"loads them ({fill}: {FILLS[fill]}; {view.source('mis_shaped')})")
        out = [_run(setup, data, tensors, trained, label="as trained", aspects=(), **kw)]
        diff = [a for a in served if served[a] != trained.get(a)]
        if diff:
            out.append(_run(setup, data, tensors, served, label="as served", aspects=diff, **kw))
            if len(diff) > 1:
                out += [_run(setup, data, tensors, {**trained, a: served[a]}, label=f"{a} as served", aspects=(a,),
                             **kw) for a in diff]
    unknown = {f.cause for f in setup.filled}
    if trained["lm_head"] != "own":
        unknown.add("lm_head_missing")
    return AsServed(num_steps, trained, served, sources, tuple(out), tuple(notes), tuple(sorted(unknown)))

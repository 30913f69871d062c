"""The artifacts the checks read, loaded once and cheaply: configs, tensor headers (no tensor data), data, launch.

One reader per input kind, the only code that parses it (each raises on what it cannot read):
`read_draft_config` (config.json -> DraftConfig; its JSON alone: `read_draft_json`), `tensor_headers` (the
draft's weights: names, shapes, dtypes), `read_target_config` (TargetInfo and its text config),
`read_target_weights` (the target's weight headers), `read_data` (a Dataset), `read_launch` (LaunchArgs),
`read_training_config`.

``art = read_artifacts(draft=..., target=..., data=..., launch=..., training_config=...)``: every input is
optional; one that cannot be read is recorded in ``art.problems`` (input name -> the error's message) and the
checks that need it report ``not checked`` naming it. Nothing in `read_artifacts` raises on a bad input.

`steps.given` builds on these readers: it reads every parameter a user gives once, before any step, with the
same functions (a draft, a target, data, a launch command here are read the way the checks read them), and turns
what they raise into a Problem naming the parameter.
"""
from __future__ import annotations

import dataclasses
from collections import ChainMap
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping, MutableMapping

from ..model.config import DraftConfig, read_config_json
from ..samples.readers import Dataset, open_dataset
from ..errors import Eagle3Error, MissingFileError
from ..engine_kit.launch_reading import LaunchArgs
from ..engines.facts import engines_with_facts
from ..serving.launch import parse_launch
from ..serving.traffic import Traffic, read_traffic
from ..model.safefiles import load_state_dict, read_safetensors_header, weight_files
from ..model.target import TargetInfo, load_target_info
from ..hidden.identify import TrainedLayout, trained_layout

# what each input is called in a `needs` sentence
NEEDS = {"draft": "the draft checkpoint (config.json)", "weights": "the draft's weight files",
         "target": "the target model folder (config.json)", "data": "the draft's training data",
         "launch": "the serving launch command", "training_config": "the config the draft was trained with",
         "engine": "the serving engine (sglang / vllm)", "served_prompts": "served prompt samples",
         "traffic": "the served traffic (--served-traffic / served_traffic: prompts.jsonl + responses.jsonl)",
         "target_weights": "the target's weights (embedding)", "tokenizer": "the target's tokenizer"}


@dataclass(frozen=True)
class Artifacts:
    """What the checks were given, read as configs and headers; None where not given or unreadable."""
    draft_path: str | None = None
    draft_raw: Mapping[str, Any] | None = None
    draft_cfg: DraftConfig | None = None
    tensors: Mapping[str, tuple[tuple[int, ...], str]] | None = None   # draft tensor name -> (shape, dtype)
    target_path: str | None = None
    target_raw: Mapping[str, Any] | None = None      # the text config of a VLM, else the whole config
    target_info: TargetInfo | None = None
    data: Dataset | None = None
    launch: LaunchArgs | None = None
    training_raw: Mapping[str, Any] | None = None
    served_prompts: tuple | None = None
    traffic: Traffic | None = None                   # the served requests and answers (serving.traffic)
    problems: Mapping[str, str] = field(default_factory=dict)
    unjudged: Mapping[str, str] = field(default_factory=dict)   # read, but nothing the checks know applies to it
    trained: TrainedLayout | None = None             # the trained layout and its evidence (hidden.identify)
    replay_dtype: str = "auto"                       # the dtype the checks' replays load the draft in (diagnose's
                                                     # --dtype; "auto": float32 on CPU)
    replay_device: str = "cpu"                       # ... and the device (diagnose's --device)
    read: MutableMapping = field(default_factory=dict, repr=False, compare=False)   # what was read below, by key

    def missing(self, *names: str) -> str | None:
        """The `needs` sentence for the first of `names` that is absent (None when all are there)."""
        have = {"draft": self.draft_cfg, "weights": self.tensors, "target": self.target_info, "data": self.data,
                "launch": self.launch, "training_config": self.training_raw, "served_prompts": self.served_prompts,
                "traffic": self.traffic}
        for n in names:
            if have.get(n) is None:
                why, unjudged = self.problems.get(n), self.unjudged.get(n)
                return NEEDS.get(n, n) + (f" ({unjudged})" if unjudged else
                                          f" (given but unreadable: {why})" if why else "")
        return None

    def once(self, key, read):
        """read(), once for these artifacts and every view of them that shares `read` (`without`, a run's identified
        layout); an error is raised to each caller, never kept."""
        if key not in self.read:
            self.read[key] = read()
        return self.read[key]

    def scoped(self) -> "Artifacts":
        """A view whose loads (the replay setup, tensors, tokenizer, template) are let go with it, seeing what these
        artifacts already hold: one call's checks, one part's replays. The case's artifacts keep only their headers,
        configs and the evidence kept for every part (the identified layout), never a model or a tensor."""
        return dataclasses.replace(self, read=ChainMap({}, self.read))

    def without(self, *names: str) -> "Artifacts":
        """These artifacts as if `names` (fields: "launch", "traffic") were not given, their problems too: what a
        part judges without them (notebook 00: no engine). The reads stay shared."""
        def kept(notes):
            return MappingProxyType({k: v for k, v in notes.items() if k not in names})
        return dataclasses.replace(self, **{n: None for n in names}, problems=kept(self.problems),
                                   unjudged=kept(self.unjudged))

    @property
    def replay_setup(self):
        """The draft loaded for a replay (embedding and lm_head from the target, in `replay_dtype` on
        `replay_device`): loaded on first use, once for every check that replays these artifacts, and inside a
        diagnosis the very setup its parts replay (`replay.run.load_setup`, kept for the case while unchanged).
        Held by these artifacts' `read`: a `scoped` view lets it go with the view."""
        from ..replay.evidence import load_replay
        return self.once(("replay", self.replay_dtype, self.replay_device), lambda: load_replay(
            self.draft_path, self.target_path, device=self.replay_device, dtype=self.replay_dtype))

    @property
    def tokenizer(self):
        """The target's tokenizer, loaded on first use."""
        from ..model.target import load_tokenizer
        return self.once("tokenizer", lambda: load_tokenizer(self.target_path))

    def draft_tensors(self, *keys: str) -> dict:
        """{key: tensor} of the draft's weights for `keys` (those it ships), each read once for these artifacts."""
        want = [k for k in keys if ("draft", k) not in self.read]
        if want:
            got = load_state_dict(self.draft_path, keys=want)
            self.read.update({("draft", k): got.get(k) for k in want})
        return {k: self.read[("draft", k)] for k in keys if self.read[("draft", k)] is not None}

    def target_tensor(self, which: str = "embed"):
        """The target's `which` tensor ("embed", "lm_head": `model.target.load_target_tensor`), read once."""
        from ..model.target import load_target_tensor
        return self.once(("target", which), lambda: load_target_tensor(self.target_path, which))

    @property
    def launch_template(self) -> str | None:
        """The chat template the launch names with --chat-template when it is a readable file (None: the target
        tokenizer's is served, or a built-in template name the workbook cannot render)."""
        name = self.launch.flags.get("chat_template") if self.launch is not None else None
        if not (isinstance(name, str) and Path(name).is_file()):
            return None
        try:
            return self.once(("template", name), lambda: Path(name).read_text())
        except (OSError, UnicodeDecodeError):
            return None

    @property
    def target_model(self):
        """The target model on `replay_device` (for a recapture): the process's one copy of it
        (`hidden.capture.load_target_model`, its own cache), shared with every check and part; never held here."""
        from ..hidden.capture import load_target_model
        return load_target_model(self.target_path, device=self.replay_device)


def tensor_headers(path: Path) -> dict[str, tuple[tuple[int, ...], str]]:
    """{name: (shape, dtype)} of a checkpoint's tensors from safetensors headers (.bin/.pt are loaded)."""
    out: dict[str, tuple[tuple[int, ...], str]] = {}
    for f in weight_files(path):
        if f.suffix == ".safetensors":
            for k, v in read_safetensors_header(f).items():
                if k != "__metadata__":
                    out[k] = (tuple(int(x) for x in v["shape"]), str(v["dtype"]))
        else:
            for k, t in load_state_dict(f).items():
                out[k] = (tuple(t.shape), str(t.dtype).replace("torch.", ""))
    return out


def _text_config(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    return raw["text_config"] if isinstance(raw.get("text_config"), dict) else raw


TARGET_BIN_LIMIT = 1 << 30      # a target's .bin/.pt larger than this is left to the step that loads it


def read_draft_json(path) -> tuple[dict, str]:
    """(raw config, the file it came from) of a draft folder (or its config.json): the JSON only."""
    raw, file = read_config_json(path, "draft")
    return raw, str(file)


def read_draft_config(path) -> tuple[dict, DraftConfig]:
    """(raw config, DraftConfig) of a draft folder (or its config.json); ConfigError naming file and key."""
    raw, source = read_draft_json(path)
    return raw, DraftConfig.from_dict(raw, source=source)


def read_target_config(path) -> tuple[TargetInfo, dict]:
    """(TargetInfo, its text config: a VLM's text_config, else the whole config) of a target folder."""
    info = load_target_info(path)
    return info, dict(_text_config(dict(info.raw)))


def read_target_weights(path, bin_limit: int = TARGET_BIN_LIMIT) -> dict[str, Any]:
    """A target's weight files read cheaply: safetensors headers, .bin/.pt up to `bin_limit` bytes loaded (with
    weights_only=True); file name -> its header or state dict. A config-only folder: {} (the steps that need the
    weights say so)."""
    try:
        files = weight_files(Path(path))
    except MissingFileError:
        return {}
    return {f.name: (read_safetensors_header(f) if f.suffix == ".safetensors" else load_state_dict(f))
            for f in files if f.suffix == ".safetensors" or f.stat().st_size <= bin_limit}


def read_data(path, on_error: str = "skip") -> Dataset:
    """The training data at `path` as a lazy Dataset (format detected); `on_error` "raise": an unreadable sample
    raises when read, "skip": it is left out."""
    return open_dataset(Path(path), hidden_size=None, on_error=on_error)


def read_launch(text: str, engine: str | None = None, strict: bool = False) -> LaunchArgs:
    """A launch command's text parsed (`strict`: an unknown flag or bad JSON value raises)."""
    return parse_launch(text, engine=engine, strict=strict)


def read_training_config(path) -> dict:
    """The config a draft was trained with (a config.json or its folder)."""
    return read_config_json(path, "training")[0]


def read_artifacts(draft=None, target=None, data=None, launch=None, training_config=None,
                   served_prompts=None, engine: str | None = None, served_traffic=None) -> Artifacts:
    """Read whatever is given (paths, dicts, a DraftConfig, a Dataset, a launch string, a served folder) into
    Artifacts."""
    got: dict[str, Any] = {}
    problems: dict[str, str] = {}
    unjudged: dict[str, str] = {}

    def attempt(name, fn):
        try:
            fn()
        except (Eagle3Error, OSError, ValueError, KeyError, TypeError) as e:   # an unreadable input, never a crash
            problems[name] = f"{type(e).__name__}: {e}"

    def read_draft():
        if isinstance(draft, DraftConfig):
            got.update(draft_cfg=draft, draft_raw=MappingProxyType(dict(draft.raw)))
            return
        if isinstance(draft, Mapping):
            raw, src = dict(draft), "<dict>"
        else:             # the steps of read_draft_config: the raw config is kept when it does not parse
            raw, src = read_draft_json(draft)
            got["draft_path"] = str(Path(draft))
        got["draft_raw"] = MappingProxyType(raw)
        got["draft_cfg"] = DraftConfig.from_dict(raw, source=src)

    def read_weights():
        got["tensors"] = MappingProxyType(tensor_headers(Path(got["draft_path"])))

    def read_target():
        if isinstance(target, Mapping):
            got["target_raw"] = MappingProxyType(dict(_text_config(target)))
            arch = (target.get("architectures") or ["?"])[0]
            t = _text_config(target)
            got["target_info"] = TargetInfo("<dict>", str(arch), str(t.get("model_type", "?")),
                                            int(t["num_hidden_layers"]), int(t["hidden_size"]),
                                            int(t["vocab_size"]), bool(t.get("tie_word_embeddings", False)),
                                            MappingProxyType(dict(target)))
            return
        got["target_path"] = str(Path(target))
        info, text = read_target_config(target)
        got.update(target_info=info, target_raw=MappingProxyType(text))

    def read_given_data():
        got["data"] = data if isinstance(data, Dataset) else read_data(data)

    def read_given_launch():
        got["launch"] = launch if isinstance(launch, LaunchArgs) else read_launch(launch, engine=engine)
        known = engines_with_facts()
        if got["launch"].engine not in known:     # read by its engine's home; what that engine does is not in the facts
            unjudged["launch"] = (f"read as a {got.pop('launch').engine} command; the engine facts describe "
                                  f"{', '.join(known)} only")

    def read_training():
        raw = dict(training_config) if isinstance(training_config, Mapping) else read_training_config(training_config)
        got["training_raw"] = MappingProxyType(raw)

    if draft is not None:
        attempt("draft", read_draft)
        if got.get("draft_path"):
            attempt("weights", read_weights)
    if target is not None:
        attempt("target", read_target)
    if data is not None:
        attempt("data", read_given_data)
    if launch is not None:
        attempt("launch", read_given_launch)
    if training_config is not None:
        attempt("training_config", read_training)
    if served_prompts is not None:
        got["served_prompts"] = tuple(served_prompts)
    if served_traffic is not None:          # its answers' token ids and counters (no tokenizer: text answers skip)
        attempt("traffic", lambda: got.update(traffic=served_traffic if isinstance(served_traffic, Traffic) else
                                              read_traffic(served_traffic)))
    art = Artifacts(**got, problems=MappingProxyType(problems), unjudged=MappingProxyType(unjudged))
    if art.draft_cfg is not None or art.data is not None:
        L = art.target_info.num_layers if art.target_info is not None else None
        art = dataclasses.replace(art, trained=trained_layout(art.data, art.draft_cfg, L))
    return art


def with_identified_layout(art: Artifacts, n: int = 3) -> Artifacts:
    """`art` with its trained layout identified by recapturing `n` training samples through the target
    (`art.target_model`), once for these artifacts and their views (the claims stay in `art.trained` beside it)."""
    L = art.target_info.num_layers if art.target_info is not None else None
    return dataclasses.replace(art, trained=art.once(("identified", n), lambda: trained_layout(
        art.data, art.draft_cfg, L, model=art.target_model, n=n)))

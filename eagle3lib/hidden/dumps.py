"""Serving dumps in: SGLang tensor dumps (target boundaries per pass) and eagle3lib dumps (the slots a draft got).

`load_sglang_dump` reads the target's residual boundaries from an SGLang ``--debug-tensor-dump-output-folder``
dump as `capture.Capture`s; `save_dump` / `load_dump` write and read what a serving engine handed the draft's fc.

Dump format "eagle3lib-dump/1" (written by `save_dump`, e.g. by the demo engine; read by `load_dump`):
    <dir>/manifest.json  {"format": "eagle3lib-dump/1", "source": "<writer>", "hidden_size": H,
                          "slots": ["layer_in.4", ...] or null,   # what the writer CLAIMS each slot holds
                          "num_layers": L or null, "files": ["req_00000.safetensors", ...],
                          "engine": {...} or absent,      # optional: what the serving engine says it ran, e.g.
                                    # {"name": "vllm", "version": "0.32.0", "runner": "V1", "aux_layer_ids": [0, 2],
                                    #  "draft_architecture": "Eagle3LlamaForCausalLM", ...}
                          "extras": ["draft_logits", ...] or absent}   # optional per-request tensors
    <dir>/req_<n>.safetensors, one request each:
        "aux"        (T, k*H)  the concatenated tensor handed to the draft's fc, slots in order
        "input_ids"  (T,) int64  token of each row: row t holds the target's state for token t
        "positions"  (T,) int64  optional
        <extra>      any tensor named in "extras" (e.g. "draft_logits" (T, Vd): the engine's draft logits per row)
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import Tensor

from .capture import Capture, Slots, as_slots
from ..errors import DataError, Eagle3Error, MissingFileError
from ..jsonfiles import to_json_value
from ..once import file_text, kept_by_file
from ..model.safefiles import load_safetensors, load_torch_file
from ..progress import track

DUMP_FORMAT = "eagle3lib-dump/1"


_RANK_DIR = re.compile(r"^TP(\d+)_PP(\d+)_Rank\d+_pid\d+$")
_PASS = re.compile(r"^Pass(\d+)\.pt$")
_LAYER_NORM = re.compile(r"^layers\.(\d+)\.input_layernorm$")
# SGLang module-name prefix of the decoder stack, first match wins: causal LMs (Llama, Qwen3, DeepSeek-V3 / Kimi-K2,
# gpt-oss) name it `model.`; VLM wrappers (Kimi-K2.5) put the causal LM under `language_model.`.
DUMP_PREFIXES = ("model.", "language_model.model.", "model.language_model.")


def _decoder_prefix(d: dict) -> str:
    for p in DUMP_PREFIXES:
        if any(k.startswith(p) and (k[len(p):] in ("embed_tokens", "norm") or _LAYER_NORM.match(k[len(p):]))
               for k in d):
            return p
    return DUMP_PREFIXES[0]


def _sglang_pass_files(root: Path) -> dict[int, list[Path]]:
    if (root / "target").is_dir():  # EAGLE mode: DIR/target and DIR/draft
        root = root / "target"
    ranks = [d for d in root.iterdir() if d.is_dir() and _RANK_DIR.match(d.name)] if root.is_dir() else []
    if not ranks and root.is_dir() and any(_PASS.match(f.name) for f in root.iterdir()):
        ranks = [root]  # pointed straight at one rank folder
    if not ranks:
        raise MissingFileError(f"SGLang dump {root}", "no rank folders with Pass files",
                               expected="TP<t>_PP<p>_Rank<r>_pid<n>/Pass<NNNNN>.pt (under target/ in EAGLE mode)",
                               found="nothing", cause="wrong folder, or the server never ran a forward pass")
    passes: dict[int, list[Path]] = {}
    for d in ranks:  # tensor-parallel rank 0 only: residual-stream states are replicated across TP ranks
        m = _RANK_DIR.match(d.name)
        if m and m.group(1) != "0":
            continue
        for f in d.iterdir():
            if _PASS.match(f.name):
                passes.setdefault(int(_PASS.match(f.name).group(1)), []).append(f)
    return passes


def load_sglang_dump(path, *, num_layers: int | None = None, passes=None, decode: bool = False,
                     progress: bool = False) -> list[Capture]:
    """Target boundaries from an SGLang tensor dump, one Capture per forward pass (extend passes by default).

    SGLang hooks every leaf module (names under the decoder prefix, `model.` or a VLM's `language_model.model.`,
    DUMP_PREFIXES): `model.embed_tokens` gives `embed`; the fused add-RMSNorm
    `model.layers.<i>.input_layernorm` returns [normed, residual] with residual = input of layer i (`layer_in.i`);
    `model.norm` returns [final_postnorm, final_prenorm]. Aux states the draft receives are not a module output,
    so they are not in the dump: compare these served boundaries with the HF reference, or test the draft's dumped
    `model.fc` output against candidate layouts (`compare.identify_fc_input`).
    """
    files = _sglang_pass_files(Path(path))
    out = []
    for n in track(sorted(files), desc="sglang dump", progress=progress, unit="pass"):
        if passes is not None and n not in passes:
            continue
        d: dict = {}
        for f in files[n]:  # pipeline-parallel ranks hold different layers of the same pass
            obj = load_torch_file(f)  # weights_only=True; a code-carrying pickle raises UnsafeFileError
            if not isinstance(obj, dict):
                raise DataError(str(f), "not an SGLang tensor-dump pass", expected="a dict {module name: output}",
                                found=type(obj).__name__)
            d.update(obj)
        ids = d.get("model.forward_batch_info.input_ids")
        seq_lens = d.get("model.forward_batch_info.seq_lens")
        if ids is None:
            continue
        if not decode and seq_lens is not None and ids.numel() <= seq_lens.numel():
            continue  # one token per request: a decode pass
        states: dict[str, Tensor] = {}
        pre = _decoder_prefix(d)
        if isinstance(d.get(pre + "embed_tokens"), Tensor):
            states["embed"] = d[pre + "embed_tokens"]
        for key, val in d.items():
            m = _LAYER_NORM.match(key[len(pre):]) if key.startswith(pre) else None
            if m and int(m.group(1)) > 0 and isinstance(val, list) and len(val) == 2:
                states[f"layer_in.{int(m.group(1))}"] = val[1]
        if isinstance(d.get(pre + "norm"), list) and len(d[pre + "norm"]) == 2:
            states["final_postnorm"], states["final_prenorm"] = d[pre + "norm"]
        if not states:
            continue
        L = num_layers or 1 + max([int(k.split(".")[1]) for k in states if k.startswith("layer_in.")] + [0])
        states = {k: v for k, v in states.items() if v.shape[0] == ids.numel()}
        dt = next(iter(states.values())).dtype
        out.append(Capture(states, ids.long(), L, dt, f"sglang {path} pass {n}"))
    if not out:
        raise DataError(f"SGLang dump {path}", "no pass held residual-stream states",
                        expected="model.embed_tokens / model.layers.<i>.input_layernorm / model.norm outputs",
                        found=f"{len(files)} pass file(s)",
                        cause="--debug-tensor-dump-layers excluded them, or only decode passes were dumped")
    return out


@dataclass(frozen=True)
class Dump:
    """A serving dump: one Slots per request, the manifest, and what could not be read."""
    requests: tuple[Slots, ...]
    manifest: dict
    notes: tuple[str, ...] = ()
    root: Path = Path(".")

    def __len__(self) -> int:
        return len(self.requests)

    def __getitem__(self, i: int) -> Slots:
        return self.requests[i]

    @property
    def engine(self) -> dict | None:
        """What the writing engine said it ran (manifest "engine"), or None."""
        return self.manifest.get("engine")

    def extra(self, i: int, name: str) -> Tensor:
        """Per-request tensor `name` (one of manifest "extras") of request i (the file `self[i]` was read from)."""
        if name not in (self.manifest.get("extras") or ()):
            raise DataError(f"dump {self.root}", f"no extra tensor '{name}'", expected=self.manifest.get("extras"),
                            found=name)
        return load_safetensors(Path(self.requests[i].source))[name]


def save_dump(path, auxes, input_ids, *, slots, hidden_size: int, source: str, num_layers: int | None = None,
              positions=None, engine: dict | None = None, extras: dict | None = None) -> Path:
    """Write requests (aux (T, k*H) or (T, k, H), ids (T,)) as an eagle3lib-dump/1 directory.

    `engine`: what the serving engine says it ran (kept in the manifest; `slots` stays None unless the engine itself
    names the boundaries). `extras`: name -> one tensor per request, stored beside "aux" (e.g. "draft_logits")."""
    extras = dict(extras or {})
    reserved = {"aux", "input_ids", "positions"} & set(extras)
    if reserved:
        raise DataError("save_dump(extras=...)", "extra names clash with the dump's own tensors",
                        expected="names other than aux / input_ids / positions", found=sorted(reserved))
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    files = []
    for n, (aux, ids) in enumerate(zip(auxes, input_ids)):
        aux = torch.as_tensor(aux)
        tensors = {"aux": aux.reshape(aux.shape[0], -1).contiguous(),      # (T, k, H) -> (T, k*H)
                   "input_ids": torch.as_tensor(ids).reshape(-1).long().contiguous()}
        if positions is not None:
            tensors["positions"] = torch.as_tensor(positions[n]).reshape(-1).long().contiguous()
        for name, per_request in extras.items():
            tensors[name] = torch.as_tensor(per_request[n]).contiguous()
        files.append(f"req_{n:05d}.safetensors")
        save_file(tensors, str(root / files[-1]))
    manifest = {"format": DUMP_FORMAT, "source": source, "hidden_size": hidden_size,
                "slots": list(slots) if slots is not None else None, "num_layers": num_layers, "files": files}
    if engine is not None:
        manifest["engine"] = to_json_value(dict(engine), "save_dump(engine=...)")
    if extras:
        manifest["extras"] = sorted(extras)
    (root / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return root


def load_dump(path) -> Dump:
    """Read an eagle3lib-dump/1 directory (see module docstring); unreadable request files become notes. Read once
    per case (`once`): the inputs' check, the served layout, the replay and the diffing share one."""
    root = Path(path)
    if root.is_dir():
        return kept_by_file("dump", root, lambda: _load_dump(root))
    return _load_dump(root)


def _load_dump(root: Path) -> Dump:
    mf = root / "manifest.json"
    if not mf.exists():
        raise MissingFileError(f"dump {root}", "manifest.json is missing" if root.exists() else "no such directory",
                               expected="manifest.json + req_<n>.safetensors",
                               found=sorted(p.name for p in root.iterdir())[:8] if root.is_dir() else "nothing")
    try:
        man = json.loads(file_text(mf))
    except json.JSONDecodeError as e:
        raise DataError(f"dump manifest {mf}", "not valid JSON", expected="a JSON object (eagle3lib dump manifest)",
                        found=str(e), cause="an interrupted write, or not an eagle3lib dump") from None
    if not isinstance(man, dict) or man.get("format") != DUMP_FORMAT or not isinstance(man.get("files"), list):
        raise DataError(f"dump manifest {mf}", "not an eagle3lib dump manifest",
                        expected=f'"format": "{DUMP_FORMAT}" and a "files" list',
                        found=man.get("format") if isinstance(man, dict) else type(man).__name__)
    reqs, notes = [], []
    for name in man["files"]:
        f = root / name
        try:
            d = load_safetensors(f)  # header checked first: a corrupt file is a CheckpointError, not a Rust panic
            if "aux" not in d:
                raise DataError(str(f), "no 'aux' tensor", expected="aux (T, k*H)", found=sorted(d))
            reqs.append(as_slots(d["aux"], man.get("slots"), hidden_size=man.get("hidden_size"),
                                 input_ids=d.get("input_ids"), source=str(f)))
        except (OSError, Eagle3Error) as e:
            notes.append(f"{name}: skipped ({'missing file' if not f.exists() else e})")
    if not reqs:
        raise DataError(f"dump {root}", "no request file could be read", expected=man["files"][:4], found=notes[:4])
    return Dump(tuple(reqs), man, tuple(notes), root)


def dump_engine(path) -> dict:
    """What the serving engine said it ran, from an eagle3lib dump's manifest ("engine"; {} for a dump without it, an
    SGLang debug tensor dump, or a folder that is not an eagle3lib dump: the dump's reader says why elsewhere)."""
    mf = Path(path) / "manifest.json"
    try:
        man = json.loads(file_text(mf))
    except (OSError, json.JSONDecodeError):
        return {}
    engine = man.get("engine") if isinstance(man, dict) and man.get("format") == DUMP_FORMAT else None
    return engine if isinstance(engine, dict) else {}

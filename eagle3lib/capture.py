"""Hidden states in: reference captures of a target's residual boundaries, and the slots a draft is fed.

`capture(model, input_ids)` runs an HF causal LM with plain forward (pre-)hooks and keeps `embed`, `layer_in.i`,
`final_prenorm`, `final_postnorm` (layout.py names; or only those asked for, stopping after the deepest);
`load_sglang_dump` reads the same boundaries from an SGLang ``--debug-tensor-dump-output-folder`` dump. `Slots` are
the k tensors a draft receives: `as_slots` (training samples, any tensors), `load_dump` / `save_dump` (serving dumps).

Dump format "eagle3lib-dump/1" (written by `save_dump`, e.g. by the demo engine; read by `load_dump`):
    <dir>/manifest.json  {"format": "eagle3lib-dump/1", "source": "<writer>", "hidden_size": H,
                          "slots": ["layer_in.4", ...] or null,   # what the writer CLAIMS each slot holds
                          "num_layers": L or null, "files": ["req_00000.safetensors", ...]}
    <dir>/req_<n>.safetensors, one request each:
        "aux"        (T, k*H)  the concatenated tensor handed to the draft's fc, slots in order
        "input_ids"  (T,) int64  token of each row: row t holds the target's state for token t
        "positions"  (T,) int64  optional
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import torch
import tqdm
from safetensors.torch import save_file
from torch import Tensor

from .errors import CheckpointError, ConfigError, DataError, Eagle3Error, LayoutError, MissingFileError
from .layout import boundary_names, input_index, normalize, parse_layout
from .safefiles import load_safetensors, load_torch_file

_FINALS = ("final_prenorm", "final_postnorm")
DUMP_FORMAT = "eagle3lib-dump/1"


@dataclass(frozen=True)
class Capture:
    """Residual-stream states of one target run: boundary name -> (T, H), or (B, T, H) for a batch."""
    states: dict[str, Tensor]   # boundary name (layout.py) -> (T, H) or (B, T, H), on CPU
    input_ids: Tensor           # (T,) or (B, T) int64
    num_layers: int             # L, the target's decoder layers
    dtype: torch.dtype          # dtype the target computed in
    source: str = "transformers"

    @property
    def names(self) -> list[str]:
        """Captured boundary names, in stream order."""
        order = boundary_names(self.num_layers)
        return [n for n in order if n in self.states]

    @property
    def hidden_size(self) -> int:
        """H, the width of every state."""
        return int(next(iter(self.states.values())).shape[-1])

    @property
    def batched(self) -> bool:
        """True for a (B, T, H) capture."""
        return self.input_ids.dim() == 2

    def __getitem__(self, name: str) -> Tensor:
        key = normalize(name, self.num_layers)
        if key not in self.states:
            raise LayoutError(f"capture ({self.source})", f"boundary '{key}' was not captured",
                              expected=self.names, found=name,
                              cause="capture(..., only=...) left it out, or the dump did not hold it")
        return self.states[key]

    def stack(self, layout) -> Tensor:
        """States of `layout` stacked on a slot axis: (T, k, H) or (B, T, k, H)."""
        names = parse_layout(layout, self.num_layers)
        return torch.stack([self[n] for n in names], dim=-2)  # k x (.., T, H) -> (.., T, k, H)

    def concat(self, layout) -> Tensor:
        """States of `layout` concatenated as a draft's fc takes them: (T, k*H) or (B, T, k*H)."""
        return torch.cat([self[n] for n in parse_layout(layout, self.num_layers)], dim=-1)  # -> (.., T, k*H)

    def sample(self, b: int) -> Capture:
        """The b-th sequence of a batched capture, as an unbatched Capture."""
        if not self.batched:
            return self
        return Capture({k: v[b] for k, v in self.states.items()}, self.input_ids[b], self.num_layers,
                       self.dtype, f"{self.source}[{b}]")


def _parts(model):
    """(embed_tokens, layers, norm) of a Llama-style causal LM (or of its bare decoder)."""
    base = model.model if hasattr(model, "model") and hasattr(model.model, "layers") else model
    missing = [a for a in ("embed_tokens", "layers", "norm") if not hasattr(base, a)]
    if missing:
        raise LayoutError(f"target model {type(model).__name__}", "not a Llama-style decoder",
                          expected="model.model.{embed_tokens, layers, norm}", found=f"missing {missing}",
                          cause="an architecture whose decoder stack is named differently")
    return base, base.layers, base.norm


def _requested(only, num_layers: int) -> list[str]:
    if only is None:
        return boundary_names(num_layers)
    names = list(parse_layout(only, num_layers))
    if any(n in _FINALS for n in names):   # both come from the same hook: keep the pair
        names += [n for n in _FINALS if n not in names]
    return names


class _Stop(Exception):
    """Raised from a hook once every requested boundary is captured."""


def capture(model, input_ids, *, only=None, attention_mask: Tensor | None = None, device=None, dtype=None,
            progress: bool = False) -> Capture:
    """Run the target on (T,) or (B, T) ids and keep every (or each `only`) residual boundary."""
    base, layers, norm = _parts(model)
    L = len(layers)
    ids = torch.as_tensor(input_ids, dtype=torch.long)
    if ids.dim() not in (1, 2) or ids.numel() == 0:
        raise LayoutError("capture input_ids", "token ids must be (T,) or (B, T) and non-empty",
                          expected="(T,) or (B, T)", found=tuple(ids.shape))
    if device is not None or dtype is not None:  # moves / casts the model in place
        model.to(device=device, dtype=dtype)
    p = next(model.parameters())
    wanted = _requested(only, L)
    deepest = max(input_index(n, L) for n in wanted)   # L when a final state is asked for
    got: dict[str, Tensor] = {}
    bar = tqdm.tqdm(total=deepest, desc="capture", disable=not progress)

    def keep(name, t):
        t = t.detach().to("cpu", copy=True)
        got[name] = t[0] if ids.dim() == 1 else t   # (1, T, H) -> (T, H)

    def pre_hook(i):
        def hook(module, args, kwargs):
            x = args[0] if args else kwargs["hidden_states"]
            name = "embed" if i == 0 else f"layer_in.{i}"
            if name in wanted:
                keep(name, x)
            bar.update(1 if i else 0)
            if i == deepest:
                raise _Stop
        return hook

    def norm_pre(module, args):
        keep("final_prenorm", args[0])

    def norm_out(module, args, out):
        keep("final_postnorm", out)
        raise _Stop

    handles = [layers[i].register_forward_pre_hook(pre_hook(i), with_kwargs=True) for i in range(min(deepest + 1, L))]
    if deepest == L:
        handles += [norm.register_forward_pre_hook(norm_pre), norm.register_forward_hook(norm_out)]
    batch = ids if ids.dim() == 2 else ids[None]                     # (T,) -> (1, T)
    mask = None if attention_mask is None else torch.as_tensor(attention_mask).to(p.device)
    if mask is not None and mask.dim() == 1:
        mask = mask[None]
    try:
        with torch.inference_mode():
            base(input_ids=batch.to(p.device), attention_mask=mask, use_cache=False)
    except _Stop:
        pass
    finally:
        for h in handles:
            h.remove()
        bar.update(bar.total - bar.n)
        bar.close()
    missing = [n for n in wanted if n not in got]
    if missing:
        raise LayoutError(f"capture of {type(model).__name__}", "hooks did not fire for some boundaries",
                          expected=wanted, found=sorted(got), cause="the model skips layers or its forward "
                          "does not call model.layers[i] / model.norm")
    return Capture({n: got[n] for n in wanted}, ids.clone(), L, p.dtype)


def capture_batch(model, sequences, *, only=None, batch_size: int = 8, pad_id: int = 0, device=None, dtype=None,
                  progress: bool = False) -> list[Capture]:
    """Capture many token sequences of different lengths (right-padded in batches); one Capture per sequence."""
    seqs = [torch.as_tensor(s, dtype=torch.long).reshape(-1) for s in sequences]
    out: list[Capture] = []
    for start in tqdm.tqdm(range(0, len(seqs), batch_size), desc="capture", disable=not progress):
        chunk = seqs[start:start + batch_size]
        T = max(len(s) for s in chunk)
        ids = torch.full((len(chunk), T), pad_id, dtype=torch.long)
        mask = torch.zeros((len(chunk), T), dtype=torch.long)
        for b, s in enumerate(chunk):
            ids[b, :len(s)], mask[b, :len(s)] = s, 1
        cap = capture(model, ids, only=only, attention_mask=mask, device=device, dtype=dtype)
        for b, s in enumerate(chunk):
            n = len(s)  # right padding: the first n positions are the real tokens
            out.append(Capture({k: v[b, :n] for k, v in cap.states.items()}, s.clone(), cap.num_layers, cap.dtype))
    return out


def capture_for_layout(model, input_ids, layout, **kwargs) -> Tensor:
    """The aux tensor a draft trained on `layout` takes: (T, k*H) (or (B, T, k*H)), slots in layout order."""
    L = len(_parts(model)[1])
    names = parse_layout(layout, L)
    return capture(model, input_ids, only=names, **kwargs).concat(names)


def load_target_model(path, device="cpu", dtype=None):
    """`AutoModelForCausalLM.from_pretrained(path)` (no remote code), on `device` in `dtype`, in eval mode."""
    import transformers

    p = Path(path)
    if not p.exists():
        raise MissingFileError(f"target model {path}", "no such directory",
                               expected="a local HF model folder with config.json and weights", found="nothing")
    if p.is_dir() and not (p / "config.json").exists():
        raise MissingFileError(f"target model {path}", "config.json is missing", expected="config.json",
                               found=sorted(x.name for x in p.iterdir())[:10])
    if isinstance(dtype, str) and dtype != "auto":
        dtype = getattr(torch, dtype.replace("torch.", ""), None) or dtype
    key = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(str(p), trust_remote_code=False,
                                                                  **({key: dtype} if dtype is not None else {}))
    except ValueError as e:
        raise ConfigError(f"target model {path}/config.json", "transformers cannot build this architecture",
                          expected="an architecture shipped with transformers (no remote code)", found=str(e)[:200],
                          cause="a custom modeling file (trust_remote_code is refused) or a too-old transformers")
    except (OSError, RuntimeError) as e:
        raise CheckpointError(f"target model {path}", "weights could not be loaded", found=str(e)[:200],
                              cause="missing or truncated weight shards, or shapes that disagree with config.json")
    return model.to(device).eval()


_RANK_DIR = re.compile(r"^TP(\d+)_PP(\d+)_Rank\d+_pid\d+$")
_PASS = re.compile(r"^Pass(\d+)\.pt$")
_LAYER_NORM = re.compile(r"^model\.layers\.(\d+)\.input_layernorm$")


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

    SGLang hooks every leaf module: `model.embed_tokens` gives `embed`; the fused add-RMSNorm
    `model.layers.<i>.input_layernorm` returns [normed, residual] with residual = input of layer i (`layer_in.i`);
    `model.norm` returns [final_postnorm, final_prenorm]. Aux states the draft receives are not a module output,
    so they are not in the dump: compare these served boundaries with the HF reference, or test the draft's dumped
    `model.fc` output against candidate layouts (`compare.identify_fc_input`).
    """
    files = _sglang_pass_files(Path(path))
    out = []
    for n in tqdm.tqdm(sorted(files), desc="sglang dump", disable=not progress):
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
        if isinstance(d.get("model.embed_tokens"), Tensor):
            states["embed"] = d["model.embed_tokens"]
        for key, val in d.items():
            m = _LAYER_NORM.match(key)
            if m and int(m.group(1)) > 0 and isinstance(val, list) and len(val) == 2:
                states[f"layer_in.{int(m.group(1))}"] = val[1]
        if isinstance(d.get("model.norm"), list) and len(d["model.norm"]) == 2:
            states["final_postnorm"], states["final_prenorm"] = d["model.norm"]
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
class Slots:
    """The k tensors a draft receives (or was trained on), each (T, H), with the layout their writer declares."""
    tensors: tuple[Tensor, ...]          # k x (T, H), slot order
    layout: tuple[str, ...] | None       # declared boundary of each slot (layout.py names), None = unknown
    input_ids: Tensor | None = None      # (T,) token of each row
    source: str = ""
    notes: tuple[str, ...] = ()

    @property
    def k(self) -> int:
        """Number of slots."""
        return len(self.tensors)

    @property
    def num_tokens(self) -> int:
        """T, the rows of every slot."""
        return int(self.tensors[0].shape[0])


def as_slots(x, layout=None, *, k: int | None = None, hidden_size: int | None = None, input_ids=None,
             source: str | None = None) -> Slots:
    """Slots from a datasets.Sample, a (T, k, H) / (T, k*H) / (1, T, k*H) tensor, or a list of (T, H) tensors."""
    notes: list[str] = []
    if hasattr(x, "aux"):   # datasets.Sample
        layout = layout if layout is not None else x.layout
        input_ids = x.input_ids if input_ids is None else input_ids
        source, x = source or x.source, x.aux
    names = parse_layout(layout) if layout is not None else None
    k = k or (len(names) if names else None)
    where = f"aux slots ({source or 'tensors'})"
    if isinstance(x, (list, tuple)):
        parts = [t.reshape(t.shape[-2], t.shape[-1]) for t in x]          # (1, T, H) -> (T, H)
    else:
        t = torch.as_tensor(x)
        if t.dim() == 4 and t.shape[0] == 1:
            t = t[0]                                                       # (1, T, k, H) -> (T, k, H)
        if t.dim() == 3 and t.shape[0] == 1 and (k is None or t.shape[1] != k):
            t = t[0]                                                       # (1, T, k*H) -> (T, k*H)
        if t.dim() == 2:
            W = t.shape[1]
            k = k or (W // hidden_size if hidden_size else None)
            if not k or W % k:
                raise LayoutError(where, "cannot split the concatenated aux width into slots",
                                  expected=f"a width divisible by the slot count ({k or 'unknown'})", found=W,
                                  cause="declare the layout or hidden_size; or the dump holds a different k")
            t = t.reshape(t.shape[0], k, W // k)                           # (T, k*H) -> (T, k, H)
        if t.dim() != 3:
            raise LayoutError(where, "unrecognised aux shape", expected="(T, k, H), (T, k*H) or (1, T, k*H)",
                              found=tuple(t.shape))
        parts = list(t.unbind(1))                                          # (T, k, H) -> k x (T, H)
    if names is not None and len(names) != len(parts):
        notes.append(f"declared layout has {len(names)} slots but the tensors hold {len(parts)}: declaration ignored")
        names = None
    lens = {p.shape[0] for p in parts}
    if len(lens) > 1:
        n = min(lens)
        notes.append(f"slots have different token counts {sorted(lens)}: cut to the first {n}")
        parts = [p[:n] for p in parts]
    ids = None if input_ids is None else torch.as_tensor(input_ids).reshape(-1).long()
    return Slots(tuple(parts), names, ids, source or "tensors", tuple(notes))


@dataclass(frozen=True)
class Dump:
    """A serving dump: one Slots per request, the manifest, and what could not be read."""
    requests: tuple[Slots, ...]
    manifest: dict
    notes: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.requests)

    def __getitem__(self, i: int) -> Slots:
        return self.requests[i]


def save_dump(path, auxes, input_ids, *, slots, hidden_size: int, source: str, num_layers: int | None = None,
              positions=None) -> Path:
    """Write requests (aux (T, k*H) or (T, k, H), ids (T,)) as an eagle3lib-dump/1 directory."""
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    files = []
    for n, (aux, ids) in enumerate(zip(auxes, input_ids)):
        aux = torch.as_tensor(aux)
        tensors = {"aux": aux.reshape(aux.shape[0], -1).contiguous(),      # (T, k, H) -> (T, k*H)
                   "input_ids": torch.as_tensor(ids).reshape(-1).long().contiguous()}
        if positions is not None:
            tensors["positions"] = torch.as_tensor(positions[n]).reshape(-1).long().contiguous()
        files.append(f"req_{n:05d}.safetensors")
        save_file(tensors, str(root / files[-1]))
    manifest = {"format": DUMP_FORMAT, "source": source, "hidden_size": hidden_size,
                "slots": list(slots) if slots is not None else None, "num_layers": num_layers, "files": files}
    (root / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return root


def load_dump(path) -> Dump:
    """Read an eagle3lib-dump/1 directory (see module docstring); unreadable request files become notes."""
    root = Path(path)
    mf = root / "manifest.json"
    if not mf.exists():
        raise MissingFileError(f"dump {root}", "manifest.json is missing" if root.exists() else "no such directory",
                               expected="manifest.json + req_<n>.safetensors",
                               found=sorted(p.name for p in root.iterdir())[:8] if root.is_dir() else "nothing")
    try:
        man = json.loads(mf.read_text())
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
    return Dump(tuple(reqs), man, tuple(notes))

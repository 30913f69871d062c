"""What the real SGLang did with a draft, from its in-process hook: the dump of what the draft's fc got, and the load.

`serve(..., hook=True)` leaves ``hook/`` in its folder (inside/hook/sitecustomize.py): ``events.jsonl`` and one
``calls/<pid>_<n>.safetensors`` per prefill the draft ran. This module reads them back:
- `load_events(hook)` -> `SglangLoad`: each checkpoint key and whether a parameter loader of SGLang's draft took it
  (`dropped`: keys nothing took, d2t excepted when SGLang turned it into its hot token map), the draft's fc width and
  flags, whether SGLang replaced the draft's embedding / lm_head by the target's, the ids the target was given and
  the layers it captured;
- `dump_from_hook(run_dir, out)` -> an eagle3lib dump ("eagle3lib-dump/1", `hidden.dumps`): per request the
  (T, k*H) tensor SGLang handed the draft's fc at prefill, with the prompt's own tokens (row t holds the target's
  state for token t; SGLang shifts the draft's input ids by one, and the hook's rows are matched back to the prompt
  they came from). Its manifest's "engine" says what SGLang ran; its "slots" stay None: `hidden.compare.
  dump_boundaries` names the boundaries against an HF capture.
    run = serve(target, draft, "out/served", prompts=prompts, n=4, concurrency=1, hook=True)
    d = dump_from_hook("out/served", "out/dump"); load_events("out/served/hook").dropped
CLI: ``python -m eagle3lib.sglang_engine.dump --target T --draft D --prompts FILE --out DIR [--n 4]``
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..engine_kit.prompts import read_prompts
from ..errors import DataError, EngineError, MissingFileError
from ..hidden.compare import dump_boundaries
from ..hidden.dumps import Dump, load_dump, save_dump
from ..jsonfiles import json_lines
from ..model.safefiles import load_safetensors
from .serve import serve

D2T_KEYS = ("d2t",)             # SGLang's llama_eagle3.load_weights turns these into hot_token_id, no loader runs
SKIPPED_ON_PURPOSE = ("t2d",)   # ... and skips these on purpose


@dataclass(frozen=True)
class SglangLoad:
    """The draft as SGLang's own code loaded it (what the hook saw)."""

    model_class: str | None
    keys: tuple[dict, ...]              # {"key", "shape", "dtype", "loaded"} per checkpoint tensor, in load order
    fc_in_features: int | None
    num_aux_hidden_states: int | None
    norm_before_fc: bool | None
    fc_norm: bool | None
    norm_output: bool | None
    d2t_read: bool | None
    load_lm_head_from_target: bool | None
    embedding_replaced: bool | None     # the draft runs on the target's embedding (set_embed / set_embed_and_head)
    lm_head_replaced: bool | None       # the draft runs on the target's lm_head (set_embed_and_head)
    layer_ids: tuple[int, ...] | None   # the ids SGLang handed the target (set_eagle3_layers_to_capture)
    layers_to_capture: tuple[int, ...] | None   # the layers whose input the target then captures
    target_class: str | None
    target_layers: int | None
    notes: tuple[str, ...] = field(default_factory=tuple)   # the hook's own skips and errors
    zero_rows: dict = field(default_factory=dict)   # parameter -> [rows left all zero, rows] once loaded

    @property
    def dropped(self) -> tuple[str, ...]:
        """Checkpoint keys no loader took: silently dropped (d2t, read into the hot token map, and t2d, skipped by
        design, excepted)."""
        return tuple(k["key"] for k in self.keys if not k["loaded"] and k["key"].split(".")[-1] not in
                     D2T_KEYS + SKIPPED_ON_PURPOSE)

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()} | \
            {"dropped": list(self.dropped)}


def load_events(hook) -> SglangLoad:
    """The hook's events.jsonl read back; MissingFileError when the hook never ran (no SGLang process imported it)."""
    path = Path(hook) / "events.jsonl"
    if not path.is_file():
        raise MissingFileError(str(path), "the in-process hook wrote no events",
                               expected="events.jsonl from inside/hook/sitecustomize.py",
                               found="nothing", cause="the server was not started with hook=True, or died first")
    ev: dict[str, dict] = {}
    notes = []
    for _, rec in json_lines(path):
        kind = rec.get("event")
        if kind in ("hook_skipped", "hook_error"):
            notes.append(f"{kind}: {rec.get('module') or rec.get('where')}: {rec.get('why') or rec.get('error')}")
        ev.setdefault(kind, rec)
    loaded, cap = ev.get("draft_loaded", {}), ev.get("target_capture", {})
    embed = ev.get("set_embed_and_head") or ev.get("set_embed")
    ids = cap.get("layer_ids")
    kept = cap.get("layers_to_capture")
    return SglangLoad(loaded.get("model_class"), tuple(loaded.get("keys") or ()), loaded.get("fc_in_features"),
                      loaded.get("num_aux_hidden_states"), loaded.get("norm_before_fc"), loaded.get("fc_norm"),
                      loaded.get("norm_output"), loaded.get("d2t_read"), loaded.get("load_lm_head_from_target"),
                      embed.get("draft_embedding_replaced") if embed else None,
                      embed.get("lm_head_replaced") if embed else None,
                      tuple(ids) if ids is not None else None, tuple(kept) if kept is not None else None,
                      cap.get("target_class"), cap.get("num_layers"), tuple(notes),
                      dict(loaded.get("zero_rows") or {}))


def _segments(hook: Path):
    """(aux, draft input ids, positions) per request segment, in the order the engine ran them."""
    calls = sorted((hook / "calls").glob("*.safetensors"),
                   key=lambda p: tuple(int(x) for x in p.stem.split("_")))
    for f in calls:
        t = load_safetensors(f)
        lens = t["extend_seq_lens"].tolist() if "extend_seq_lens" in t else [int(t["input_ids"].numel())]
        start = 0
        for n in lens:
            yield t["aux"][start:start + n], t["input_ids"][start:start + n], t["positions"][start:start + n]
            start += n


def dump_from_hook(run_dir, out, *, n: int | None = None) -> Dump:
    """The eagle3lib dump of a hooked serving run (`serve(..., hook=True)`): one request per prompt the engine
    prefilled whole (positions from 0), matched to its prompt by SGLang's shifted ids (the draft reads token t+1
    beside the target's state for token t); the first `n` such requests (None: all)."""
    run_dir, out = Path(run_dir), Path(out)
    hook = run_dir / "hook"
    load = load_events(hook)
    prompts = [p for p in read_prompts(run_dir / "prompts.jsonl") if p.token_ids is not None]
    auxes, ids, positions = [], [], []
    for aux, shifted, pos in _segments(hook):
        if int(pos[0]) != 0:
            continue                                  # a prefill of a cached prefix's tail: not a whole prompt
        T = int(shifted.numel())
        match = next((p for p in prompts if len(p.token_ids) == T and list(p.token_ids[1:]) == shifted[:-1].tolist()),
                     None)
        if match is None:
            continue
        auxes.append(aux)
        ids.append(list(match.token_ids))
        positions.append(pos)
        if n is not None and len(auxes) >= n:
            break
    if not auxes:
        raise DataError(str(hook / "calls"), "no prefill of the draft matches a prompt sent",
                        expected="one recorded fc input per prompt, its shifted ids = the prompt's ids from 1 on",
                        found=f"{len(list((hook / 'calls').glob('*.safetensors')))} recorded calls",
                        cause="the prompts were sent as text, or the server's radix cache served a prefix")
    # one slot's width is the target's hidden size (fc takes num_aux_hidden_states of them); a draft fed the final
    # state (use_aux_hidden_state false: SGLang captures no aux layer) gets one slot of that width
    width = int(auxes[0].shape[1])
    H = (load.fc_in_features // load.num_aux_hidden_states if load.fc_in_features and load.num_aux_hidden_states
         else width // (len(load.layers_to_capture or ()) or 1))
    H = H if H and width % H == 0 else width
    served = json.loads((run_dir / "served.json").read_text()) if (run_dir / "served.json").is_file() else {}
    engine = {"name": "sglang", "mode": "HTTP server, in-process hook (sglang_engine/inside/hook)",
              "hook": "llama_eagle3.LlamaModel.forward: forward_batch.spec_info.hidden_states at prefill (EXTEND)",
              "version": served.get("version"), "draft_class": load.model_class, "target_class": load.target_class,
              "aux_layer_ids": list(load.layer_ids) if load.layer_ids is not None else None,
              "layers_to_capture": list(load.layers_to_capture) if load.layers_to_capture is not None else None,
              "num_aux_hidden_states": load.num_aux_hidden_states, "fc_in_features": load.fc_in_features,
              "norm_before_fc": load.norm_before_fc, "fc_norm": load.fc_norm, "target_layers": load.target_layers,
              "speculative": served.get("effective"), "load": load.to_dict()}
    save_dump(out, auxes, ids, slots=None, hidden_size=H, source=f"sglang {served.get('version')} server "
              "(sglang_engine.dump)", num_layers=load.target_layers, positions=positions, engine=engine)
    return load_dump(out)


def dump(target, draft, out, *, prompts, n: int | None = 4, steps: int = 3, topk: int = 1, ndt: int = 4,
         max_tokens: int = 4, hide_amx: bool = False) -> Dump:
    """Serve `draft` with the hook on `n` prompts, one at a time, and write the dump of what its fc got to `out`
    (the serving run's files under ``out/served``). EngineError with the engine's own exception when it refused."""
    out = Path(out)
    run = serve(target, draft, out / "served", prompts=prompts, n=n, steps=steps, topk=topk, ndt=ndt,
                max_tokens=max_tokens, concurrency=1, hook=True, hide_amx=hide_amx)
    if not run.n_answered:
        raise EngineError(f"SGLang server ({run.log})", "SGLang refused or crashed on this draft",
                          expected="a dump of every request", found=run.error or "no answer",
                          cause="see the engine's exception; the whole log is kept")
    return dump_from_hook(out / "served", out, n=n)


def main(argv: list[str] | None = None) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m eagle3lib.sglang_engine.dump", description=__doc__.split("\n")[0])
    for name in ("--target", "--draft", "--prompts", "--out"):
        ap.add_argument(name, required=True)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--identify", action="store_true", help="also name the boundary of each slot (HF capture)")
    a = ap.parse_args(argv)
    try:
        d = dump(a.target, a.draft, a.out, prompts=a.prompts, n=a.n)
    except (EngineError, DataError) as e:
        print(json.dumps({"ok": False, "error": str(e)}))
        return 1
    answer = {"ok": True, "out": str(a.out), "requests": len(d), "engine": d.engine}
    if a.identify:
        answer["identified"] = list(dump_boundaries(d, a.target))
    print(json.dumps(answer, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

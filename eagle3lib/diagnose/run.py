"""Every check of the notebooks on one set of artifacts, without notebooks: the same step functions, in the same
order (00 artifacts, 01 serving settings and the served τ against the replay, 02 replay, 03 hidden states), and
one diagnosis of their findings.

Every given input is read first (`steps.given`): one that cannot be read is a problem naming its flag, and no
part sees it (a draft that cannot be read: only the parts that need no loaded draft run). A missing input
narrows what is checked (its findings say `not checked` and name the input); it never fails. A part that breaks
on its own is a failure (exit code 1), never a traceback. No draft given means the demo world, as in the
notebooks (an unreadable input is then passed on as given, so the demo never stands in for it).
"""
from __future__ import annotations

import dataclasses
import traceback
from dataclasses import dataclass, field

from ..causes import Finding
from ..errors import Eagle3Error
from ..hidden.explain import LAYOUT_CAUSES
from ..replay import layoutsearch, verdict
from ..replay.run import replay
from ..steps import checkpoint_audit, diffing, discovery, sample_replay, served_prediction, trained_config
from ..steps.given import CLI, Problem, check_all, given
from .combine import Diagnosis, diagnose

CORE = ("draft", "train_data", "launch")   # "no fault found" needs the draft, its training data and the launch command
# input -> (the causes it decides, the other inputs it needs to decide them): given and readable, it must decide
# at least one of them, or the diagnosis says so instead of "no fault found"
DECIDES = {"launch": (("ndt_override", "wrong_method", "lossy_threshold"), ()),
           "heldout_data": (("generalization_gap",), ("train_data",)),
           "served_log": (("engine_regression",), ("train_data",)),
           "served_traffic": (("engine_regression",), ("served_log", "train_data", "target")),
           "serving_dump": (LAYOUT_CAUSES, ("target", "train_data")),
           "serving_layout": (LAYOUT_CAUSES, ("train_data",)),
           "target": (("hidden_size_mismatch",), ())}
# the inputs that are given or not (the rest are settings with defaults)
GIVEN = ("draft", "target", "train_data", "heldout_data", "launch", "server_log", "served_log", "served_traffic",
         "server_url", "serving_dump", "serving_layout")
NEEDS_DRAFT = ("01 served vs replay", "02 training-sample replay", "03 hidden-state diffing")
EXIT = {"ok": 0, "failed": 1, "arguments": 2, "unreadable": 3}   # documented in README.md and cli.py


def flag(name: str) -> str:
    """The command-line flag of an Inputs field (``served_log`` -> ``--served-log``)."""
    return "--" + name.replace("_", "-")


@dataclass(frozen=True)
class Inputs:
    """What the terminal command was given (paths as strings; "" = not given)."""
    draft: str = ""
    target: str = ""
    train_data: str = ""
    heldout_data: str = ""
    launch: str = ""
    sglang_version: str = ""
    server_log: str = ""
    served_log: str = ""
    served_traffic: str = ""
    server_url: str = ""
    serving_dump: str = ""
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
    """The findings of each part, the problems met (inputs that could not be read, parts that broke), the parts
    not run and why, and the diagnosis."""
    findings: dict[str, list[Finding]] = field(default_factory=dict)
    problems: tuple[Problem, ...] = ()
    skipped: dict[str, str] = field(default_factory=dict)
    given: frozenset[str] = frozenset()      # the Inputs fields given
    demo: bool = False

    @property
    def not_given(self) -> tuple[str, ...]:
        return () if self.demo else tuple(flag(k) for k in CORE if k not in self.given)

    @property
    def diagnosis(self) -> Diagnosis:
        d = diagnose((f for part in self.findings.values() for f in part), self.problems, self.not_given)
        return dataclasses.replace(d, undecided=tuple(undecided(d, self.given, self.problems)))

    @property
    def exit_code(self) -> int:
        """0: every given input read; 1: a part of the workbook broke; 3: a given input could not be read."""
        if any(p.failure for p in self.problems):
            return EXIT["failed"]
        return EXIT["unreadable"] if self.problems else EXIT["ok"]


def undecided(d: Diagnosis, given_fields, problems=()) -> list[str]:
    """A sentence per given, readable input (with what it needs) that decided none of the causes it decides."""
    status = {v.cause: v for v in d.verdicts}
    bad = {p.param for p in problems}
    out = []
    for name, (causes, needs) in DECIDES.items():
        if name not in given_fields or flag(name) in bad or not set(needs) <= set(given_fields):
            continue
        if any(c in status and status[c].status != "not checked" for c in causes):
            continue
        why = "; ".join(dict.fromkeys(status[c].needs for c in causes if c in status and status[c].needs))
        out.append(f"{flag(name)} was given but decided none of {', '.join(causes)}" + (f" (needs {why})"
                                                                                       if why else ""))
    return out


def attribute(message: str, inp: Inputs, default: str) -> tuple[str, str]:
    """(flag, value) of the given input a message names (its path or text), else (`default`, "")."""
    for name in CLI:
        value = getattr(inp, name)
        if isinstance(value, str) and value.strip() and value.strip() in message:
            return flag(name), value
    return default, ""


def run(inp: Inputs, progress=None) -> Run:
    """The notebooks' checks in order; an input that cannot be read and a part that breaks are recorded as
    problems, never raised."""
    problems = check_all({flag(k): (getattr(inp, k), kind) for k, kind in CLI.items()})
    bad = {p.param for p in problems}
    demo, asked = not inp.draft, frozenset(k for k in GIVEN if given(getattr(inp, k)))
    if not demo:        # what could not be read is not given to any part (the demo never fills it: a draft is given)
        blank = {f.name: f.default for f in dataclasses.fields(Inputs)}
        inp = dataclasses.replace(inp, **{k: blank[k] for k in CLI if flag(k) in bad and k != "draft"})
    parts: dict[str, list[Finding]] = {}
    skipped: dict[str, str] = {}

    def guard(name, fn):
        """fn(), or None with the problem recorded: an input it could not read after all, or a failure."""
        if "--draft" in bad and name in NEEDS_DRAFT:
            skipped[name] = "the draft could not be read (--draft)"
            return None
        if progress:
            print(f"[diagnose] {name}", flush=True)
        try:
            return fn()
        except Eagle3Error as e:
            param, value = attribute(str(e), inp, name)
            if param not in bad:
                problems.append(Problem(param, value, type(e).__name__, str(e), "", name))
        except Exception as e:                   # noqa: BLE001 - the workbook broke: a failure, not a traceback
            at = traceback.extract_tb(e.__traceback__)[-1]
            problems.append(Problem(name, "", type(e).__name__, f"{e} (at {at.filename}:{at.lineno})", "",
                                    name, failure=True))
        return None

    def part(name, fn):
        found = guard(name, fn)
        if found is not None:
            parts[name] = found

    audit_in = guard("00 checkpoint audit", lambda: checkpoint_audit.audit_inputs(inp.draft, inp.target,
                                                                                    inp.train_data))
    if audit_in is not None:
        part("00 checkpoint audit", lambda: checkpoint_audit.artifact_checks(audit_in))
    disc_in = guard("01 serving settings", lambda: discovery.discovery_inputs(inp.launch, "", inp.sglang_version,
                                                                            inp.server_log, inp.target, inp.draft))
    disc = None if disc_in is None else guard("01 serving settings", lambda: discovery.discover(
        disc_in.launch_command, disc_in.sglang_version, disc_in.target_path, disc_in.draft_path,
        server_info=inp.server_url, server_log=disc_in.server_log))
    if disc is not None:
        for text, error in zip(disc.problems, disc.problem_errors):    # what it could not read (a server down)
            param, value = attribute(text, inp, "01 serving settings")
            if param not in bad:
                problems.append(Problem(param, value, error, text, "", "01 serving settings"))
        part("01 serving settings", lambda: discovery.serving_checks(
            disc_in, disc, data=audit_in.sample_data if audit_in is not None else inp.train_data))
        part("01 served vs replay", lambda: served_prediction.served_vs_predicted(
            disc, draft_path=inp.draft, target_path=inp.target, data_path=inp.train_data,
            served_paths=[p for p in inp.served_log.split(",") if p.strip()], server_url=inp.server_url,
            serving_dump=inp.serving_dump, serving_layout=inp.serving_layout, n=min(inp.n, 16), device=inp.device,
            progress=False, startup_log=inp.server_log, served_data_path=inp.heldout_data,
            served_traffic_path=inp.served_traffic).findings())
    if inp.train_data or demo:
        part("02 training-sample replay", lambda: _replay(inp))
    else:
        parts["02 training-sample replay"] = sample_replay.replay_findings(
            {}, {}, sample_replay.ServingLayout(None, "none", "no training data given (--train-data)"), None)
    if (inp.target and inp.train_data) or demo:
        part("03 hidden-state diffing", lambda: _diffing(inp))
    return Run(parts, tuple(problems), skipped, asked, demo)


def _replay(inp: Inputs) -> list[Finding]:
    ri = sample_replay.replay_inputs(inp.draft, inp.target, inp.train_data, "", inp.heldout_data, "", inp.recorded_acc,
                                      inp.training_log, inp.serving_dump, inp.device)
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
    config_search = trained_config.trained_config_search(setup, ri.train_data, recorded=ri.recorded_acc,
                                                         recorded_from=ri.recorded_from)
    return sample_replay.replay_findings(verdicts, train, served, setup.num_layers, search) + \
        config_search.findings()


def _diffing(inp: Inputs) -> list[Finding]:
    di = diffing.diff_inputs(inp.target, inp.draft, inp.train_data, inp.serving_dump, device=inp.device)
    s = diffing.sides(di)
    proof = diffing.proof_of_fix(di, diffing.served(s), s.training.identified, n=min(inp.n, 16),
                                 num_steps=inp.num_steps, device=inp.device)
    return diffing.diffing_findings(di, s, proof) + diffing.drift_findings(di, n=inp.drift_samples)

"""`discover`: everything notebook 01 shows for one launch command, read from every source that is given.

Parses the command, resolves SGLang's rewrites offline, reads /server_info and the startup log when given, maps
the settings to vLLM, reads the layer ids per engine and lints; never raises on bad input — what could not be
read is in `Discovery.problems`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pandas as pd

from ..demo import world as demo
from ..engine_kit.id_reading import EngineReading
from ..serving.layer_reading import layer_reading
from ..serving.crossengine import as_vllm, lint
from ..engine_kit.lint import LintWarning
from ..serving.homes import homes
from ..causes import Finding
from ..checks.ndt_override import ndt_override_findings
from ..checks.inputs import read_launch
from ..checks.inputs import Artifacts
from ..checks.judge import check_artifacts
from ..errors import Eagle3Error
from ..engine_kit.launch_reading import LaunchArgs
from ..serving.server_logs import read_startup_log
from ..sglang_engine.startup import read_server_info, requested_vs_effective, version_in_text
from ..engines.versions import DEFAULT_VERSION, parse_version
from ..sglang_engine.rules_table import RULES
from ..sglang_engine.rule import KNOBS
from ..sglang_engine.resolver import read_config
from ..model.target import load_target_info
from .case import SAMPLES_DIR, Case, reads_once, repo_path
from .part import Part

NAME = "01 serving settings"

def config_paths(target_path: str = "", draft_path: str = "") -> tuple[Path | None, Path | None, list[str]]:
    """Target/draft config.json paths. No draft path: the demo world's (or the shipped sample configs when it is
    not built); with a user's draft, an empty target path is "not given" (None), never the demo's."""
    if draft_path:
        out = [None if not given else (Path(given) if Path(given).suffix == ".json" else Path(given) / "config.json")
               for given in (target_path, draft_path)]
        return out[0], out[1], [] if target_path else ["no target given: layer readings are not checked"]
    out, notes = [], []
    for given, demo_dir, sample, what in ((target_path, demo.paths().target, "demo_target_config.json", "target"),
                                          (draft_path, demo.paths().draft, "demo_draft_config.json", "draft")):
        p = Path(given) if given else Path(demo_dir)
        cfg = p if p.suffix == ".json" else p / "config.json"
        if not given and not cfg.is_file():
            notes.append(f"demo world {what} not built ({p}): using the shipped sample data/samples/{sample}")
            cfg = SAMPLES_DIR / sample
        out.append(cfg)
    return out[0], out[1], notes


@dataclass(frozen=True, eq=False)
class Discovery:
    """Everything notebook 01 shows for one launch command; `problems` says what could not be read."""

    launch: LaunchArgs | None
    version: str
    target_arch: str | None
    num_layers: int | None
    resolution: object | None            # sglang_engine.resolver.Resolution
    server_info: object | None           # sglang_engine.startup.ServerInfo
    log: object | None                   # the startup log as its engine's home read it (serving.server_logs)
    diff: pd.DataFrame
    vllm: dict
    readings: tuple[EngineReading, ...]
    lint: tuple[LintWarning, ...]
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)
    target_config: Path | None = None
    draft_config: Path | None = None
    problem_errors: tuple[str, ...] = ()  # the error class of each problem
    version_source: str = "given"        # where `version` came from: "given", "/server_info", "launch command",
                                         # "server log" (named there) or "default" (unknown)
    # (num_steps, topk, num_draft_tokens) the launch drafts, as its engine's home resolves it (`EngineHome.setting`),
    # each None where unknown; None without a launch whose speculative settings could be read
    setting: tuple | None = None

    @property
    def launch_version(self) -> str | None:
        """The launch engine's version: where its home resolves the settings offline (`EngineHome.resolve`: SGLang),
        the version discovered for that (`version`); else as its startup log names it; None without a launch or
        where nothing names it."""
        found = self._home
        if found is None:
            return None
        if found.resolve is not None:
            return self.version
        return getattr(self.log, "version", None) or None

    @property
    def launch_runner(self) -> str | None:
        """The model runner the engine's startup log names (vLLM's "v1" / "v2"), lower case; None where none does."""
        return (getattr(self.log, "runner", None) or "").lower() or None

    @property
    def _home(self):
        return homes().get(self.launch.engine) if self.launch is not None else None

    def summary(self) -> str:
        """A few lines: engine, version, target, and every problem or caveat met on the way."""
        eng = self.launch.engine if self.launch is not None else "none (unreadable command)"
        lines = [f"engine: {eng} · SGLang version: {self.version} · target: {self.target_arch} "
                 f"({self.num_layers} layers) from {self.target_config}", f"draft config: {self.draft_config}"]
        lines += [f"PROBLEM: {p}" for p in self.problems] + [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def requested_frame(self) -> pd.DataFrame:
        """The launch command's flags (empty when it could not be read)."""
        return self.launch.frame() if self.launch is not None else pd.DataFrame(columns=["field", "value", "known"])

    def hits_frame(self) -> pd.DataFrame:
        """Every rule that fired (empty without an SGLang resolution)."""
        return self.resolution.frame() if self.resolution is not None else pd.DataFrame()

    @cached_property
    def introspection(self):
        """The installed engine's own resolution of the launch (`EngineHome.introspect`: SGLang's ServerArgs, its
        paths mapped to the local configs), asked once for the cause finding and notebook 01's side by side; None
        where the launch's engine is not installed here or its home cannot be asked."""
        ask = getattr(self._home, "introspect", None)
        return ask(self.launch, self.path_map()) if ask is not None else None

    def path_map(self) -> dict:
        """Launch paths -> local config folders, for asking an installed engine (`introspection`)."""
        out = {}
        for given, cfg in ((getattr(self.launch, "model_path", None), self.target_config),
                           (getattr(self.launch, "draft_path", None), self.draft_config)):
            if given and cfg is not None and cfg.name == "config.json" and cfg.is_file():
                out[given] = str(cfg.parent)
        return out

    def log_summary(self) -> str:
        """How much of the startup log its engine's home read (or that none was given)."""
        return self.log.summary() if self.log is not None else "no startup log given"

    def log_proof(self) -> pd.DataFrame:
        """The log lines that show what the server runs: for SGLang, its changed settings' adjustment warnings and
        the ServerArgs line (each home's `proof`); empty without a log."""
        if self.log is None:
            return pd.DataFrame(columns=["line", "message"])
        changed = set(self.diff.loc[self.diff["changed"].astype(bool), "field"]) if len(self.diff) else set()
        return self.log.proof(changed)

    def headline(self) -> str:
        """One line: the first speculative knob SGLang changed, the rule and its first version."""
        if self.launch is None and not any("launch" in p or "flag" in p for p in self.problems):
            return "not checked: no launch command given (launch)"
        if self.launch is None:
            return "launch command unreadable: " + next((p for p in self.problems if "launch" in p or "flag" in p),
                                                        "see problems")
        if self._home is not None and self._home.resolve is None and self.vllm:     # runs as launched: vLLM
            k, notes = self.vllm.get("num_speculative_tokens"), self.vllm.get("notes") or ["method given explicitly"]
            return f"vLLM {self.vllm.get('method')} with K={k} (SGLang steps {k}, topk 1, ndt K+1); {notes[0]}"
        if self.resolution is None:
            return "no SGLang resolution: " + (self.problems[0] if self.problems else "see problems")
        if not self.resolution.effective.get("speculative_algorithm"):
            return f"no speculative decoding in this command (SGLang {self.version})"
        if self.resolution.rejected:
            return f"SGLang {self.version} refuses this command: {self.resolution.rejected[0]}"
        rules = {r.id: r for r in RULES}
        for k in ("speculative_num_draft_tokens", "speculative_eagle_topk", "speculative_num_steps"):
            hit = next((h for h in self.resolution.hits if h.field == k and h.requested is not None
                        and h.requested != h.effective), None)
            if hit is not None:
                lo = rules[hit.rule_id].min_version
                short = k.replace("speculative_", "").replace("eagle_", "")
                return (f"{short} {hit.requested} → {hit.effective} ({hit.label}, SGLang "
                        f"{'≥ ' + lo if lo else 'all versions'})")
        return f"speculative settings run as requested on SGLang {self.version}"

    def cause_findings(self) -> list[Finding]:
        """The serving-settings cause (`ndt_override`) as a finding (checks.ndt_override.ndt_override_findings)."""
        observed = self.server_info is not None or bool(getattr(self.log, "server_args", None))
        return ndt_override_findings(self.launch, self.resolution, self.version, self.version_source, observed,
                                     self.diff, self.target_arch, self.introspection)

    def findings(self) -> dict:
        """Structured, JSON-ready findings for eagle3lib.report.findings.record."""
        changed = {} if self.resolution is None else {
            f: [req, eff] for f, (req, eff) in self.resolution.changed().items()}
        return {"sglang_version": self.version, "target_arch": self.target_arch, "changed": changed,
                "rejected": list(self.resolution.rejected) if self.resolution is not None else [],
                "log_confirms": bool(len(self.diff) and self.diff["agrees"].dropna().all()
                                     and self.diff["agrees"].notna().any()),
                "vllm_num_speculative_tokens": self.vllm.get("num_speculative_tokens"),
                "layers": {r.engine: [b for b in r.boundaries] for r in self.readings},
                "lint": sorted({w.code for w in self.lint}), "problems": len(self.problems)}


def serving_checks(art: Artifacts, d: Discovery, progress=None, replay_n: int = 4) -> list[Finding]:
    """Every contract check but the diffing part's, each once, on `art` (a case's artifacts: its draft, target,
    training data, launch and served traffic): notebook 00's and those that need the engine, run with the launch
    command's engine and its version, plus the serving-settings finding (`ndt_override`). With training data: its
    slots (identified against the target on `replay_n` of them) are the trained layout the engine's capture is
    compared with, not the config's claim of it; the layer ids are replayed against it and the context and chat
    template are measured as this engine serves them (the template --chat-template names). No launch command read
    (`d.launch` None): what the draft, target and data decide alone (sizes, quantization, RoPE)."""
    if d.launch is None:
        found = check_artifacts(art.without("launch", "traffic"), progress, part=("artifacts", "engine-free"))
    else:
        data = art.data is not None or "data" in art.problems     # given (an unreadable one is "not checked")
        found = check_artifacts(art, progress, replay_n=replay_n if data else 0, engine_version=d.launch_version,
                                part=("artifacts", "serving", "serving data") if data else ("artifacts", "serving"),
                                engine_runner=d.launch_runner)
    return d.cause_findings() + found


@reads_once
def run(case: Case, earlier=None) -> Part:
    """Notebook 01's serving settings: the launch command discovered from every source given (`results`: the case
    and its Discovery) and every contract check, each once, with the engine it names (notebook 00's checks too: the
    diagnosis runs them here, not in part 00), on the case's artifacts. The launch side is read against the draft
    and target as given (on the demo world, the seed's launch and the demo's configs: `config_paths`). What could
    not be read is in `problems`."""
    g = case.given
    d = discover(case.launch_command, case.sglang_version, g.target, g.draft,
                 server_info=g.server_info or g.server_url, server_log=case.server_log)
    found = serving_checks(case.artifacts, d)
    return Part(NAME, found, tables={"requested vs effective": d.diff}, notes=case.launch_notes + d.notes,
                problems=tuple(zip(d.problems, d.problem_errors)), results={"inputs": case, "discovery": d})


@reads_once
def fixed(case: Case, launched: Discovery) -> Discovery:
    """The case's corrected command (`Case.fixed_command`) discovered at the version the launch was read at, against
    the same draft and target, inside the case's reads (the configs the launch's discovery read are not read
    again)."""
    return discover(case.fixed_command, launched.version, case.given.target, case.given.draft)


def side_by_side(a: Discovery, b: Discovery, names=("as launched", "fixed")) -> pd.DataFrame:
    """Two commands' speculative knobs, requested and effective, in one table."""
    rows = []
    for f in KNOBS + ("max_running_requests", "disable_overlap_schedule"):
        row = {"field": f}
        for name, d in zip(names, (a, b)):
            req = d.launch.flags.get(f) if d.launch is not None else None
            row[f"{name} requested"] = req
            row[f"{name} effective"] = d.resolution.effective.get(f, req) if d.resolution is not None else None
        rows.append(row)
    return pd.DataFrame(rows, dtype=object)


class _Problems(list):
    """The problems met (messages), with the error class of each in `errors`."""
    def __init__(self):
        super().__init__()
        self.errors: list[str] = []


def _try(problems: _Problems, fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except Eagle3Error as e:
        problems.append(str(e))
        problems.errors.append(type(e).__name__)
        return None


def discover(launch_command, sglang_version: str = "", target_path: str = "", draft_path: str = "",
             server_info: str | dict = "", server_log: str = "", timeout: float = 3.0) -> Discovery:
    """Parse, resolve, read the server's answer, map to vLLM, read layer ids and lint; never raises on bad input."""
    problems = _Problems()
    launch = _try(problems, read_launch, launch_command, strict=False) if launch_command else None
    if launch is not None and launch.unread:       # read leniently for the tables; what did not parse is a problem
        _try(problems, read_launch, launch_command, strict=True)
    tcfg, dcfg, notes = config_paths(repo_path(target_path), repo_path(draft_path))
    server_info = repo_path(server_info) if isinstance(server_info, str) else server_info
    server_log = repo_path(server_log)
    target = _try(problems, load_target_info, tcfg) if tcfg else None     # reads text_config of VLM targets too
    draft = _try(problems, read_config, dcfg) if dcfg else None
    arch = target.architecture if target is not None and target.architecture != "?" else None
    L = target.num_layers if target is not None else None
    info = _try(problems, read_server_info, server_info, timeout) if server_info else None
    engine = launch.engine if launch is not None else None      # none: the home whose lines the log has
    met = len(problems)
    log = _try(problems, read_startup_log, server_log, engine, num_target_layers=L) if server_log else None
    if server_log and log is None and len(problems) == met:
        notes.append(f"the server log is not read: the {engine or 'launch'} home reads no startup log")
    inferred_from, inferred = "", ""     # the version the launch command or the server log names, when neither
    if not sglang_version and not (info is not None and info.version):      # the params nor /server_info give one
        resolves = log is not None and getattr(homes().get(log.engine), "resolve", None) is not None
        logged = log.version if resolves else None      # the version of an engine that resolves its settings
        inferred_from, inferred = next(((src, v) for src, v in (("launch command", version_in_text(launch_command)),
                                                                ("server log", logged)) if v), ("", ""))
    version = sglang_version or (info.version if info is not None and info.version else "") or inferred or \
        DEFAULT_VERSION
    version_source = "given" if sglang_version else "/server_info" if info is not None and info.version else \
        inferred_from or "default"
    if sglang_version and info is not None and info.version and info.version != sglang_version:
        notes.append(f"sglang_version {sglang_version} given, but /server_info says {info.version}: using "
                     f"{sglang_version}")
    if not sglang_version:
        notes.append(f"SGLang version {version} taken from " + ("/server_info" if info is not None and info.version
                                                                else f"the {inferred_from}" if inferred_from
                                                                else "the library default"))
    if _try(problems, parse_version, version) is None:
        version, version_source = DEFAULT_VERSION, "default"
    found = homes().get(launch.engine) if launch is not None else None
    res = None
    if found is not None and found.resolve is not None and not launch.speculation_unread:
        res = _try(problems, found.resolve, launch, version, arch, strict=False)   # never from knobs that did not parse
    observed = info if info is not None else log if getattr(log, "server_args", None) else None
    diff = requested_vs_effective(launch, observed, res) if res is not None else pd.DataFrame()
    vllm = as_vllm(launch, res)
    readings = ()
    if draft is not None and L:
        readings = _try(problems, layer_reading, draft, L, version, arch) or ()
    for source in (info, log):
        notes.extend(getattr(source, "warnings", ()) or ())
    if launch is not None:
        notes.extend(launch.notes)
    elif not launch_command:
        notes.append("no launch command given: the serving settings are not checked")
    warns = lint(launch, res, draft, readings)
    d = Discovery(launch, version, arch, L, res, info, log, diff, vllm, readings, warns, tuple(problems),
                  tuple(notes), tcfg, dcfg, tuple(problems.errors), version_source)
    ask = getattr(found, "setting", None)
    if ask is None or launch.speculation_unread:
        return d
    try:        # the rule table again (pure: no file read); a refusal is recorded above, with the resolution
        return dataclasses.replace(d, setting=ask(launch, d.launch_version, arch))
    except Eagle3Error:
        return d

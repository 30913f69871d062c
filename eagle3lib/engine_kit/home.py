"""What one serving engine's home gives the rest of the library: `EngineHome`.

Each engine the library knows (`engines.versions.SERVING_ENGINES`, the one list) has one folder,
``eagle3lib/<name>_engine/``, whose ``home`` module holds ``HOME = EngineHome(...)``: how its launch commands
start and which flags they take, how its decode log and its Prometheus metrics read into `RunRecord`s, which aux
layer ids it reads from a draft config and what it then captures, and what the running engine said of a draft
(`said`: its logs, its own code, the load a hook recorded) over the tables' view, how its launch decides the
serving causes a launch can decide (`launch_rules`, `speculating`), the setting it drafts (`setting`), what its flags
say of how the draft runs (`evidence`, judged by the checks), and the draft as it loads it by the tables
(`table_view`), how it resolves its settings offline (`resolve`), what an installed one resolves (`introspect`),
what its startup log says (`startup_log`) and what its logged accept metrics mean (`accept_metrics`). The callers
never branch on an engine's name for these: they ask the home (`serving.homes.home(name)`), or the parsed launch for
a flag by its role (`LaunchArgs.field_for("pipeline_parallel")`).
    HOME = EngineHome("toy", FLAGS, entrypoint, launch_fields, parse_toy_log, r"toy decode", "toyserve MODEL ...")
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping


@dataclass(frozen=True)
class EngineHome:
    """One engine's launch, log, metrics and aux-id readers (everything else it owns lives in its folder)."""

    name: str                      # as in SERVING_ENGINES (its title and versions: engines.versions.ENGINES)
    flags: dict                    # "--flag" -> (the engine's own field name, kind: str int float bool json list)
    # tokens of a command (env prefix removed) -> (entrypoint as written, the flag tokens), None when not this engine
    entrypoint: Callable[[list], tuple | None]
    # (flags, entrypoint, positionals, strict, notes, unread) -> (LaunchArgs' speculative fields, positionals left)
    launch_fields: Callable[..., tuple]
    run_log: Callable[..., object]          # (source, *, text=None, series="", hardware="", engine_version="")
    run_log_mark: str                       # a regex found in the first 200 kB of its decode log
    commands: str = ""                      # its launch commands as an error shows them: "toyserve MODEL ..."
    metrics: Callable[..., object] | None = None   # (now, delta, *, source, note, series, hardware, tok_s, warnings)
    metrics_mark: str = ""                  # a regex its Prometheus metric names start with (parse_file's test)
    metrics_named: str = ""                 # the metrics `metrics` reads, as an error names them
    # (a JSON object, where, series, hardware, the launch's settings) -> (RunRecord, warnings) for its own benchmark or
    # server outputs, None for any other object (throughput.benchparse asks every home, in the list's order)
    bench_record: Callable[..., tuple | None] | None = None
    speculative_fields: tuple[str, ...] = ()   # launch fields that say how the draft is served (unread = unjudgeable)
    # (draft config dict, L, version, target_arch, runner) -> [EngineReading]: the aux ids it reads and what it captures
    id_readings: Callable[..., list] | None = None
    # the same arguments -> the one EngineReading a launch gets, None where what it does not name decides (then
    # `id_undecided`, an engine_kit.id_reading.Undecided, says what); `id_source()`: what a finding resting on it
    # cites. checks.layer_ids asks them; absent: the engine's capture is not checked, naming this home
    id_reading: Callable[..., object] | None = None
    id_undecided: object | None = None
    id_source: Callable[[], str] | None = None
    # what a flag does, as the checks ask for it ("pipeline_parallel") -> this engine's launch field ("pp_size"); a
    # role the engine has no flag for is absent, so a check never reads another engine's flag in its place
    roles: Mapping[str, str] = field(default_factory=dict)
    # (view_for(version, runner) -> the tables' EngineView, engine_kit.view.Served, version) -> (the view overruled by
    # what the running engine said: its logs, its own code asked, the load a hook recorded; notes; problems). None:
    # the tables' view stands
    said: Callable[..., tuple] | None = None
    # cause -> rule(LaunchArgs, where, version=None) -> Finding: how this engine's launch decides a serving
    # cause (checks.launch_flags, checks.draft_serving, checks.draft_feed ask for it); a cause without a rule is
    # not checked, naming this home
    launch_rules: Mapping[str, Callable] = field(default_factory=dict)
    # cause -> rule(engine_kit.feed.OptOut | RankSpread, version=None[, runner=None]) -> Finding: what this engine
    # feeds a draft whose config and weights the check read (checks.draft_feed: aux_opt_out, pipeline_parallel_aux);
    # a cause without a rule is not checked, naming this home
    feed_rules: Mapping[str, Callable] = field(default_factory=dict)
    # (LaunchArgs, eagle3: is the draft an EAGLE-3 one, the check's evidence, where) -> the wrong_method Finding: how
    # this engine's launch picks the speculative method (checks.launch_settings asks it); absent: not checked
    method_rule: Callable[..., object] | None = None
    # (LaunchArgs) -> does the launch speculate at all (None: its speculative setting cannot be read); absent: it
    # speculates when it names an algorithm
    speculating: Callable[..., bool | None] | None = None
    # (LaunchArgs, version, target_arch) -> (num_steps, topk, num_draft_tokens) the launch drafts as this engine
    # resolves its settings, each None where unknown (steps.discovery asks it once per launch); absent: not known
    setting: Callable[..., tuple] | None = None
    # (LaunchArgs, version, target_arch, strict=False) -> the rewrites its startup makes of the requested settings,
    # offline (an object with `effective`, `hits`, `rejected`, `changed()`, `frame()`: sglang_engine.resolver
    # .Resolution), a refusal recorded; steps.discovery asks it at the version it discovers (the given one,
    # /server_info, the launch, the log, else the default): that version is then the launch's. Absent: the settings
    # run as requested
    resolve: Callable[..., object] | None = None
    # (LaunchArgs, resolution from `resolve`, version, version_source, observed: a server report was read, its
    # requested-vs-effective frame, target_arch, introspection from `introspect`, where) -> the ndt_override Finding:
    # whether its startup rewrote the speculative settings (checks.ndt_override asks it). Absent: a home without
    # `resolve` runs the settings as given (ruled out); else not checked
    rewrite_rule: Callable[..., object] | None = None
    # (LaunchArgs, path_map) -> the installed engine's own resolution of the launch (None where it is not installed
    # here): notebook 01's side by side and check ndt_override's answer for an unknown version
    introspect: Callable[..., object] | None = None
    # (path or text, *, num_target_layers=None) -> what its server's startup log says, read once per case: an object
    # with `engine` (this home's name), `version` and `runner` (None where the log names none), `warnings`,
    # `own_lines` (how many lines only this engine writes: serving.server_logs picks the reader of an unnamed log by
    # it), `summary()` and `proof(changed fields)` (the lines that show what it runs: notebook 01); the launch's
    # version and model runner where the home does not `resolve` (steps.discovery)
    startup_log: Callable[..., object] | None = None
    # (LaunchArgs, resolution from `resolve` or None) -> [engine_kit.lint.LintWarning]: what the launch sets that
    # cannot help (serving.crossengine.lint, notebook 01); absent: no launch warnings
    launch_warnings: Callable[..., list] | None = None
    # (LaunchArgs) -> engine_kit.launch_evidence.LaunchEvidence: what its flags say of how the draft runs (graphs,
    # quantization, KV dtype, K schedule, chunking, grammars), which the checks judge; absent: those causes are not
    # checked, naming this home
    evidence: Callable[..., object] | None = None
    # (*, draft_raw, tensors, target_info, version, runner, mis_shaped, device) -> engine_kit.view.EngineView: the
    # draft as this engine loads it by the tables (serving.loaded_view.engine_view asks it; `said` then overrules
    # aspects with what the running engine said); absent: every aspect unknown, naming this home
    table_view: Callable[..., object] | None = None
    served_tau: str = ""            # where its served accept length is read, as a "not checked" names it
    # (checkpoint key, version) -> (the name its loader loads the key as, None where it drops or refuses it; whether
    # that is known at the version): checks.loaded_keys asks it; absent: how it loads keys is not known
    loaded_key: Callable[..., tuple] | None = None
    # (draft config dict, version) -> (aux slots its model file builds fc for, the rule's source), None where the
    # config does not size it: check 13 (layer_id_count) asks it; absent: the engine does not size fc from the config
    built_fc_slots: Callable[..., tuple] | None = None
    # (metric, formula, versions, note) rows: what its logged accept length / accept rate mean, by version
    # (serving.server_logs.accept_rate_definitions)
    accept_metrics: tuple = ()
    mla_as_parts: bool = False      # its loader reads an MLA draft's fused tensors as their parts (model.mla_vllm)

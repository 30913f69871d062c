"""The house rules of docs/architecture.md, checked on the source: layers, no import circles, no private names
or re-exported names imported across modules, a docstring map (and no logic) in every folder's __init__.py."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "eagle3lib"

# Layers, lowest first: a module may import its own folder and any folder of a lower layer, never a higher one.
LAYERS = [
    {"errors", "layout", "causes", "jsonfiles", "progress", "names", "opened", "once"},
    {"model"},
    {"samples"},
    {"hidden"},
    {"engines"},
    {"engine_kit"},              # what every engine's home is built of: launch reading, log scan, records, process
    {"vllm_engine", "sglang_engine"},   # one home per engine: its launch, logs, metrics, settings, driver
    {"serving"},                 # across engines: the homes found from the one list, the launch parsed, the lint
    {"replay", "throughput"},
    {"checks"},
    {"demo"},                    # the demo world restored from the shipped artifacts (its builder: eagle3demo/)
    {"steps"},
    {"diagnose", "report"},
    {"cli", "__main__"},          # eagle3lib/cli.py, eagle3lib/__main__.py: the `eagle3lib` command
]


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        rel = p.relative_to(PKG.parent).with_suffix("")
        name = ".".join(rel.parts)
        out[name[: -len(".__init__")] if name.endswith(".__init__") else name] = p
    return out


MODULES = _modules()


def _resolve(mod: str, path: Path, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(mod: str, path: Path, top_only: bool = False):
    """(imported module, imported name or None, line) for every eagle3lib import of `mod`."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_only else ast.walk(tree)
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            src = _resolve(mod, path, node)
            if src.split(".")[0] != "eagle3lib":
                continue
            for a in node.names:
                sub = f"{src}.{a.name}"
                yield (sub, None, node.lineno) if sub in MODULES else (src, a.name, node.lineno)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "eagle3lib":
                    yield a.name, None, node.lineno


def _folder(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else ""


def _layer(folder: str) -> int:
    for i, names in enumerate(LAYERS):
        if folder in names:
            return i
    raise AssertionError(f"folder or top-level module '{folder}' is in no layer of tests/test_architecture.py")


def test_every_folder_is_in_a_layer():
    for mod in MODULES:
        if mod != "eagle3lib":
            _layer(_folder(mod))


def test_no_module_imports_a_higher_layer():
    bad = []
    for mod, path in MODULES.items():
        if mod == "eagle3lib":
            continue
        me = _layer(_folder(mod))
        for src, _, line in _imports(mod, path):
            if src != "eagle3lib" and _layer(_folder(src)) > me:
                bad.append(f"{path.relative_to(PKG.parent)}:{line} imports {src}")
    assert not bad, "imports against the layers:\n" + "\n".join(bad)


@pytest.mark.parametrize("deferred", [False, True], ids=["module level", "with deferred imports"])
def test_no_import_circles(deferred):
    """No circle among module-level imports, nor once imports inside functions and under TYPE_CHECKING count too
    (a deferred import only hides a circle)."""
    graph = {m: {s for s, _, _ in _imports(m, p, top_only=not deferred) if s in MODULES and s != m}
             for m, p in MODULES.items()}
    for m in graph:     # a package imports its own submodules only through `from . import x` in code, not here
        graph[m] = {s for s in graph[m] if not m.startswith(s + ".") and s != "eagle3lib"}
    seen, stack, cycles = set(), [], []

    def visit(m):
        if m in stack:
            cycles.append(" -> ".join(stack[stack.index(m):] + [m]))
            return
        if m in seen:
            return
        seen.add(m)
        stack.append(m)
        for s in sorted(graph[m]):
            visit(s)
        stack.pop()

    for m in sorted(graph):
        visit(m)
    assert not cycles, "import circles:\n" + "\n".join(cycles)


def _defined(path: Path) -> set[str]:
    """Names a module defines itself (functions, classes, assignments), not names it imports."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        names.add(n.id)
    return names


def test_no_private_or_reexported_names_across_modules():
    bad = []
    for mod, path in MODULES.items():
        for src, name, line in _imports(mod, path):
            if name is None or src not in MODULES:
                continue
            where = f"{path.relative_to(PKG.parent)}:{line}"
            if name.startswith("_") and name != "__version__":
                bad.append(f"{where} imports private {src}.{name}")
            elif name not in _defined(MODULES[src]):
                bad.append(f"{where} imports {src}.{name}, which {src} only imports (import it from its home)")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("init", sorted(p for p in PKG.rglob("__init__.py") if p.parent != PKG),
                         ids=lambda p: p.parent.name)
def test_folder_init_is_a_map_without_logic(init: Path):
    tree = ast.parse(init.read_text())
    doc = ast.get_docstring(tree)
    assert doc and len(doc.splitlines()) >= 3, f"{init}: needs a docstring that maps the folder's modules"
    for sub in init.parent.glob("*.py"):
        if sub.stem not in ("__init__", "__main__"):
            assert f"`{sub.stem}`" in doc, f"{init}: the map does not name module `{sub.stem}`"
    logic = [n for n in tree.body[1:] if not (isinstance(n, ast.ImportFrom) and n.module == "__future__")]
    assert not logic, f"{init}: holds code (line {logic[0].lineno}); a folder's __init__ is only its map"


def _docstring_nodes(tree) -> set[int]:
    """ids of the docstring Constant nodes of a module, its classes and functions."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def test_the_default_engine_version_is_written_once():
    """"0.5.6" appears in code only as engines.versions.DEFAULT_VERSION (docstring examples may show it)."""
    bad = []
    for mod, path in MODULES.items():
        if mod == "eagle3lib.engines.versions":
            continue
        tree = ast.parse(path.read_text())
        docs = _docstring_nodes(tree)
        bad += [f"{path.relative_to(PKG.parent)}:{n.lineno}" for n in ast.walk(tree)
                if isinstance(n, ast.Constant) and n.value == "0.5.6" and id(n) not in docs]
    assert not bad, "the literal '0.5.6' outside engines.versions.DEFAULT_VERSION:\n" + "\n".join(bad)


@pytest.mark.parametrize("stale", ["servesettings", "spectree", "treereplay"])
def test_no_text_names_a_module_that_is_gone(stale: str):
    """Modules renamed long ago are named nowhere in the package (their names read as files that do not exist)."""
    bad = [str(p.relative_to(PKG.parent)) for p in MODULES.values() if stale in p.read_text()]
    assert not bad, f"'{stale}' (no such module) named in: {bad}"


# Public methods that mean one thing on every class that defines them (a protocol): any public class may have them.
PROTOCOL_METHODS = {
    "to_dict": "the value as a JSON-ready dict (from_dict reads it back)",
    "from_dict": "the value again from to_dict's dict (or a parsed file of its kind)",
    "frame": "the result as a pandas DataFrame, what a notebook shows",
    "summary": "the result in brief: a flat dict for a table, or a few lines of text",
    "headline": "one line: what the result says",
    "findings": "the result as causes.Finding records",
    "evidence": "what the result rests on, as its findings cite it",
    "merge": "add another shard's counts into these",
    "result": "the finished result of what was accumulated",
    "close": "release what the object holds (files, a browser, a bar)",
    "forward": "torch.nn.Module.forward",
    "own_lines": "a startup log's reading (EngineHome.startup_log): how many lines only its engine writes",
    "proof": "a startup log's reading (EngineHome.startup_log): the lines that show what the server runs",
    "reset_parameters": "torch.nn.Module's init protocol (Linear, Embedding): a tensor left on the meta device gets its init",
    "inputs": "a decoder layer's attention input and residual",
    "qkv": "an attention's RoPE'd q, k, v",
    "out": "an attention's output projection",
    "rows": "a view of some batch rows of a cache",
    "accept_length": "tokens per verify round, the bonus token included",
    "tok_s": "decode tokens per second",
    "ok": "no error",
    "get": "a value by its key",
    "take": "what a tap saw in the last forward",
    "hidden_size": "H, the width of every state",
    "num_tokens": "T, the rows of every state",
    "nbytes": "bytes stored",
    "layout": "boundary names, in the order the draft's fc receives them",
}

# Module-level functions that share their name with another public function or method and mean the same thing:
# name -> (what it means, every home: a module, or module.Class for a method).
SHARED_NAMES = {
    "main": ("a command line's entry point", {
        "eagle3lib.cli", "eagle3lib.demo.__main__", "eagle3lib.diagnose.cli", "eagle3lib.vllm_engine.dump",
        "eagle3lib.vllm_engine.inside.accept", "eagle3lib.vllm_engine.inside.dump", "eagle3lib.vllm_engine.inside.probe",
        "eagle3lib.vllm_engine.inside.rope_check", "eagle3lib.hidden.recapture", "eagle3lib.replay.cli",
        "eagle3lib.report.runner", "eagle3lib.vllm_engine.serve", "eagle3lib.sglang_engine.serve",
        "eagle3lib.sglang_engine.dump"}),
    # each engine's driver answers the same questions about its own engine (vllm_engine, sglang_engine)
    "serve": ("an engine's driver: serve a draft on prompts, measure τ", {
        "eagle3lib.vllm_engine.serve", "eagle3lib.sglang_engine.serve"}),
    "entrypoint": ("an engine's home: how its launch command starts (EngineHome.entrypoint)", {
        "eagle3lib.vllm_engine.launch", "eagle3lib.sglang_engine.launch"}),
    "launch_fields": ("an engine's home: the speculative settings its launch flags name (EngineHome.launch_fields)", {
        "eagle3lib.vllm_engine.launch", "eagle3lib.sglang_engine.launch"}),
    "metrics_record": ("an engine's home: its Prometheus metrics as a run record (EngineHome.metrics)", {
        "eagle3lib.vllm_engine.run_log", "eagle3lib.sglang_engine.run_log"}),
    "dump": ("an engine's driver: dump what its draft's fc got", {
        "eagle3lib.vllm_engine.dump", "eagle3lib.sglang_engine.dump"}),
    "said": ("an engine's home: what the running engine said of a draft over the tables' view (EngineHome.said)", {
        "eagle3lib.vllm_engine.said", "eagle3lib.sglang_engine.said"}),
    "speculating": ("does a launch speculate at all: an engine's home reads it (EngineHome.speculating), the checks ask "
                    "the launch's home", {"eagle3lib.checks.launch_flags", "eagle3lib.sglang_engine.launch_rules",
                                          "eagle3lib.vllm_engine.launch_rules"}),
    "bench_record": ("an engine's home: one of its own benchmark or server JSON outputs as a RunRecord "
                     "(EngineHome.bench_record)", {"eagle3lib.sglang_engine.run_log", "eagle3lib.vllm_engine.run_log"}),
    "launch_warnings": ("an engine's home: what a launch sets that cannot help (EngineHome.launch_warnings)", {
        "eagle3lib.sglang_engine.launch_lint", "eagle3lib.vllm_engine.method"}),
    "method_rule": ("an engine's home: how its launch picks the speculative method for a draft "
                    "(EngineHome.method_rule)", {"eagle3lib.sglang_engine.launch_rules",
                                                 "eagle3lib.vllm_engine.launch_rules"}),
    "loaded_key": ("an engine's home: the name its loader loads a checkpoint key as (EngineHome.loaded_key)", {
        "eagle3lib.sglang_engine.loads", "eagle3lib.vllm_engine.loads"}),
    "table_view": ("an engine's home: the draft as it loads it by the tables (EngineHome.table_view)", {
        "eagle3lib.sglang_engine.loads", "eagle3lib.vllm_engine.loads"}),
    "id_source": ("an engine's home: what a finding resting on its id reading cites (EngineHome.id_source)", {
        "eagle3lib.sglang_engine.ids", "eagle3lib.vllm_engine.ids"}),
    "evidence": ("an engine's home: what its launch flags say of how the draft runs (EngineHome.evidence, "
                 "engine_kit.launch_evidence), judged by the checks", {"eagle3lib.sglang_engine.launch_rules",
                                                                      "eagle3lib.vllm_engine.launch_rules"}),
    "setting": ("an engine's home: the (num_steps, topk, num_draft_tokens) a launch drafts as it resolves it "
                "(EngineHome.setting)", {"eagle3lib.sglang_engine.resolver", "eagle3lib.vllm_engine.method"}),
    "side_env": ("an engine's driver: the environment its venv's processes run in", {
        "eagle3lib.vllm_engine.env", "eagle3lib.sglang_engine.env"}),
    "unavailable_reason": ("an engine's driver: why that engine cannot run here", {
        "eagle3lib.vllm_engine.env", "eagle3lib.sglang_engine.env"}),
    "parser": ("a command line's argparse parser", {
        "eagle3lib.cli", "eagle3lib.diagnose.cli", "eagle3lib.hidden.recapture", "eagle3lib.replay.cli"}),
    "resolve": ("the settings an engine runs for the requested ones", {
        "eagle3lib.sglang_engine.resolver", "eagle3lib.sglang_engine.emulator.SpecEngine"}),
    "acc0": ("step-0 accuracy (SpecForge's acc_0)", {"eagle3lib.replay.evidence", "eagle3lib.replay.stats.ReplayResult"}),
    "exit_code": ("the workbook's exit code: 0 read, 1 broke, 3 an input unreadable", {
        "eagle3lib.report.problems", "eagle3lib.diagnose.parts.Run"}),
    "not_given": ("the core inputs left empty on a user's own draft", {
        "eagle3lib.report.problems", "eagle3lib.diagnose.parts.Run"}),
    "flag": ("the command-line spelling of a field name", {"eagle3lib.engine_kit.flag_values", "eagle3lib.diagnose.parts"}),
    "from_ids": ("layer ids in a convention -> boundary names", {
        "eagle3lib.layout", "eagle3lib.engine_kit.capturespec.CaptureSpec"}),
    "run": ("an investigation on its inputs: one notebook's part (steps), or every part in order (the diagnosis)", {
        "eagle3lib.diagnose.parts", "eagle3lib.steps.checkpoint_audit", "eagle3lib.steps.diffing",
        "eagle3lib.steps.discovery", "eagle3lib.steps.sample_replay", "eagle3lib.steps.served_prediction",
        "eagle3lib.steps.throughput_runs"}),
    "raised": ("a confirmed or suspected finding (an alarm)", {"eagle3lib.causes", "eagle3lib.causes.Finding"}),
    "root_error": ("the engine's own failure in a log", {
        "eagle3lib.engines.engine_errors", "eagle3lib.vllm_engine.engine_log.VllmLogReading"}),
    "save_dump": ("aux rows written as an eagle3lib-dump/1 directory", {
        "eagle3lib.hidden.dumps", "eagle3lib.sglang_engine.emulator.SpecEngine"}),
    "speedup": ("predicted throughput relative to no speculation", {
        "eagle3lib.throughput.costmodel", "eagle3lib.throughput.treecost.TreeCost"}),
    "margin": ("the accuracy a search's candidate must gain over the shipped draft to count", {
        "eagle3lib.replay.counterfactual.Search", "eagle3lib.replay.artifacts.ArtifactSearch"}),
    "restoring": ("the search's candidate that restores the training samples' accuracy, by the margin", {
        "eagle3lib.replay.counterfactual.Search", "eagle3lib.replay.artifacts.ArtifactSearch"}),
    "to_dict": (PROTOCOL_METHODS["to_dict"], {"eagle3lib.engine_kit.records"}),
    "from_dict": (PROTOCOL_METHODS["from_dict"], {"eagle3lib.engine_kit.records"}),
}


def _public_functions() -> dict[str, list[tuple[str, bool]]]:
    """name -> [(home, is a method)] for every public module-level function and public method of a public class."""
    out: dict[str, list[tuple[str, bool]]] = {}
    for mod, path in MODULES.items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
                out.setdefault(node.name, []).append((mod, False))
            elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                for m in node.body:
                    if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and not m.name.startswith("_"):
                        out.setdefault(m.name, []).append((f"{mod}.{node.name}", True))
    return out


def test_no_two_public_functions_share_a_name_unless_they_mean_the_same():
    """Issue 26: a name says what a function answers. Two public functions (module-level, or methods of public
    classes) share a name only as a protocol method (PROTOCOL_METHODS) or as a listed shared name (SHARED_NAMES)."""
    bad = []
    for name, homes in sorted(_public_functions().items()):
        if len(homes) < 2:
            continue
        allowed = SHARED_NAMES.get(name, ("", set()))[1]
        odd = [h for h, method in homes if not (method and name in PROTOCOL_METHODS) and h not in allowed]
        if odd:
            bad.append(f"{name}: {', '.join(h for h, _ in homes)} (rename, or list it with its meaning)")
    assert not bad, "public functions sharing a name:\n" + "\n".join(bad)


def test_the_shared_names_list_names_real_homes():
    """An entry of SHARED_NAMES whose home no longer defines the name is stale (delete it there)."""
    found = _public_functions()
    stale = [f"{name}: {h}" for name, (_, homes) in SHARED_NAMES.items() for h in sorted(homes)
             if h not in {home for home, _ in found.get(name, [])}]
    assert not stale, "stale SHARED_NAMES entries:\n" + "\n".join(stale)


DEMO_BUILDER = PKG.parent / "eagle3demo"     # the builder beside the library: not installed, not a layer of it


def _builder_imports():
    """(builder file, line, imported eagle3lib module, imported name or None) for every eagle3lib import of the
    builder's modules (deferred ones too)."""
    for path in sorted(DEMO_BUILDER.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            top = (node.module or "").split(".")[0] if isinstance(node, ast.ImportFrom) and node.level == 0 else ""
            if top == "eagle3lib":
                for a in node.names:
                    sub = f"{node.module}.{a.name}"
                    yield (path, node.lineno, sub, None) if sub in MODULES else (path, node.lineno, node.module, a.name)
            elif isinstance(node, ast.Import):
                yield from ((path, node.lineno, a.name, None) for a in node.names if a.name.startswith("eagle3lib"))


def test_the_builder_imports_only_public_library_names():
    """eagle3demo (the demo world's builder) uses the library as a user's code would: public modules, and only
    names a module defines itself (no `_private` name, no name it only imported)."""
    bad = []
    for path, line, mod, name in _builder_imports():
        where = f"{path.relative_to(PKG.parent)}:{line}"
        if mod not in MODULES:
            bad.append(f"{where} imports {mod}, no module of eagle3lib")
        elif any(part.startswith("_") and part != "__main__" for part in mod.split(".")):
            bad.append(f"{where} imports the private module {mod}")
        elif name is not None and (name.startswith("_") or name not in _defined(MODULES[mod])):
            bad.append(f"{where} imports {mod}.{name}, not a public name defined there")
    assert not bad, "\n".join(bad)


def test_the_library_never_imports_the_builder():
    """Nothing of eagle3lib imports eagle3demo (which `pip install .` does not ship), deferred imports included."""
    bad = []
    for mod, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            bad += [f"{path.relative_to(PKG.parent)}:{node.lineno}" for n in names if n.split(".")[0] == "eagle3demo"]
    assert not bad, "the library imports the builder:\n" + "\n".join(bad)


def test_the_builder_init_is_a_map_of_its_modules():
    """eagle3demo/__init__.py is the builder's map, as every folder's: a docstring naming each module, no code."""
    test_folder_init_is_a_map_without_logic(DEMO_BUILDER / "__init__.py")


# what reads a file or runs the draft or the target: a check reaches these only through its Artifacts
# (checks/inputs.py, the one reader: configs, headers, data, the target model, tokenizer and tensors read on first
# use, once), the replay evidence (replay/evidence.py) and the recapture measurements (hidden/drift.py); never itself
LOADERS = {"load_state_dict", "load_target_tensor", "load_tokenizer", "load_target_model", "load_target",
           "open_dataset", "read_config_json", "load_setup", "load_draft", "replay", "draft_run", "load_replay",
           "capture", "capture_batch", "capture_layerwise", "capture_for_layout"}


def test_a_check_never_loads_a_file_or_runs_a_replay_itself():
    bad = []
    for mod, path in MODULES.items():
        if not mod.startswith("eagle3lib.checks.") or mod == "eagle3lib.checks.inputs":
            continue
        for src, name, line in _imports(mod, path):
            if src in ("eagle3lib.replay.run", "eagle3lib.replay.loop", "eagle3lib.hidden.capture",
                       "eagle3lib.hidden.layerwise") or name in LOADERS:
                bad.append(f"{path.relative_to(PKG.parent)}:{line} imports {src}.{name or ''}")
    assert not bad, "checks that load or replay themselves (ask the Artifacts or replay.evidence):\n" + "\n".join(bad)


def test_the_checks_artifacts_are_read_in_one_place_for_a_case():
    """A case's checks judge its one Artifacts (`steps.case.Case.artifacts`): in the library only the case reads
    them (`read_artifacts`), beside `checks.judge.run_checks`, the entry point that reads whatever inputs it is
    given (tests, a user's own script); no part, step or report reads the draft, target or data into Artifacts
    again."""
    readers = {mod for mod, path in MODULES.items() for src, name, _ in _imports(mod, path)
               if src == "eagle3lib.checks.inputs" and name == "read_artifacts"}
    assert readers == {"eagle3lib.steps.case", "eagle3lib.checks.judge"}, sorted(readers)

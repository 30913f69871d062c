"""The house rules of docs/architecture.md, checked on the source: layers, no import circles, no private names
or re-exported names imported across modules, a docstring map (and no logic) in every folder's __init__.py."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "eagle3lib"

# Layers, lowest first: a module may import its own folder and any folder of a lower layer, never a higher one.
LAYERS = [
    {"errors", "layout", "causes", "jsonfiles", "progress"},
    {"model"},
    {"samples"},
    {"hidden"},
    {"engines"},
    {"serving"},
    {"replay", "throughput"},
    {"checks"},
    {"demo"},
    {"steps"},
    {"diagnose", "report"},
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


@pytest.mark.parametrize("name", ["compare", "resolve_inputs", "contract_checks", "cause_findings", "tolerance_for",
                                  "replay", "layer_reading", "forward_preview"])
def test_a_public_function_name_has_one_home(name: str):
    """Issue 26's doubles: each of these names is a module-level function of at most one module."""
    homes = [mod for mod, path in MODULES.items() if any(
        isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name
        for n in ast.parse(path.read_text()).body)]
    assert len(homes) <= 1, f"{name} is defined in {homes}"

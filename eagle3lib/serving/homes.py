"""The engines' homes, found from the one list of engines: `home(name)`, `homes()`.

Each name of `engines.versions.SERVING_ENGINES` has its folder ``eagle3lib/<name>_engine/`` whose ``home`` module
holds ``HOME`` (an `engine_kit.home.EngineHome`); this module imports them by that name, so adding an engine is
its row in the list and its folder, nothing here.
    home("vllm").flags["--speculative-config"] -> ("speculative_config", "json")
"""
from __future__ import annotations

import functools
import importlib

from ..engine_kit.home import EngineHome
from ..engines.versions import SERVING_ENGINES
from ..errors import ServingArgsError


@functools.cache
def homes() -> dict[str, EngineHome]:
    """{name: EngineHome} for every serving engine, in the list's order."""
    out = {}
    for name in SERVING_ENGINES:
        found = importlib.import_module(f"{__package__.rsplit('.', 1)[0]}.{name}_engine.home").HOME
        if not isinstance(found, EngineHome) or found.name != name:
            raise ServingArgsError(f"eagle3lib/{name}_engine/home.py", "HOME is not this engine's home",
                                   expected=f"EngineHome(name={name!r}, ...)", found=repr(found)[:80])
        out[name] = found
    return out


def home(name: str) -> EngineHome:
    """One engine's home; a ServingArgsError naming the engines known for any other name."""
    found = homes().get(name)
    if found is None:
        raise ServingArgsError("engine", "unknown serving engine", expected=SERVING_ENGINES, found=repr(name))
    return found

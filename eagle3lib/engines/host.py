"""The host a run is on, and the route vLLM's CPU build takes there (engines.facts, topic "host").

vLLM 0.32 CPU gives an MLA model the AMX_MLA attention backend on an x86 host with AMX tiles, and CPU_MLA
elsewhere; AMX_MLA refuses float32 weights at start-up. `mla_route` reads which (host, dtype) pairs serve from the
fact rows and answers the dtype to serve in, the backend the engine will pick and why, so the demo's builder
(`eagle3demo.vllm_world`) and the engine tests take the route that works on the machine they run on, and say which.
Usage: ``r = mla_route("float32"); r.dtype, r.backend, r.why``; ``has_amx()``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .facts import fact

AMX_ENV = "EAGLE3LIB_HOST_AMX"     # "1"/"0": take the route of that host kind (tests that claim AMX in vLLM too)
BACKENDS = {True: "AMX_MLA", False: "CPU_MLA"}
HOST_KEYS = {True: "amx", False: "cpu_mla"}            # the fact subjects' host part
DTYPES = ("float32", "bfloat16", "float16")            # tried in this order when the asked one is refused


def cpu_flags(cpuinfo: str | os.PathLike = "/proc/cpuinfo") -> frozenset[str]:
    """The CPU's feature flags as the kernel lists them ("flags" line of /proc/cpuinfo); empty when unreadable."""
    try:
        for line in Path(cpuinfo).read_text(errors="replace").splitlines():
            if line.split(":")[0].strip() in ("flags", "Features"):
                return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def has_amx() -> bool:
    """Does vLLM see AMX tiles here? By the test vLLM itself runs (torch.cpu._is_amx_tile_supported, vLLM 0.32
    platforms/cpu.py:152-155), else the kernel's ``amx_tile`` flag; $EAGLE3LIB_HOST_AMX overrides both."""
    forced = os.environ.get(AMX_ENV)
    if forced in ("0", "1"):
        return forced == "1"
    probe = getattr(getattr(__import__("torch"), "cpu", None), "_is_amx_tile_supported", None)
    if callable(probe):
        try:
            return bool(probe())
        except RuntimeError:
            pass
    return "amx_tile" in cpu_flags()


@dataclass(frozen=True)
class Route:
    """How an MLA model is served by vLLM CPU on this host: the dtype, the backend vLLM picks, and why."""
    dtype: str
    backend: str
    amx: bool
    asked: str                 # the dtype asked for
    why: str                   # one line, with the fact rows' sources
    serves: bool = True        # False: no dtype of DTYPES is known to serve here

    @property
    def dtype_changed(self) -> bool:
        """The host's backend refuses the dtype asked for: served in another."""
        return self.dtype != self.asked

    def to_dict(self) -> dict:
        return {"dtype": self.dtype, "backend": self.backend, "host": "AMX" if self.amx else "no AMX",
                "asked": self.asked, "why": self.why, "serves": self.serves}


def serves(amx: bool, dtype: str) -> bool | None:
    """Does vLLM CPU serve an MLA model in `dtype` on a host with (amx=True) or without AMX? None = no row."""
    f = fact("vllm", "host", f"{HOST_KEYS[amx]}:{dtype}")
    return None if f is None else f.reads


def mla_route(dtype: str = "float32", amx: bool | None = None) -> Route:
    """The route for an MLA model asked to be served in `dtype`: that dtype when the host's backend takes it, else
    the first of DTYPES the fact rows say it serves (float32 on AMX -> bfloat16)."""
    amx = has_amx() if amx is None else amx
    backend = BACKENDS[amx]
    pick = fact("vllm", "host", "mla_backend_on_amx")
    picked = f"vLLM picks {backend} ({pick.source})" if pick else f"vLLM picks {backend}"
    if serves(amx, dtype) is not False:
        return Route(dtype, backend, amx, dtype, f"{picked}; it serves {dtype}")
    refused = fact("vllm", "host", f"{HOST_KEYS[amx]}:{dtype}")
    for other in DTYPES:
        if other != dtype and serves(amx, other):
            return Route(other, backend, amx, dtype, f"{picked}; {backend} refuses {dtype} ({refused.source}: "
                                                     f"{refused.note}): served in {other}")
    return Route(dtype, backend, amx, dtype, f"{picked}; no dtype is known to serve on it", serves=False)

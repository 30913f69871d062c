"""What a launch's own flags say of how the draft runs, read by its engine's home: `LaunchEvidence`.

A home's `evidence(la)` reads its engine's flags (CUDA graphs, the draft's quantization and KV-cache dtype, a K that
changes with the batch size, chunked prefill, grammars) into these engine-neutral fields; the checks
(`checks.draft_serving`, `checks.draft_feed`, `checks.launch_flags`) judge them and never read an engine's flag by
its name. Nothing here decides a cause.
    LaunchEvidence("sglang", graphs_off=True, graphs="off (--disable-cuda-graph)")
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping


@dataclass(frozen=True)
class LaunchEvidence:
    """How the launch runs the draft, as its engine reads its own flags (each None where the launch does not say)."""

    engine: str
    graphs_off: bool = False                 # the drafter runs without CUDA graphs
    graphs: str = "on (default)"             # how the launch says so, in its own flags
    quantization: object = None              # the draft quantization the launch gives it
    quantization_flag: str = ""              # where the launch gives it ("--speculative-draft-model-quantization")
    inherited_quantization: object = None    # the target's quantization the draft inherits (engines that do that)
    inherited_flag: str = ""                 # where the launch gives that ("--quantization")
    kv_cache_dtype: str | None = None        # the draft's own KV-cache dtype, when the launch gives it one
    k_schedule: Mapping[str, object] = field(default_factory=dict)   # keys that change K with the batch size
    chunking_off: bool | None = None         # the launch turns chunked prefill off
    grammar_off: bool = False                # no request can use a grammar (a grammar backend "none")
    structured: Mapping[str, object] = field(default_factory=dict)   # the flags that choose structured output
    # a value the reader could not read -> the sentence naming it: "graphs", "draft" (quantization, KV dtype,
    # K schedule), "chunking"
    problems: Mapping[str, str] = field(default_factory=dict)

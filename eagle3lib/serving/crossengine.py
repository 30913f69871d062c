"""One EAGLE-3 deployment seen by both engines: SGLang (steps, topk, ndt) ↔ vLLM K, which target boundaries
each engine feeds the draft (eagle3-formats.md §2, §4), and a lint (notebook 01 calls them via eagle3lib.steps.discovery).

SGLang chain: K = steps = ndt − 1; vLLM: K = num_speculative_tokens. `discover(...)` runs every reader and
never raises on bad input: what failed is in `Discovery.problems`.
"""
from __future__ import annotations

import json

import pandas as pd

from ..engines.facts import id_keys, shared_id_key
from ..model.dialects import value_at
from .layer_reading import draft_slots
from ..engines.versions import VLLM_CHECKED
from ..vllm_engine.method import vllm_effective
from ..engine_kit.launch_reading import LaunchArgs
from ..sglang_engine.rule import KNOBS
from ..engine_kit.lint import LintWarning
from .homes import homes



def sglang_to_vllm(steps: int | None, topk: int | None, ndt: int | None) -> dict:
    """The vLLM setting closest to an SGLang (steps, topk, ndt): K = steps; exact only for a chain."""
    if steps is None:
        return {"method": "eagle3", "num_speculative_tokens": None, "exact": False,
                "note": "steps unset: SGLang auto-chooses them, resolve first"}
    if topk == 1:
        return {"method": "eagle3", "num_speculative_tokens": steps, "exact": ndt == steps + 1,
                "note": f"chain: SGLang ndt {ndt} = vLLM K+1 = {steps + 1} verify tokens"}
    return {"method": "eagle3", "num_speculative_tokens": steps, "exact": False,
            "note": f"SGLang tree (topk {topk}, {ndt} verify nodes) has no vLLM equivalent; K={steps} is a chain "
                    "of the same depth with fewer verify tokens"}


def as_vllm(launch: LaunchArgs | None, resolution=None) -> dict:
    """The launch as vLLM would run it: an SGLang launch's resolved knobs mapped (`sglang_to_vllm`, with the `vllm
    serve` command), a vLLM launch's own setting (`vllm_engine.method.vllm_effective`); {} for anything else."""
    if resolution is not None:
        out = sglang_to_vllm(*(resolution.effective.get(k) for k in KNOBS))
        out["command"] = vllm_command(launch.model_path or "TARGET", launch.draft_path or "DRAFT",
                                      out["num_speculative_tokens"] or 1)
        return out
    return vllm_effective(launch) if launch is not None and launch.engine == "vllm" else {}


def vllm_command(target: str, draft: str, k: int, method: str = "eagle3") -> str:
    """A `vllm serve` line with an explicit method (a path without 'eagle3' would otherwise load as draft_model)."""
    spec = json.dumps({"method": method, "model": str(draft), "num_speculative_tokens": k})
    return f"vllm serve {target} --speculative-config '{spec}'"


def lint(launch: LaunchArgs | None = None, resolution=None, draft_config: dict | None = None,
         readings=()) -> tuple[LintWarning, ...]:
    """Warnings on the launch (its home's `launch_warnings`: knobs, thresholds, env, the settings it resolves), its
    flags the workbook does not know, and the draft config's layer ids (see LintWarning.code for the kind)."""
    found = homes().get(launch.engine) if launch is not None else None
    read = getattr(found, "launch_warnings", None)
    out = list(read(launch, resolution)) if read is not None else []
    W = LintWarning
    if launch is not None and launch.unknown:
        out.append(W("unknown_flags", "info", f"flags this workbook does not know (kept): {', '.join(launch.unknown)}"))
    ec = (draft_config or {}).get("eagle_config") or {}
    # the key SGLang reads (nested, output-of-layer) and the one both vLLM runners read (input-of-layer): the table's
    ids = value_at(draft_config or {}, id_keys("sglang", "model")[0]) or []
    top = value_at(draft_config or {}, shared_id_key("vllm", VLLM_CHECKED))
    if isinstance(ids, list) and any(isinstance(i, int) and i < 0 for i in ids):
        out.append(W("negative_layer_id", "error", f"layer ids {ids} contain -1 (embedding in output-of-layer "
                                                   "convention): engines mishandle it (crash, or wrong layers)"))
    if ids and isinstance(top, list) and [i + 1 for i in ids if isinstance(i, int)] != top:
        out.append(W("ids_keys_disagree", "error", f"eagle_config ids {ids} (output-of-layer) and top-level ids {top}"
                                                   " (input-of-layer) name different layers: SGLang reads the first, "
                                                   "vLLM the second"))
    if ec.get("use_aux_hidden_state") is False:
        out.append(W("aux_hidden_state_off", "warning", "use_aux_hidden_state is false: SGLang feeds no aux states; "
                                                        "vLLM model-runner V2 ignored the flag before PR #40656"))
    by = {r.engine: r for r in readings}
    if "sglang" in by and "vllm" in by and by["sglang"].boundaries != by["vllm"].boundaries:
        out.append(W("engines_disagree", "error", f"SGLang feeds {list(by['sglang'].boundaries)}, vLLM feeds "
                                                  f"{list(by['vllm'].boundaries)}: one config, two drafts"))
    k = draft_slots(draft_config) if draft_config else None
    for r in readings:
        if r.engine != "trained" and "trained" in by and r.boundaries != by["trained"].boundaries:
            out.append(W(f"{r.engine}_layers", "error", f"{r.engine} feeds {list(r.boundaries)} but the draft was "
                                                        f"trained on {list(by['trained'].boundaries)}"))
        for slot, bad in enumerate(r.slot_problems):
            if bad and r.engine != "trained":
                out.append(W(f"{r.engine}_capture", "error", f"{r.engine} slot {slot}: {bad}"))
        out.extend(W(f"{r.engine}_ids_key", "info", p) for p in r.problems)
        fed = sum(b is not None for b in r.boundaries)
        if r.engine != "trained" and k is not None and fed != k:
            out.append(W(f"{r.engine}_fc_width", "error", f"the draft's fc takes {k} aux slots; {r.engine} feeds {fed}"))
    if k is not None and k != 3:
        out.append(W("fc_width_3", "warning", f"a {k}-slot fc: older SGLang and vLLM llama_eagle3.py size fc as "
                                              "3·Ht and refuse the weights"))
    return tuple(out)


def lint_frame(warnings) -> pd.DataFrame:
    """Lint warnings as a table."""
    return pd.DataFrame([vars(w) for w in warnings], columns=["code", "severity", "message"])

"""One EAGLE-3 deployment seen by both engines: SGLang (steps, topk, ndt) ↔ vLLM K, which target boundaries
each engine feeds the draft (eagle3-formats.md §2, §4), and a lint (notebook 01 calls them via eagle3lib.steps.discovery).

SGLang chain: K = steps = ndt − 1; vLLM: K = num_speculative_tokens. `discover(...)` runs every reader and
never raises on bad input: what failed is in `Discovery.problems`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import pandas as pd

from .capture_rules import target_model_file
from .capturespec import FIRST_ID_RULE_ARCHS, FIRST_ID_RULE_VERSION
from ..errors import ConfigError
from .launch import LaunchArgs
from ..layout import engine_default_ids, from_ids
from .sglang_rule import DEFAULT_VERSION, parse_version
from .sglang_rule import KNOBS
from .sglang_rules import read_config



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


def vllm_to_sglang(num_speculative_tokens: int) -> dict:
    """The SGLang knobs for a vLLM chain of K drafts: (steps K, topk 1, ndt K+1)."""
    k = int(num_speculative_tokens)
    return {"speculative_num_steps": k, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": k + 1}


def vllm_command(target: str, draft: str, k: int, method: str = "eagle3") -> str:
    """A `vllm serve` line with an explicit method (a path without 'eagle3' would otherwise load as draft_model)."""
    spec = json.dumps({"method": method, "model": str(draft), "num_speculative_tokens": k})
    return f"vllm serve {target} --speculative-config '{spec}'"


def vllm_effective(launch: LaunchArgs) -> dict:
    """What vLLM makes of a launch's speculative config: the method it infers, K, and the SGLang equivalent."""
    spec, notes = dict(launch.speculative_config or {}), []
    method, model = spec.get("method"), str(spec.get("model") or "")
    if method is None and model:
        low = model.lower()
        method = "eagle3" if "eagle3" in low else "eagle" if "eagle-" in low else "draft_model"
        notes.append(f"method not given: vLLM infers {method!r} from the path substring"
                     + (" (an EAGLE-3 head then loads as a plain draft model)" if method == "draft_model" else ""))
    k = spec.get("num_speculative_tokens")
    if k is None and method in ("eagle", "eagle3"):
        notes.append("num_speculative_tokens not provided: vLLM refuses to start for an EAGLE head")
    return {"method": method, "model": model or None, "num_speculative_tokens": k,
            "sglang": vllm_to_sglang(k) if isinstance(k, int) else None, "notes": notes}


@dataclass(frozen=True)
class EngineReading:
    """Which target boundaries one engine feeds to the draft's aux slots, and what goes wrong."""

    engine: str                          # "trained" (what the config says), "sglang" or "vllm"
    key: str                             # the config key read, or "default (...)"
    ids: tuple[int, ...]                 # ids as the engine reads them
    capture: tuple[int, ...]             # capture-before indices it uses (0 = embed, L = final pre-norm)
    boundaries: tuple[str | None, ...]   # eagle3lib.layout names; None = never captured
    slot_problems: tuple[str | None, ...] = ()   # per slot: why it crashes or is missing
    problems: tuple[str, ...] = ()       # about the whole reading (which key is ignored, heuristics)


def _ids(value, where: str):
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        raise ConfigError(where, "layer ids are not a list of integers", expected="[int, ...]", found=repr(value)[:80])
    return tuple(value)


def _boundaries(engine: str, key: str, ids, capture, L: int, problems: list[str],
                target_arch: str | None = None) -> EngineReading:
    if engine != "trained":   # engines test `i in layers_to_capture` inside the layer loop: ascending, once each
        pairs = sorted(dict(zip(capture, ids)).items())
        if [c for c, _ in pairs] != list(capture):
            problems.append(f"ids {list(ids)} are not ascending and unique: the engine concatenates in layer order")
        capture, ids = [c for c, _ in pairs], [i for _, i in pairs]
    names, slot_problems = [], []
    for i in capture:
        bad = None
        if i < 0 or i > L:
            names.append(None)
            bad = f"capture index {i} is outside 0..{L}: never captured"
        elif i == L and engine == "sglang":
            names.append(None)
            bad = f"index {L} (output of the last layer) is never captured by SGLang's layer loop"
        else:
            names.append(from_ids([i], "input", L)[0])
            if i == 0 and engine != "trained":
                bad = (f"embedding at index 0: {target_model_file(engine, target_arch)} adds a None residual there "
                       "and crashes (SGLang; older vLLM); only some model files guard it")
        slot_problems.append(bad)
    return EngineReading(engine, key, tuple(ids), tuple(capture), tuple(names), tuple(slot_problems),
                         tuple(problems))


def layer_reading(draft_config, num_layers: int, sglang_version: str = DEFAULT_VERSION,
                  target_arch: str | None = None) -> tuple[EngineReading, ...]:
    """(trained, sglang, vllm) readings of a draft config.json dict (or path) for an L-layer target."""
    raw = read_config(draft_config) if not isinstance(draft_config, dict) else draft_config
    L = int(num_layers)
    ec = raw.get("eagle_config") if isinstance(raw.get("eagle_config"), dict) else {}
    nested = _ids(ec.get("eagle_aux_hidden_state_layer_ids"), "eagle_config.eagle_aux_hidden_state_layer_ids")
    top = _ids(raw.get("eagle_aux_hidden_state_layer_ids"), "eagle_aux_hidden_state_layer_ids")
    out = []
    if nested is not None:   # SpecForge/SGLang dialect: output-of-layer ids
        out.append(_boundaries("trained", "eagle_config.eagle_aux_hidden_state_layer_ids (output-of-layer)", nested,
                               [i + 1 for i in nested], L, []))
    elif top is not None:
        out.append(_boundaries("trained", "eagle_aux_hidden_state_layer_ids (input-of-layer)", top, top, L, []))
    default = tuple(engine_default_ids(L))
    probs = []
    if nested is None:
        key, ids, cap = "default [2, L//2, L-3] (no eagle_config ids)", default, default
        if top is not None:
            probs.append("top-level eagle_aux_hidden_state_layer_ids is ignored by SGLang (it reads eagle_config)")
    else:
        key, ids = "eagle_config.eagle_aux_hidden_state_layer_ids", nested
        heuristic = (parse_version(sglang_version) >= parse_version(FIRST_ID_RULE_VERSION)   # same rule as capturespec
                     and (target_arch is None or target_arch.startswith(FIRST_ID_RULE_ARCHS)))
        if heuristic and nested[:1] != (1,):
            cap = nested
            probs.append("PR #25454: first id != 1, so no +1: ids are used as capture-before indices")
        else:
            cap = tuple(i + 1 for i in nested)
    out.append(_boundaries("sglang", key, ids, cap, L, probs, target_arch))
    probs = []
    if top is None:
        ids, key = default, "default (2, L//2, L-3) (no top-level ids)"
        if nested is not None:
            probs.append("eagle_config.eagle_aux_hidden_state_layer_ids is not read by vLLM (top level only)")
    else:
        ids, key = top, "eagle_aux_hidden_state_layer_ids (top level)"
    out.append(_boundaries("vllm", key, ids, ids, L, probs, target_arch))
    return tuple(out)


def draft_slots(raw: dict) -> int:
    """Aux slots the draft's fc was built for: num_aux_hidden_states, else the id count, else 3."""
    ec = raw.get("eagle_config") if isinstance(raw.get("eagle_config"), dict) else {}
    ids = ec.get("eagle_aux_hidden_state_layer_ids") or raw.get("eagle_aux_hidden_state_layer_ids")
    return int(raw.get("num_aux_hidden_states") or (len(ids) if isinstance(ids, list) and ids else 3))


def layer_frame(readings) -> pd.DataFrame:
    """One row per (engine, slot): id read, capture index, boundary fed, same as trained?"""
    trained = next((r.boundaries for r in readings if r.engine == "trained"), None)
    rows = []
    for r in readings:
        for slot, (i, cap, name, bad) in enumerate(zip(r.ids, r.capture, r.boundaries, r.slot_problems)):
            same = None if trained is None or slot >= len(trained) else trained[slot] == name
            rows.append({"engine": r.engine, "slot": slot, "id": i, "capture_index": cap, "boundary": name,
                         "as_trained": same, "problem": bad or "", "key": r.key})
    return pd.DataFrame(rows, columns=["engine", "slot", "id", "capture_index", "boundary", "as_trained", "problem",
                                       "key"])


@dataclass(frozen=True)
class LintWarning:
    """A setting or config that cannot help, or that the engines read differently."""

    code: str
    severity: str        # "error" (fails or feeds wrong layers), "warning", "info"
    message: str


def lint(launch: LaunchArgs | None = None, resolution=None, draft_config: dict | None = None,
         readings=(), env: dict | None = None) -> tuple[LintWarning, ...]:
    """Warnings on knobs, thresholds, env and layer ids (see LintWarning.code for the kind)."""
    out, W = [], LintWarning
    req = dict(launch.flags) if launch is not None and launch.engine == "sglang" else {}
    steps, topk, ndt = (req.get(k) for k in KNOBS)
    given = [k for k in KNOBS if req.get(k) is not None]
    if 0 < len(given) < 3 and not req.get("speculative_adaptive"):
        out.append(W("partial_knobs", "error", f"only {', '.join(given)} set: SGLang asserts or picks defaults; set "
                                                "all three knobs or none"))
    if all(isinstance(x, int) for x in (steps, topk, ndt)):
        if steps * topk + 1 < ndt:
            out.append(W("ndt_unfillable", "warning", f"num_draft_tokens {ndt} > steps·topk+1 = {steps * topk + 1}: "
                                                       "more verify slots than the kept beams fill (SGLang's "
                                                       "bench_speculative skips such configs)"))
        if topk > 1 and ndt - 1 > topk + (steps - 1) * topk ** 2:
            out.append(W("ndt_exceeds_tree", "error", f"num_draft_tokens - 1 = {ndt - 1} > topk + (steps-1)·topk² = "
                                                      f"{topk + (steps - 1) * topk ** 2}: SGLang starts, then fails in "
                                                      "organize_draft_results (torch.topk)"))
        if topk == 1 and ndt != steps + 1:
            out.append(W("topk1_ndt", "warning", f"topk 1 with num_draft_tokens {ndt}: SGLang ≥ 0.4.6 runs "
                                                  f"{steps + 1} (= steps + 1); raise --speculative-num-steps instead"))
    for k in ("speculative_accept_threshold_single", "speculative_accept_threshold_acc"):
        if isinstance(req.get(k), (int, float)) and req[k] < 1:
            out.append(W("lossy_threshold", "warning", f"{k}={req[k]} < 1: lossy acceptance (non-greedy requests)"))
    env = {**(launch.env if launch is not None else {}), **(env or {})}
    if env.get("SGLANG_SIMULATE_ACC_LEN", "-1") not in ("-1", "-1.0", ""):
        out.append(W("simulated_acceptance", "error", "SGLANG_SIMULATE_ACC_LEN is set: accept length is faked"))
    if launch is not None and launch.unknown:
        out.append(W("unknown_flags", "info", f"flags this workbook does not know (kept): {', '.join(launch.unknown)}"))
    if launch is not None and launch.engine == "vllm":
        for note in vllm_effective(launch)["notes"]:
            out.append(W("vllm_method", "warning", note))
    if resolution is not None:
        eff = resolution.effective
        mrr, cg = eff.get("max_running_requests"), eff.get("cuda_graph_max_bs")
        if req.get("max_running_requests") is None and mrr == 48:
            out.append(W("max_running_48", "info", "max_running_requests is 48 (speculative default): at most 48 "
                                                   "concurrent requests per DP rank"))
        if isinstance(cg, int) and isinstance(mrr, int) and cg > mrr:
            out.append(W("graph_bs_clipped", "info", f"cuda_graph_max_bs {cg} > max_running_requests {mrr}"))
    ec = (draft_config or {}).get("eagle_config") or {}
    ids, top = ec.get("eagle_aux_hidden_state_layer_ids") or [], (draft_config or {}).get(
        "eagle_aux_hidden_state_layer_ids")
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

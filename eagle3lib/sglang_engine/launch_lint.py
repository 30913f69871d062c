"""What an SGLang launch sets that cannot help (`launch_warnings`, the home's): knobs set in part or past what the
tree fills, lossy acceptance, faked acceptance, and the defaults its startup picks (from the offline resolution)."""
from __future__ import annotations

from ..engine_kit.launch_reading import LaunchArgs
from ..engine_kit.lint import LintWarning as W
from .rule import KNOBS


def launch_warnings(launch: LaunchArgs, resolution=None) -> list[W]:
    """The launch's knob, threshold and env warnings, then the resolution's (max_running_requests, graph sizes)."""
    out, req = [], dict(launch.flags)
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
    if launch.env.get("SGLANG_SIMULATE_ACC_LEN", "-1") not in ("-1", "-1.0", ""):
        out.append(W("simulated_acceptance", "error", "SGLANG_SIMULATE_ACC_LEN is set: accept length is faked"))
    if resolution is not None:
        eff = resolution.effective
        mrr, cg = eff.get("max_running_requests"), eff.get("cuda_graph_max_bs")
        if req.get("max_running_requests") is None and mrr == 48:
            out.append(W("max_running_48", "info", "max_running_requests is 48 (speculative default): at most 48 "
                                                   "concurrent requests per DP rank"))
        if isinstance(cg, int) and isinstance(mrr, int) and cg > mrr:
            out.append(W("graph_bs_clipped", "info", f"cuda_graph_max_bs {cg} > max_running_requests {mrr}"))
    return out

"""A generated fault matrix: the healthy demo deployment with one thing changed, alone and in pairs, instead of
hand-picked plants, each with the verdict the seed's decision (diagnose.decision) must reach.

The classes: every config field an engine reads (`engines.facts.read_fields`: flags, RoPE, eps, activation,
context, use_aux_hidden_state) perturbed; the tensors (d2t read as absolute ids, shuffled over the same target ids,
drawn from another vocabulary; lm_head dropped or its rows permuted; an embedding of its own swapped in); the
served data (prompts of the other domain, another chat template); the target (drifted, another target of the same
shape); the launch (K = 1, SGLang's num_draft_tokens rewrite). Each `Fault` says what it changes, the names a
diagnosis must mention for it (`names`: a raised verdict whose text names it, or, when the change leaves the
draft's computation as it was, no confirmed cause at all), the seed's verdict served (`verdict`) and offline
(`offline`: no engine, only the files), and the inputs beside the draft it changes (`inputs`: demo.fault_inputs).
`write_fault(fault, out)` writes the draft folder; `singles()` / `pairs()` list the matrix; `inputs_of(fault)` the
diagnosis inputs it changes. Usage: ``for f in singles(): write_fault(f, tmp / f.name)``.
"""
from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from safetensors.torch import load_file

from eagle3lib.demo import world as demo
from eagle3lib.engines.draft_edit import edited_copy
from eagle3lib.engines.facts import read_fields
from eagle3lib.engines.versions import SERVING_ENGINES
from eagle3lib.errors import Eagle3Error
from eagle3lib.model.vocab import absolute_to_offsets, build_vocab_map, draft_to_target

from . import fault_inputs
from .deployments import write_deployment


WIRING, GAP, CEILING, HEALTHY = "wiring/loading", "generalization gap", "ceiling", "healthy"
NOT_SERVED = "not checked: the served τ (served_log / --served-log) not given"


@dataclass(frozen=True)
class Fault:
    """One change to the healthy deployment: its name, what it sets, the words naming it, the seed's verdict served
    and offline, and what it edits (the draft's config or tensors, or an input beside the draft: `inputs`)."""
    name: str
    what: str
    names: tuple[str, ...]                                  # a raised verdict naming the fault mentions one of these
    config: Callable[[dict], None] | None = None
    weights: Callable[[dict, Path], None] | None = None
    kind: str = "config"                                    # config, tensor, served data, target, launch
    verdict: str = WIRING                                   # the seed's decision once served
    offline: str | None = None                              # ... from the files alone (None: the same)
    inputs: Callable[[object, Path], dict] | None = None    # (world, draft folder) -> diagnosis inputs it changes
    serve: dict | None = None                               # what the real-engine leg serves otherwise (the driver's
                                                            # serve; "sglang": SGLang's steps / topk / ndt)
    vllm: bool = True                                       # the real-vLLM leg can serve it (SGLang's rewrite: no)
    base: str = "healthy"                                   # the draft it edits: the healthy vLLM deployment, or
                                                            # "trained": the world's draft as SpecForge wrote it

    @property
    def verdict_offline(self) -> str:
        return self.offline or self.verdict


def _set(key: str, value) -> Callable[[dict], None]:
    def edit(c: dict) -> None:
        c[key] = value
    return edit


def _eagle(key: str, value) -> Callable[[dict], None]:
    def edit(c: dict) -> None:
        c.setdefault("eagle_config", {})[key] = value
    return edit


def _flip(key: str) -> Callable[[dict], None]:
    def edit(c: dict) -> None:
        c[key] = not c.get(key, False)
    return edit


# how each engine-read config field is perturbed (a value no healthy demo config carries)
CONFIG_PERTURBATIONS: dict[str, tuple[str, Callable[[dict], None]]] = {
    "norm_before_fc": ("norm_before_fc switched on", _flip("norm_before_fc")),
    "fc_norm": ("fc_norm switched on", _flip("fc_norm")),
    "norm_output": ("norm_output switched on", _flip("norm_output")),
    "norm_before_residual": ("norm_before_residual switched on", _flip("norm_before_residual")),
    "use_aux_hidden_state": ("eagle_config.use_aux_hidden_state false", _eagle("use_aux_hidden_state", False)),
    "rope_theta": ("rope_theta 1e6 (trained at 1e4)", _set("rope_theta", 1e6)),
    "rope_scaling": ("a linear rope_scaling of factor 4 added", _set("rope_scaling",
                                                                      {"rope_type": "linear", "factor": 4.0})),
    "partial_rotary_factor": ("partial_rotary_factor 0.5 added", _set("partial_rotary_factor", 0.5)),
    "rms_norm_eps": ("rms_norm_eps 1e-2 (trained at 1e-5)", _set("rms_norm_eps", 1e-2)),
    "hidden_act": ("hidden_act gelu (trained with silu)", _set("hidden_act", "gelu")),
    "max_position_embeddings": ("max_position_embeddings 64 (trained on up to 512)",
                                _set("max_position_embeddings", 64)),
}


def _d2t_absolute(w: dict, target: Path) -> None:
    w["d2t"] = w["d2t"] + torch.arange(w["d2t"].numel(), dtype=w["d2t"].dtype)    # absolute ids, not offsets


def _d2t_permuted(w: dict, target: Path) -> None:
    """The same target ids, assigned to the draft ids in another order (a vocab map regenerated unsorted)."""
    ids = draft_to_target(w["d2t"])
    w["d2t"] = absolute_to_offsets(ids[torch.randperm(ids.numel(), generator=torch.Generator().manual_seed(0))])


def _d2t_other_vocab(w: dict, target: Path) -> None:
    """A map built from another vocabulary's counts (ascending, as writers store it, onto other target ids)."""
    vd, v = w["d2t"].numel(), w["t2d"].numel()
    counts = torch.rand(v, generator=torch.Generator().manual_seed(0))
    w["d2t"], w["t2d"] = build_vocab_map(counts, vd)


def _lm_head_permuted(w: dict, target: Path) -> None:
    rows = w["lm_head.weight"]
    w["lm_head.weight"] = rows[torch.randperm(rows.shape[0], generator=torch.Generator().manual_seed(0))].contiguous()


def _embedding_swapped(w: dict, target: Path) -> None:
    """An embed_tokens of its own shipped with the draft: the target's rows in another order (what engines load)."""
    emb = load_file(str(target / "model.safetensors"))["model.embed_tokens.weight"]
    w["embed_tokens.weight"] = emb[torch.randperm(emb.shape[0], generator=torch.Generator().manual_seed(0))].contiguous()


def _no_lm_head(w: dict, target: Path) -> None:
    del w["lm_head.weight"]


TENSOR_FAULTS = (
    Fault("d2t_absolute", "d2t holds absolute target ids instead of offsets", ("d2t",), weights=_d2t_absolute,
          kind="tensor"),
    Fault("no_lm_head", "lm_head.weight dropped from the checkpoint", ("lm_head",), weights=_no_lm_head, kind="tensor"),
    Fault("d2t_permuted", "d2t shuffled over the same target ids", ("d2t",), weights=_d2t_permuted, kind="tensor"),
    Fault("d2t_other_vocab", "d2t and t2d built from another vocabulary's counts", ("d2t",), weights=_d2t_other_vocab,
          kind="tensor"),
    Fault("lm_head_permuted", "lm_head.weight's rows permuted", ("lm_head",), weights=_lm_head_permuted,
          kind="tensor"),
    Fault("embedding_swapped", "an embed_tokens of its own shipped: the target's rows in another order",
          ("embed",), weights=_embedding_swapped, kind="tensor"),
)


def _served(make) -> Callable[[object, Path], dict]:
    return lambda w, draft: {"heldout_data": str(make(w))}


def _target(make) -> Callable[[object, Path], dict]:
    return lambda w, draft: {"target": str(make(w)), "drift_samples": 4}


OTHER_FAULTS = (
    Fault("num_key_value_heads", "num_key_value_heads 4 in the config, the weights trained with 2",
          ("num_key_value_heads",), config=_set("num_key_value_heads", 4), kind="config shape"),
    Fault("served_other_domain", "served prompts of the other domain (trained on kitchen, served nature)",
          ("generalization_gap",), kind="served data", verdict=GAP, inputs=_served(lambda w: w.shifted_data),
          serve={"prompts": "shifted"}),
    Fault("served_other_template", "served prompts in another chat template (plain User: / Assistant: text)",
          ("generalization_gap",), kind="served data", verdict=GAP, inputs=_served(fault_inputs.template_data),
          serve={"prompts": "template"}),
    Fault("target_drifted", "the target's decoder weights drifted (noise at 0.5 of each weight's std)",
          ("target_drift",), kind="target", inputs=_target(fault_inputs.drifted_target), serve={"target": "drifted"}),
    Fault("target_other", "another target of the same shape (decoder weights drawn afresh)", ("target_drift",),
          kind="target", inputs=_target(fault_inputs.other_target), serve={"target": "other"}),
    Fault("launch_k1", "served with K = 1 speculative token", (), kind="launch", verdict=CEILING,
          inputs=lambda w, draft: {"launch": fault_inputs.vllm_launch(w.target, draft, 1)},
          serve={"num_speculative_tokens": 1}),
    Fault("launch_ndt_rewrite", "SGLang topk 1 with 16 draft tokens for 1 step (it drafts num_steps + 1 = 2)",
          ("ndt_override",), kind="launch", verdict=CEILING, base="trained", vllm=False,
          inputs=lambda w, draft: {"launch": fault_inputs.SGLANG_REWRITE.format(target=w.target, draft=draft),
                                   "sglang_version": fault_inputs.SGLANG_VERSION},
          serve={"sglang": {"steps": 1, "topk": 1, "ndt": 16}}),
)
# what a config field's change does once served, where it is not a wiring fault of the draft as replayed
SERVED_VERDICT = {"rms_norm_eps": (HEALTHY, NOT_SERVED), "max_position_embeddings": (HEALTHY, NOT_SERVED),
                  "norm_output": (WIRING, NOT_SERVED), "hidden_act": (WIRING, NOT_SERVED)}


def config_fields() -> tuple[str, ...]:
    """Every config field the engines read, in the facts' order."""
    return tuple(dict.fromkeys(f for e in SERVING_ENGINES for f in read_fields(e)))


def singles() -> tuple[Fault, ...]:
    """One fault per engine-read config field (each must have a perturbation: tests check), per tensor fault and
    per fault beside the draft (served data, target, launch)."""
    out = []
    for f in config_fields():
        what, edit = CONFIG_PERTURBATIONS[f]
        served, offline = SERVED_VERDICT.get(f, (WIRING, None))
        out.append(Fault(f, what, (f,), config=edit, verdict=served, offline=offline))
    return tuple(out) + TENSOR_FAULTS + OTHER_FAULTS


def inputs_of(fault: Fault, draft, w=None) -> dict:
    """The diagnosis inputs a fault changes beside its draft ({} for a draft-only fault)."""
    return fault.inputs(w or demo.ensure_world(progress=False), Path(draft)) if fault.inputs else {}


def pairs() -> tuple[Fault, ...]:
    """Every two config faults together: both must be named (the diagnosis names each field it changes)."""
    cfg = [f for f in singles() if f.kind == "config"]        # engine-read fields: their verdict is the graver one
    out = []
    for a, b in itertools.combinations(cfg, 2):
        def both(c, a=a, b=b):
            a.config(c)
            b.config(c)
        verdict = WIRING if WIRING in (a.verdict, b.verdict) else a.verdict
        offline = WIRING if WIRING in (a.verdict_offline, b.verdict_offline) else a.verdict_offline
        out.append(Fault(f"{a.name}+{b.name}", f"{a.what}; {b.what}", a.names + b.names, config=both,
                         verdict=verdict, offline=offline))
    return tuple(out)


def served_with(fault: Fault, w=None, engine: str = "vllm") -> dict:
    """What the real-engine leg serves for `fault` beside its draft (the driver's target, prompts and K; for SGLang
    its steps / topk / num_draft_tokens, a chain of K: K, 1, K + 1): the held-out prompts, the world's target and
    K 3 unless the fault changes them."""
    w = w or demo.ensure_world(progress=False)
    how = fault.serve or {}
    prompts = {"shifted": lambda: w.shifted_data, "template": lambda: fault_inputs.template_data(w)}.get(
        how.get("prompts"), lambda: w.heldout_data)()
    target = {"drifted": fault_inputs.drifted_target, "other": fault_inputs.other_target}.get(how.get("target"))
    k = how.get("num_speculative_tokens", 3)
    out = {"prompts": prompts, "target": target(w) if target else w.target}
    if engine == "sglang":
        return {**out, "steps": k, "topk": 1, "ndt": k + 1, **how.get("sglang", {})}
    return {**out, "num_speculative_tokens": k}


def served_on_engine(fault: Fault, draft, engine: str, w=None, n: int = 16) -> tuple[dict, dict]:
    """Serve `fault`'s draft on the real `engine` ("vllm" or "sglang": its driver, 127.0.0.1, stopped by its pid)
    and return (the diagnosis inputs a user brings from that server: the launch as typed, its log and metrics or
    /server_info, the served traffic when it answered, SGLang's hook dump; what the engine measured: {"ok",
    "accept_length", "error"}). The served files lie beside the draft folder (``served/``, ``dump/``)."""
    w = w or demo.ensure_world(progress=False)
    out = Path(draft).parent / "served"
    how = served_with(fault, w, engine)
    if engine == "sglang":
        from eagle3lib.sglang_engine.dump import dump_from_hook
        from eagle3lib.sglang_engine.serve import serve as sglang_serve
        s = sglang_serve(how["target"], draft, out, prompts=how["prompts"], n=n, steps=how["steps"],
                         topk=how["topk"], ndt=how["ndt"], hook=True)
        logs, answered = [s.log] + ([s.server_info] if s.server_info else []), s.n_answered > 0
    else:
        from eagle3lib.vllm_engine.serve import serve as vllm_serve
        s = vllm_serve(how["target"], draft, out, prompts=how["prompts"], n=n,
                       num_speculative_tokens=how["num_speculative_tokens"], max_model_len=512)
        logs, answered = [s.log] + ([s.metrics] if s.metrics else []), s.ok
    given = {"heldout_data": str(w.heldout_data), "launch": (out / "launch.txt").read_text().strip(),
             "server_log": s.log, "served_log": ",".join(logs), "target": str(how["target"]),
             "drift_samples": 0 if how["target"] == w.target else 4}
    if engine == "sglang" and s.server_info:
        given["server_info"] = s.server_info          # its effective settings and version (a source build: head)
    if answered:
        given["served_traffic"] = str(out)
        if engine == "sglang":
            try:
                given["serving_dump"] = str(dump_from_hook(out, Path(draft).parent / "dump", n=4).root)
            except Eagle3Error:                   # served, but no prefill the hook saw matches a prompt: the
                pass                              # diagnosis goes without a dump, as a user's without one
    return given, {"ok": s.ok, "accept_length": s.accept_length, "error": s.error}


def write_fault(fault: Fault, out, *, world=None, engine: str = "vllm") -> Path:
    """The healthy deployment's draft folder with `fault` applied, at `out` (replaced). On SGLang the healthy
    deployment is the world's draft as SpecForge wrote it (its ids are SGLang's convention: demo.sglang_world)."""
    out = Path(out)
    w = world or demo.ensure_world(progress=False)
    trained = fault.base == "trained" or engine == "sglang"
    healthy = w.draft if trained else write_deployment("healthy", out.with_name(out.name + ".healthy"))
    return edited_copy(healthy, out, config=fault.config, tensors=fault.weights, target=w.target, fresh=True)


UNCHANGED = 0.03        # step-0 accuracy on the training samples within this of the healthy draft's: a no-op


def counterfactual_finding(diagnosis: dict) -> dict | None:
    """The counterfactual search's finding in a diagnosis record (`Diagnosis.to_dict()`), or None."""
    return next((f for v in diagnosis["verdicts"] for f in v["findings"]
                 if f["where"].startswith("replay.counterfactual")), None)


TAU_WITHIN = 0.10       # the replay that explains a served τ predicts it within this fraction


def predicted_tau(diagnosis: dict) -> tuple[float, float] | None:
    """(served τ, the nearer of the replays as trained / as the engine loads it) from the served-vs-replay finding
    of a diagnosis record, or None when nothing was served (or the comparison did not run)."""
    ev = next((f["evidence"] for v in diagnosis["verdicts"] for f in v["findings"]
               if "tau_as_served" in (f.get("evidence") or {}) and "served" in f["evidence"]), None)
    if ev is None:
        return None
    served = float(ev["served"])
    ran = [float(t) for t in (ev["tau_as_trained"], ev["tau_as_served"]) if t is not None]   # replays that ran
    return (served, min(ran, key=lambda t: abs(t - served))) if ran else None


HEALTHY_COPY = Fault("none", "the healthy deployment", (), kind="none", verdict=HEALTHY, offline=NOT_SERVED)


def expected_verdict(fault: Fault, served: dict | None = None) -> str:
    """The seed's verdict a fault's diagnosis must reach: served (a refusal is wiring/loading), or offline."""
    if served:
        return fault.verdict if served.get("ok") else WIRING
    return fault.verdict_offline


def invariants(fault: Fault, diagnosis: dict, exit_code: int, healthy_acc0: float,
               served: dict | None = None) -> list[str]:
    """What the matrix demands of one diagnosis (a `Diagnosis.to_dict()` record), as sentences (none: it holds):
    no part broke and every input read; a fault that changes the training-sample accuracy is named by a raised
    verdict; every confirmed verdict names the fault (nothing else alarms; on a fault that changes nothing the engine
    or the replay sees, nothing is confirmed at all); no conflict; the seed's decision reaches the fault's verdict
    (`expected_verdict`). `served` (what a real engine measured:
    {"ok", "accept_length", "error"}): where it served, the replay that explains its τ is within `TAU_WITHIN`;
    where it refused, a raised verdict names the fault."""
    bad = []
    if served and served.get("ok"):
        got = predicted_tau(diagnosis)
        if got is None:
            bad.append(f"served τ {served['accept_length']:.2f} but no served-vs-replay finding")
        elif abs(got[1] - got[0]) > TAU_WITHIN * got[0]:
            bad.append(f"the nearer replay predicts τ {got[1]:.2f}, the engine served {got[0]:.2f} (more than "
                       f"{TAU_WITHIN:.0%} apart)")
    if exit_code == 1 or diagnosis["problems"]:
        bad.append(f"a part broke or an input was unreadable: {diagnosis['problems']}")
    raised = [v for v in diagnosis["verdicts"] if v["status"] in ("confirmed", "suspected", "conflict")]
    text = json.dumps(raised)
    acc0 = ((counterfactual_finding(diagnosis) or {}).get("evidence") or {}).get("acc0_as_shipped")
    changes = acc0 is not None and abs(acc0 - healthy_acc0) > UNCHANGED
    unnamed = [v["cause"] for v in raised if v["status"] == "confirmed"
               and not any(n in json.dumps(v) for n in fault.names)]
    if unnamed:
        bad.append(f"confirmed without naming {fault.names} (a false alarm beside the fault; acc0 {acc0} vs "
                   f"{healthy_acc0}): {unnamed}")
    refused = bool(served) and not served.get("ok")
    if (changes or refused) and not any(n in text for n in fault.names):
        what = (f"the engine refused it ({served.get('error')})" if refused and not changes else
                f"the fault changes the training-sample accuracy ({healthy_acc0:.2f} -> {acc0:.2f})")
        bad.append(f"{what} but no raised verdict names {fault.names}: {[v['cause'] for v in raised]}")
    if any(v["status"] == "conflict" for v in raised):
        bad.append(f"a conflict: {[v['cause'] for v in raised if v['status'] == 'conflict']}")
    decision = diagnosis.get("decision") or {}
    want = expected_verdict(fault, served)
    if decision.get("verdict") != want:
        bad.append(f"the seed's decision is {decision.get('verdict')!r}, expected {want!r} "
                   f"({decision.get('reason', 'no decision')[:300]})")
    return bad

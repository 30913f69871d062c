"""What a generated fault changes beside the draft: the prompts that were served (another domain, another
template), the target (drifted, or another target of the same shape), the launch (a K that caps τ, SGLang's
num_draft_tokens rewrite). Each writes the input a user would bring, from the demo world, once, under
``<world>/faults/`` (the builder's artifacts stay untouched).

- `template_data(world)`: the held-out kitchen conversations in another chat template (plain "User:" /
  "Assistant:" text, none of the training template's role markers), tokenized by the target's tokenizer, masked on
  the answers and captured by the target in the training layout (seed format): served prompts a draft trained on the
  role-marker template has not seen;
- `drifted_target(world, scale)`: the target with every decoder weight moved by Gaussian noise of `scale` times its
  own standard deviation (a fine-tune it was not trained for);
- `other_target(world)`: a target of the same shape whose decoder weights are drawn afresh (same embedding, lm_head
  and tokenizer): another model behind the same vocabulary;
- `vllm_launch(world, k)` / `SGLANG_REWRITE`: launch commands a diagnosis reads (vLLM's K, SGLang topk 1 with more
  draft tokens than steps + 1).
Usage: ``template_data(demo.ensure_world())`` -> the dataset folder.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from eagle3lib.engines.versions import DEFAULT_VERSION
from eagle3lib.samples.readers import SEED_FORMAT
from eagle3lib.samples.sample import Sample
from eagle3lib.samples.writers import write_seed_dataset
from eagle3lib.demo import world as demo
from eagle3lib.demo.corpus import ASSISTANT, BOS, EOT, SYSTEM, USER
from eagle3lib.demo.restore import TRAINING_LAYOUT, capture_records

N_TEMPLATE = 64                 # conversations in the other-template data
SGLANG_REWRITE = ("python -m sglang.launch_server --model-path {target} --speculative-algorithm EAGLE3 "
                  "--speculative-draft-model-path {draft} --speculative-num-steps 1 --speculative-eagle-topk 1 "
                  "--speculative-num-draft-tokens 16")
SGLANG_VERSION = DEFAULT_VERSION   # a version whose rule table rewrites it (sglang_engine.rules_table)


def faults_dir(w) -> Path:
    return Path(w.root) / "faults"


def _plain(conversation: list[dict]) -> tuple[str, list[tuple[int, int]]]:
    """The conversation in a plain template, and the character spans of the answers."""
    text, spans = "", []
    for m in conversation:
        if m["role"] == "assistant":
            text += "Assistant: "
            spans.append((len(text), len(text) + len(m["content"])))
            text += m["content"] + "\n"
        else:
            text += ("User: " if m["role"] == "user" else "System: ") + m["content"] + "\n"
    return text, spans


def template_data(w=None, n: int = N_TEMPLATE) -> Path:
    """The other-template served prompts as captured samples (module docstring); built once."""
    w = w or demo.ensure_world(progress=False)
    out = faults_dir(w) / "template"
    if (out / "template.jsonl").is_file():
        return out
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(w.target)
    recs = [json.loads(x) for x in (Path(w.root) / "corpus" / "heldout.jsonl").read_text().splitlines()[:n]]
    rows = []
    for r in recs:
        text, spans = _plain(r["conversations"])
        enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        mask = [int(any(s <= a and b <= e for s, e in spans)) for a, b in enc["offset_mapping"]]
        rows.append((r["id"], list(enc["input_ids"]), mask))
    markers = {tok.convert_tokens_to_ids(t) for t in (BOS, USER, ASSISTANT, EOT, SYSTEM)}
    assert not any(markers & set(ids) for _, ids, _ in rows), "the plain template must not hold a role marker"
    model = AutoModelForCausalLM.from_pretrained(w.target, torch_dtype=torch.float32).eval()
    with torch.inference_mode():
        cap = capture_records(model, rows, TRAINING_LAYOUT)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    info = {"format": SEED_FORMAT, "layout": list(TRAINING_LAYOUT), "num_target_layers": model.config.num_hidden_layers,
            "target": "../../target", "split": "template", "domain": "kitchen, plain template"}
    write_seed_dataset(tmp, (Sample(c.id, c.input_ids, c.loss_mask, c.aux, TRAINING_LAYOUT, c.final) for c in cap),
                       layout=TRAINING_LAYOUT, info=info, index_name="template.jsonl")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def _edited_target(w, name: str, edit) -> Path:
    """A copy of the world's target folder under faults/<name> with `edit(name, tensor) -> tensor` on each decoder
    weight (layers.*); embedding, final norm, lm_head and tokenizer unchanged. Built once."""
    out = faults_dir(w) / name
    if (out / "model.safetensors").is_file():
        return out
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(w.target, tmp)
    sd = load_file(str(tmp / "model.safetensors"))
    g = torch.Generator().manual_seed(7)
    sd = {k: (edit(v, g).contiguous() if ".layers." in k and v.dim() == 2 else v) for k, v in sd.items()}
    save_file(sd, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def drifted_target(w=None, scale: float = 0.5) -> Path:
    """The target drifted: each decoder weight + N(0, (scale * its std)^2)."""
    w = w or demo.ensure_world(progress=False)
    return _edited_target(w, f"target_drifted_{scale:g}",
                          lambda v, g: v + torch.randn(v.shape, generator=g) * (scale * float(v.std())))


def other_target(w=None) -> Path:
    """Another target of the same shape: each decoder weight drawn afresh at its own mean and std."""
    w = w or demo.ensure_world(progress=False)
    return _edited_target(w, "target_other",
                          lambda v, g: torch.randn(v.shape, generator=g) * float(v.std()) + float(v.mean()))


def vllm_launch(target, draft, k: int) -> str:
    """A vLLM launch of `draft` at K = `k` speculative tokens, as a user types it."""
    spec = json.dumps({"method": "eagle3", "model": str(draft), "num_speculative_tokens": int(k)})
    return f"vllm serve {target} --speculative-config '{spec}'"

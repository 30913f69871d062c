"""vllm_engine.dump against the real vLLM (marker `engine`): what its draft's fc got, identified; logits parity. The
engine walk (where a speculative engine drafts) needs no engine."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from eagle3lib.vllm_engine.dump import dump, engine_walk
from eagle3lib.hidden.compare import dump_boundaries
from eagle3lib.vllm_engine.env import unavailable_reason
from eagle3lib.model.checkpoint import load_draft

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "data" / "demo_artifacts"

needs_vllm = pytest.mark.skipif(bool(unavailable_reason()), reason=unavailable_reason() or "vLLM is installed")


def test_engine_walk_drafts_after_each_verification_at_the_last_accepted_row():
    """From the prompt's last row P, the next draft is at P + accepted[P] + 1, while a token is left to predict."""
    accepted = [9, 9, 3, 9, 9, 9, 0, 2, 9, 9, 1, 9, 9]     # 9: rows the walk must skip
    assert engine_walk(accepted, 2) == [2, 6, 7, 10]      # 10 + 1 + 1 = 12 >= len - 2: nothing left to predict
    assert engine_walk(accepted, 11) == [] and engine_walk([0] * 5, 0) == [0, 1, 2]


def _draft(tmp: Path, name: str, **top_level) -> Path:
    """The shipped demo draft with vLLM's input-of-layer ids [0, 2, 4, 6] nested, plus top-level keys."""
    d = tmp / name
    shutil.copytree(ARTIFACTS / "draft", d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [0, 2, 4, 6]
    cfg.update(top_level)
    (d / "config.json").write_text(json.dumps(cfg, indent=1))
    return d


@pytest.fixture(scope="module")
def world():
    from eagle3lib.demo import world as demo
    return demo.ensure_world(progress=False)


@pytest.fixture(scope="module")
def healthy(world, tmp_path_factory):
    """(draft dir, dump) of the healthy deployment: 3 held-out prompts through vLLM's offline engine (~20 s)."""
    tmp = tmp_path_factory.mktemp("vllm_dump")
    draft = _draft(tmp, "draft")
    return draft, dump(world.target, draft, tmp / "dump", prompts=world.heldout_data, n=3)


@pytest.mark.engine
@needs_vllm
def test_healthy_dump_identifies_as_the_trained_layout(world, healthy):
    """vLLM's fc got [embed, layer_in.2, layer_in.4, layer_in.6]; the manifest says what vLLM ran, slots stay None."""
    _, d = healthy
    assert dump_boundaries(d, world.target) == ("embed", "layer_in.2", "layer_in.4", "layer_in.6")
    e = d.engine
    assert (e["name"], e["version"], e["runner"], e["aux_layer_ids"]) == ("vllm", "0.32.0", "V1", [0, 2, 4, 6])
    assert e["draft_class"] == "Eagle3LlamaForCausalLM" and e["fc_input_is_aux"] is True
    assert d.manifest["slots"] is None and len(d) == 3 and (d.root / "engine.log").is_file()


@pytest.mark.engine
@needs_vllm
def test_top_level_ids_win_in_v1(world, tmp_path):
    """Top-level ids [1, 3, 5, 7] beside the nested ones: V1 reads the top level, so fc gets layer_in.1/3/5/7."""
    d = dump(world.target, _draft(tmp_path, "draft_odd", eagle_aux_hidden_state_layer_ids=[1, 3, 5, 7]),
             tmp_path / "dump", prompts=world.heldout_data, n=2)
    assert d.engine["aux_layer_ids"] == [1, 3, 5, 7]
    assert dump_boundaries(d, world.target) == ("layer_in.1", "layer_in.3", "layer_in.5", "layer_in.7")


@pytest.mark.engine
@needs_vllm
def test_eagle3lib_draft_forward_equals_vllms_draft_logits(world, healthy):
    """On the dumped fc inputs, eagle3lib's draft gives vLLM's first-step draft logits within 1e-4 (fp32)."""
    draft_dir, d = healthy
    model = load_draft(draft_dir, target=world.target).model.eval()
    for i, slots in enumerate(d.requests):
        aux = torch.cat(slots.tensors, dim=-1)                              # k x (T, H) -> (T, k*H)
        T = aux.shape[0]
        nxt = d.extra(i, "next_token_ids")[:1]
        ids = torch.cat([slots.input_ids, nxt])                            # row t eats token t+1; row T-1 the sample
        aux = torch.cat([aux, torch.zeros(1, aux.shape[1])])                # (T+1, k*H), last row unused
        with torch.no_grad():
            ours = model.ttt_forward(aux[None], ids[None], num_steps=1)[0][0, :T]   # (T, Vd)
        theirs = d.extra(i, "draft_logits")
        diff = (ours - theirs).abs().max().item()
        assert diff < 1e-4, f"request {i}: max |eagle3lib - vLLM| = {diff:.2e} over {T} rows"

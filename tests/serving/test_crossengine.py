"""Tests for eagle3lib.serving.crossengine: SGLang <-> vLLM mapping, per-engine layer reading, lint, discover."""
from __future__ import annotations

import json

import pytest

from eagle3lib.serving.layer_reading import draft_slots, layer_frame, layer_reading
from eagle3lib.serving.crossengine import lint, sglang_to_vllm, vllm_command
from eagle3lib.vllm_engine.method import vllm_effective, vllm_to_sglang
from eagle3lib.steps.case import SAMPLES_DIR
from eagle3lib.errors import ConfigError
from eagle3lib.serving.launch import parse_launch
from eagle3lib.sglang_engine.resolver import resolve

SEED = ("python -m sglang.launch_server --model-path data/demo/target --speculative-algorithm EAGLE3 "
        "--speculative-draft-model-path data/demo/draft --speculative-num-steps 1 --speculative-eagle-topk 1 "
        "--speculative-num-draft-tokens 16")
FIXED = SEED.replace("steps 1 ", "steps 15 ")
DRAFT = json.loads((SAMPLES_DIR / "demo_draft_config.json").read_text())


def test_knob_mapping_both_ways():
    """SGLang chain (steps, 1, steps+1) <-> vLLM K = steps; a tree has no exact vLLM equivalent."""
    assert sglang_to_vllm(3, 1, 4) == {"method": "eagle3", "num_speculative_tokens": 3, "exact": True,
                                       "note": "chain: SGLang ndt 4 = vLLM K+1 = 4 verify tokens"}
    tree = sglang_to_vllm(5, 4, 8)
    assert tree["num_speculative_tokens"] == 5 and not tree["exact"] and "no vLLM equivalent" in tree["note"]
    assert sglang_to_vllm(None, None, None)["num_speculative_tokens"] is None
    assert vllm_to_sglang(3) == {"speculative_num_steps": 3, "speculative_eagle_topk": 1,
                                 "speculative_num_draft_tokens": 4}


def test_vllm_command_round_trips_through_the_parser():
    """The rendered `vllm serve` line parses back to the same method, draft and K."""
    launch = parse_launch(vllm_command("/t", "/ckpt/epoch_9", 3))
    assert (launch.engine, launch.algorithm, launch.draft_path, launch.num_speculative_tokens) == \
        ("vllm", "eagle3", "/ckpt/epoch_9", 3)


def test_vllm_method_inference_from_the_path():
    """Without `method`, vLLM guesses from the path: a plain checkpoint dir becomes draft_model."""
    eff = vllm_effective(parse_launch('vllm serve m --speculative-config \'{"model": "/ckpt/epoch_9"}\''))
    assert eff["method"] == "draft_model" and any("draft model" in n for n in eff["notes"])
    assert any("num_speculative_tokens" in n for n in
               vllm_effective(parse_launch('vllm serve m --speculative-config \'{"model": "/x/EAGLE3-llama"}\''))["notes"])
    ok = vllm_effective(parse_launch('vllm serve m --speculative-config '
                                     '\'{"method": "eagle3", "model": "/d", "num_speculative_tokens": 2}\''))
    assert ok["notes"] == [] and ok["sglang"]["speculative_num_draft_tokens"] == 3


def test_layer_reading_of_the_sample_draft():
    """[-1,1,3,5] (output-of-layer): SGLang +1 -> embed (crash-prone), 2, 4, 6; vLLM's V2 runner does not read
    eagle_config ids -> default 2, 4, 5, its V1 runner (CPU) reads them as they are -> -1 never captured, 1, 3, 5."""
    trained, sgl, vll, v1 = layer_reading(DRAFT, 8, "0.5.6", "LlamaForCausalLM")
    assert trained.boundaries == ("embed", "layer_in.2", "layer_in.4", "layer_in.6")
    assert sgl.capture == (0, 2, 4, 6) and sgl.boundaries == trained.boundaries
    assert "crashes" in sgl.slot_problems[0] and sgl.slot_problems[1:] == (None, None, None)
    assert "llama.py adds a None residual" in sgl.slot_problems[0]
    ds = layer_reading(DRAFT, 8, "0.5.6", "DeepseekV3ForCausalLM")[1]       # the file that serves the target
    assert "deepseek_v2.py adds a None residual" in ds.slot_problems[0]
    assert vll.ids == (2, 4, 5) and vll.boundaries == ("layer_in.2", "layer_in.4", "layer_in.5")
    assert vll.runner == "v2" and any("not read by vLLM's V2" in p for p in vll.problems)
    assert (v1.engine, v1.runner, v1.ids) == ("vllm-v1", "v1", (-1, 1, 3, 5))
    assert v1.boundaries == (None, "layer_in.1", "layer_in.3", "layer_in.5") and "outside" in v1.slot_problems[0]
    assert layer_reading(DRAFT, 8, vllm_runner="v1")[2].boundaries == v1.boundaries   # the runner given: one reading
    frame = layer_frame((trained, sgl, vll))
    assert frame.loc[frame["engine"] == "vllm", "as_trained"].tolist() == [False, False, False]


def test_layer_reading_conventions_and_versions():
    """Top-level ids are read by both vLLM runners, not by SGLang; the PR #25454 heuristic applies to DeepSeek
    targets from ~0.5.12 only."""
    top = {"eagle_aux_hidden_state_layer_ids": [2, 4, 5]}
    trained, sgl, vll = layer_reading(top, 8)
    assert vll.boundaries == trained.boundaries == ("layer_in.2", "layer_in.4", "layer_in.5")
    assert sgl.key.startswith("default") and any("ignored by SGLang" in p for p in sgl.problems)
    ds = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 1, 3, 5]}}
    new = layer_reading(ds, 8, "0.5.13", "DeepseekV3ForCausalLM")[1]
    assert new.capture == (-1, 1, 3, 5) and new.boundaries[0] is None and "never captured" in new.slot_problems[0]
    assert layer_reading(ds, 8, "0.5.11", "DeepseekV3ForCausalLM")[1].capture == (0, 2, 4, 6)
    assert layer_reading(ds, 8, "0.5.13", "LlamaForCausalLM")[1].capture == (0, 2, 4, 6)
    unsorted = layer_reading({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [5, 1, 3]}}, 8)[1]
    assert unsorted.capture == (2, 4, 6) and unsorted.ids == (1, 3, 5) and "ascending" in unsorted.problems[0]
    one = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 7]}}
    assert layer_reading(one, 8, "0.5.13", "DeepseekV3ForCausalLM")[1].capture == (2, 4, 8)
    assert layer_reading(one, 8)[1].boundaries[2] is None     # output of the last layer: never captured by SGLang
    with pytest.raises(ConfigError, match="integers"):
        layer_reading({"eagle_config": {"eagle_aux_hidden_state_layer_ids": ["1"]}}, 8)


def test_draft_slots():
    """fc width: num_aux_hidden_states, else the number of ids, else 3."""
    assert draft_slots(DRAFT) == 4 and draft_slots({}) == 3 and draft_slots({"num_aux_hidden_states": 5}) == 5


def test_lint_on_the_seed():
    """The seed: unfillable ndt, topk-1 rewrite, the -1 id, engines disagree, vLLM fc width."""
    launch = parse_launch(SEED)
    res = resolve(launch, "0.5.6", "LlamaForCausalLM")
    codes = {w.code for w in lint(launch, res, DRAFT, layer_reading(DRAFT, 8))}
    assert {"ndt_unfillable", "topk1_ndt", "negative_layer_id", "engines_disagree", "vllm_fc_width",
            "vllm_layers", "sglang_capture", "max_running_48"} <= codes
    clean = {w.code for w in lint(parse_launch(FIXED), resolve(parse_launch(FIXED), "0.5.6"))}
    assert not {"ndt_unfillable", "topk1_ndt"} & clean


def test_lint_knobs_thresholds_env_and_vllm():
    """Partial knobs, lossy thresholds, simulated acceptance and vLLM path-guessing are each flagged."""
    partial = lint(parse_launch("SGLANG_SIMULATE_ACC_LEN=3 python -m sglang.launch_server --model-path m "
                                "--speculative-num-steps 3 --speculative-accept-threshold-acc 0.5"))
    assert {"partial_knobs", "lossy_threshold", "simulated_acceptance"} <= {w.code for w in partial}
    guess = lint(parse_launch('vllm serve m --speculative-config \'{"model": "/ckpt/x", "num_speculative_tokens": 3}\''))
    assert [w.code for w in guess] == ["vllm_method"]


def test_lint_tree_capacity_and_id_keys():
    """A tree whose ndt exceeds topk + (steps-1)·topk² is an error; nested vs top-level ids must agree."""
    big = lint(parse_launch("python -m sglang.launch_server --model-path m --speculative-num-steps 2 "
                            "--speculative-eagle-topk 2 --speculative-num-draft-tokens 8"))
    assert {"ndt_unfillable", "ndt_exceeds_tree"} <= {w.code for w in big}
    ok = lint(parse_launch("python -m sglang.launch_server --model-path m --speculative-num-steps 3 "
                           "--speculative-eagle-topk 4 --speculative-num-draft-tokens 13"))
    assert not {"ndt_unfillable", "ndt_exceeds_tree"} & {w.code for w in ok}
    both = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 5], "use_aux_hidden_state": False},
            "eagle_aux_hidden_state_layer_ids": [1, 3, 5]}
    codes = {w.code for w in lint(draft_config=both)}
    assert {"ids_keys_disagree", "aux_hidden_state_off"} <= codes
    both["eagle_aux_hidden_state_layer_ids"] = [2, 4, 6]
    assert "ids_keys_disagree" not in {w.code for w in lint(draft_config=both)}

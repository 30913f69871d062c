"""sglang_engine.dump: what the in-process hook recorded (events.jsonl, calls/*.safetensors), read back into the load
SGLang did and an eagle3lib dump, on files written here in the hook's own shapes (no SGLang needed)."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from eagle3lib.errors import DataError, MissingFileError
from eagle3lib.hidden.dumps import dump_engine
from eagle3lib.sglang_engine.dump import dump_from_hook, load_events
from eagle3lib.sglang_engine.serve import counted_accept_length

H = 8
PROMPTS = [[1, 5, 6, 7, 8], [1, 9, 10, 11], [1, 12, 13, 14, 15, 16]]


def hooked_run(tmp_path, events: list[dict]):
    """A served folder as serve(..., hook=True) leaves it: prompts.jsonl, hook/events.jsonl and two prefill calls
    (one batching two prompts, as concurrency does), each row's aux = its position, its draft ids shifted by one."""
    run = tmp_path / "served"
    (run / "hook" / "calls").mkdir(parents=True)
    (run / "prompts.jsonl").write_text("".join(json.dumps({"id": f"p{i}", "prompt_token_ids": p}) + "\n"
                                               for i, p in enumerate(PROMPTS)))
    (run / "hook" / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (run / "served.json").write_text(json.dumps({"version": "0.0.0.dev0", "effective": {"speculative_num_steps": 3}}))

    def call(prompts, name):
        ids = torch.cat([torch.tensor(p[1:] + [99]) for p in prompts])          # SGLang's shifted draft ids
        pos = torch.cat([torch.arange(len(p)) for p in prompts])
        aux = pos[:, None].float().repeat(1, 4 * H)
        save_file({"aux": aux, "input_ids": ids, "positions": pos,
                   "extend_seq_lens": torch.tensor([len(p) for p in prompts])}, str(run / "hook" / "calls" / name))
    call(PROMPTS[:2], "100_00001.safetensors")
    call(PROMPTS[2:], "100_00002.safetensors")
    return run


EVENTS = [{"event": "draft_loaded", "model_class": "LlamaForCausalLMEagle3", "fc_in_features": 4 * H,
           "num_aux_hidden_states": 4, "d2t_read": True, "load_lm_head_from_target": False,
           "keys": [{"key": "d2t", "shape": [5], "dtype": "torch.int64", "loaded": False},
                    {"key": "t2d", "shape": [9], "dtype": "torch.bool", "loaded": False},
                    {"key": "fc.weight", "shape": [H, 4 * H], "dtype": "torch.float32", "loaded": True},
                    {"key": "extra.weight", "shape": [2], "dtype": "torch.float32", "loaded": False}]},
          {"event": "set_embed", "draft_embedding_replaced": True, "lm_head_replaced": False},
          {"event": "target_capture", "target_class": "LlamaForCausalLM", "layer_ids": [-1, 1, 3, 5],
           "layers_to_capture": [0, 2, 4, 6], "num_layers": 8},
          {"event": "hook_skipped", "module": "sglang.srt.models.kimi_k25_eagle3", "why": "no class"}]


def test_the_load_as_sglang_did_it(tmp_path):
    """Keys no loader took are dropped, but not d2t (SGLang's hot token map) nor t2d (skipped by design)."""
    load = load_events(hooked_run(tmp_path, EVENTS) / "hook")
    assert load.dropped == ("extra.weight",) and load.d2t_read is True and load.embedding_replaced is True
    assert load.layer_ids == (-1, 1, 3, 5) and load.layers_to_capture == (0, 2, 4, 6) and load.target_layers == 8
    assert load.notes and "kimi_k25_eagle3" in load.notes[0]
    with pytest.raises(MissingFileError, match="wrote no events"):
        load_events(tmp_path / "nowhere")


def test_the_dump_holds_each_prompt_s_own_tokens_and_states(tmp_path):
    """Each batched prefill is split per request and matched to its prompt by the shifted ids: row t holds token t's
    state (here: its position), the manifest says what SGLang ran and loaded."""
    d = dump_from_hook(hooked_run(tmp_path, EVENTS), tmp_path / "dump")
    assert len(d) == 3 and [r.input_ids.tolist() for r in d.requests] == PROMPTS
    assert [float(r.tensors[3][-1, 0]) for r in d.requests] == [len(p) - 1 for p in PROMPTS]
    eng = dump_engine(tmp_path / "dump")
    assert eng["name"] == "sglang" and eng["layers_to_capture"] == [0, 2, 4, 6]
    assert eng["load"]["dropped"] == ["extra.weight"] and eng["version"] == "0.0.0.dev0"
    assert len(dump_from_hook(hooked_run(tmp_path / "again", EVENTS), tmp_path / "dump2", n=2)) == 2


def test_prefills_that_match_no_prompt_are_an_error_naming_the_folder(tmp_path):
    run = hooked_run(tmp_path, EVENTS)
    (run / "prompts.jsonl").write_text(json.dumps({"id": "x", "prompt_token_ids": [1, 2, 3]}) + "\n")
    with pytest.raises(DataError, match="no prefill of the draft matches a prompt"):
        dump_from_hook(run, tmp_path / "dump")


def test_sglang_s_accept_length_is_tokens_over_verify_rounds():
    rows = [{"completion_tokens": 23, "spec_verify_ct": 7}, {"completion_tokens": 10, "spec_verify_ct": 5},
            {"error": "refused"}]
    tau, counts = counted_accept_length(rows)
    assert tau == pytest.approx(33 / 12) and counts == {"completion_tokens": 33, "verify_rounds": 12}
    assert counted_accept_length([{"error": "x"}])[0] is None

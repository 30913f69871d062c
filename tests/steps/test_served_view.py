"""steps.served_view: what the running engine answered overrules the tables. Here: vLLM's probe saying its V1
runner captures no aux states for a draft that opts out (use_aux_hidden_state false) makes the view the target's
last hidden state with no fc, and the layout findings confirm the mismatch with the trained layout."""
from __future__ import annotations

from eagle3lib.engine_kit.view import LAST_HIDDEN
from eagle3lib.vllm_engine.probe import VllmProbe
from eagle3lib.hidden.identify import TrainedLayout
from eagle3lib.checks.engine_said import view_findings
from eagle3lib.checks.inputs import read_artifacts
from eagle3lib.steps.served_view import deployment_view
from tests.checks.world import LAYOUT, canonical_tensors, draft_raw, write_draft, write_target


def _probe(aux: bool) -> VllmProbe:
    return VllmProbe(draft="d", target="t", requested={}, vllm_version="0.32.0", error=None, runner="v1",
                     ids_used=(2, 4, 6) if aux else (), fc_slots=3 if aux else None, use_aux_hidden_state=aux,
                     aux_states_v1=aux)


def test_probe_that_captures_no_aux_states_gives_the_last_hidden_state(tmp_path):
    raw = draft_raw(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 3, 5], "use_aux_hidden_state": False})
    d, t = write_draft(tmp_path, raw, canonical_tensors(raw)), write_target(tmp_path)
    view, *_ = deployment_view("vllm", read_artifacts(draft=d, target=t), probe=_probe(False), use_probe=False)
    assert view.value("layout") == LAST_HIDDEN and view.source("layout") == "probe" and view.fc_slots == 0
    assert view.refused is None                   # the table's V2 prediction gives way to the V1 runner's answer
    trained = TrainedLayout(LAYOUT, "declared", "the data's declared layout")
    f = {x.cause: x for x in view_findings(view, trained, num_layers=8)}
    assert f["aux_layout_mismatch"].status == "confirmed"
    assert f["aux_layout_mismatch"].evidence["served_layout"] == list(LAST_HIDDEN)


def test_probe_that_captures_the_trained_layout_rules_the_layout_out(tmp_path):
    raw = draft_raw(eagle_config=None, eagle_aux_hidden_state_layer_ids=[2, 4, 6], num_aux_hidden_states=3)
    d, t = write_draft(tmp_path, raw, canonical_tensors(raw)), write_target(tmp_path)
    view, *_ = deployment_view("vllm", read_artifacts(draft=d, target=t), probe=_probe(True), use_probe=False)
    assert view.value("layout") == LAYOUT and view.fc_slots == 3
    trained = TrainedLayout(LAYOUT, "declared", "the data's declared layout")
    assert {x.status for x in view_findings(view, trained, num_layers=8)} == {"ruled out"}


def test_what_sglang_loaded_and_said_overrules_the_tables(tmp_path):
    """The load eagle3lib's SGLang hook recorded (the layers captured, d2t read, the target's embedding, no lm_head
    key and none given) overrules the tables as the running engine's own answer; a traceback in its log is a
    refusal."""
    raw = draft_raw(eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 1, 3, 5]})
    d, t = write_draft(tmp_path, raw, canonical_tensors(raw)), write_target(tmp_path)
    art = read_artifacts(draft=d, target=t)
    load = {"model_class": "LlamaForCausalLMEagle3", "layer_ids": [0, 1, 3, 5], "layers_to_capture": [1, 2, 4, 6],
            "d2t_read": False, "embedding_replaced": True, "lm_head_replaced": False, "dropped": ["extra.weight"],
            "keys": [{"key": "fc.weight", "loaded": True}, {"key": "extra.weight", "loaded": False}]}
    got, notes, _ = deployment_view("sglang", art, version="0.5.6", load=load)
    assert got.value("layout") == ("layer_in.1", "layer_in.2", "layer_in.4", "layer_in.6")
    assert {a: got.source(a) for a in ("layout", "d2t", "embedding", "lm_head")} == dict.fromkeys(
        ("layout", "d2t", "embedding", "lm_head"), "probe")
    assert (got.value("d2t"), got.value("embedding"), got.value("lm_head")) == ("zeros", "target", "random")
    assert any("extra.weight" in n for n in notes) and got.refused is None
    log = tmp_path / "server.log"
    log.write_text("[2026-12-05 04:28:16] Scheduler hit an exception: Traceback (most recent call last):\n"
                   '  File "/x/site-packages/sglang/srt/configs/model_config.py", line 846, in _derive\n'
                   "    raise ValueError(\nValueError: Warning: Target model's context_length (512) is greater than "
                   "the derived context_length (64).\n")
    refused, *_ = deployment_view("sglang", art, version="0.5.6", logs=[str(log)])
    assert refused.refused_source == "log" and "derived context_length (64)" in refused.refused
    assert "sglang/srt/configs/model_config.py:846" in refused.refused
    with open(log, "a") as f:       # an exception SGLang logged and served past (its warm-up's freeze_gc) is no refusal
        f.write("[2026-12-05 04:28:20] Decode batch, #running-req: 1, #token: 33, accept len: 3.20\n")
    served, notes, _ = deployment_view("sglang", art, version="0.5.6", logs=[str(log)])
    assert served.refused is None and any("not a refusal" in n for n in notes)

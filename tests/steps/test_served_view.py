"""steps.served_view: what the running engine answered overrules the tables. Here: vLLM's probe saying its V1
runner captures no aux states for a draft that opts out (use_aux_hidden_state false) makes the view the target's
last hidden state with no fc, and the layout findings confirm the mismatch with the trained layout."""
from __future__ import annotations

from eagle3lib.engines.loaded_view import LAST_HIDDEN
from eagle3lib.vllm_driver.probe import VllmProbe
from eagle3lib.hidden.identify import TrainedLayout
from eagle3lib.checks.engine_said import view_findings
from eagle3lib.steps.served_view import deployment_view
from tests.checks.world import LAYOUT, canonical_tensors, draft_raw, write_draft, write_target


def _probe(aux: bool) -> VllmProbe:
    return VllmProbe(draft="d", target="t", requested={}, vllm_version="0.32.0", error=None, runner="v1",
                     ids_used=(2, 4, 6) if aux else (), fc_slots=3 if aux else None, use_aux_hidden_state=aux,
                     aux_states_v1=aux)


def test_probe_that_captures_no_aux_states_gives_the_last_hidden_state(tmp_path):
    raw = draft_raw(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 3, 5], "use_aux_hidden_state": False})
    d, t = write_draft(tmp_path, raw, canonical_tensors(raw)), write_target(tmp_path)
    view, _ = deployment_view("vllm", d, t, probe=_probe(False), use_probe=False)
    assert view.value("layout") == LAST_HIDDEN and view.source("layout") == "probe" and view.fc_slots == 0
    assert view.refused is None                   # the table's V2 prediction gives way to the V1 runner's answer
    trained = TrainedLayout(LAYOUT, "declared", "the data's declared layout")
    f = {x.cause: x for x in view_findings(view, trained, num_layers=8)}
    assert f["aux_layout_mismatch"].status == "confirmed"
    assert f["aux_layout_mismatch"].evidence["served_layout"] == list(LAST_HIDDEN)


def test_probe_that_captures_the_trained_layout_rules_the_layout_out(tmp_path):
    raw = draft_raw(eagle_config=None, eagle_aux_hidden_state_layer_ids=[2, 4, 6], num_aux_hidden_states=3)
    d, t = write_draft(tmp_path, raw, canonical_tensors(raw)), write_target(tmp_path)
    view, _ = deployment_view("vllm", d, t, probe=_probe(True), use_probe=False)
    assert view.value("layout") == LAYOUT and view.fc_slots == 3
    trained = TrainedLayout(LAYOUT, "declared", "the data's declared layout")
    assert {x.status for x in view_findings(view, trained, num_layers=8)} == {"ruled out"}

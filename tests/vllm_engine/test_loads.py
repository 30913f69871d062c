"""vllm_engine.loads: the draft as vLLM loads it, by the tables. Here: a vLLM draft that opts out of aux states
(use_aux_hidden_state false, field-causes.md #38) is predicted as vLLM 0.32's runners serve it, and the layout check
then sees the mismatch against the trained layout instead of a captured trained layout."""
from __future__ import annotations

import pytest

from eagle3lib.engines import facts
from eagle3lib.engine_kit.view import LAST_HIDDEN
from eagle3lib.hidden.explain import causes_of, explain
from eagle3lib.vllm_engine.loads import aux_opted_out, table_view
from tests.serving.test_loaded_view import TARGET, TENSORS, TRAINED, raw


def view(r: dict, runner=None):
    return table_view(draft_raw=r, tensors=TENSORS, target_info=TARGET, version="0.32.0", runner=runner)


@pytest.mark.parametrize("value,off", [(True, False), (None, False), (False, True), ([], True), (0, True)])
def test_aux_opted_out_reads_eagle_config_truthiness(value, off):
    """vLLM reads use_aux_hidden_state from eagle_config only, and any false value turns aux states off."""
    assert aux_opted_out(raw(value)) is off
    assert aux_opted_out({"use_aux_hidden_state": False}) is False          # top level: not read


def test_opted_out_on_the_v1_runner_feeds_the_last_hidden_state_and_no_fc():
    """V1 (CPU builds): the target's last hidden state, no fc, served (no refusal); the detail cites the fact row."""
    v = view(raw(False), runner="v1")
    assert v.value("layout") == LAST_HIDDEN and v.fc_slots == 0 and v.refused is None
    assert facts.fact("vllm", "flag", "use_aux_hidden_state@v1_runner").source in v.aspects["layout"].detail
    assert "aux_layout_mismatch" in causes_of(explain(TRAINED, v.value("layout"), num_layers=8))


def test_opted_out_on_the_v2_runner_is_still_fed_aux_states_and_refused():
    """V2 (and no runner named: V2 is the CUDA default): the captured aux states, concatenated, with no fc: the
    table predicts the first request fails (a static reading, said so)."""
    for runner in ("v2", None):
        v = view(raw(False), runner=runner)
        assert v.fc_slots == 0 and len(v.value("layout")) == 3 and LAST_HIDDEN != v.value("layout")
        assert v.refused and "static" in v.refused and v.refused_source == "table"


def test_a_draft_that_keeps_aux_states_is_unchanged():
    """use_aux_hidden_state true or absent: the reading's layout, fc sized by num_aux_hidden_states, served."""
    for flag in (True, None):
        v = view(raw(flag), runner="v1")
        assert v.value("layout") == TRAINED and v.fc_slots == 3 and v.refused is None


def test_the_layout_is_the_named_runners_reading():
    """Ids only under eagle_config.eagle_aux_hidden_state_layer_ids: the V1 runner reads them, the V2 runner does not
    (it falls back to its default layers); the view follows the runner the deployment names (unnamed: V2's)."""
    r = {k: v for k, v in raw(None).items() if k != "eagle_aux_hidden_state_layer_ids"}
    v1, v2, unnamed = view(r, runner="v1"), view(r, runner="v2"), view(r)
    assert v1.value("layout") == ("layer_in.1", "layer_in.3", "layer_in.5") and "V1" in v1.aspects["layout"].detail
    assert v2.value("layout") != v1.value("layout") and "V2" in v2.aspects["layout"].detail
    assert unnamed.value("layout") == v2.value("layout")

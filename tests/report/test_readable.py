"""eagle3lib.report.readable: the findings notebooks record, as sentences and small tables (shapes as recorded)."""
from __future__ import annotations

import re

from eagle3lib.report import readable as R
from eagle3lib.report.index import index_html

LAYOUT = ["embed", "layer_in.2", "layer_in.4", "layer_in.6"]
SERVED = ["layer_in.2", "layer_in.4", "layer_in.6", "zeros"]

NB01 = {"headline": "num_draft_tokens 16 → 2 (topk=1 rule, SGLang ≥ 0.4.6)",
        "config_override": {"sglang_version": "0.5.6", "target_arch": "LlamaForCausalLM",
                            "changed": {"max_running_requests": [None, 48], "speculative_num_draft_tokens": [16, 2]},
                            "rejected": [], "log_confirms": True,
                            "layers": {"trained": LAYOUT, "sglang": LAYOUT, "vllm": LAYOUT[1:]},
                            "lint": ["topk1_ndt", "vllm_layers"], "problems": 0}}

REPLAY = {"layout": LAYOUT, "d2t": "offsets", "align": 0, "samples": 64, "acc_per_step": [0.9194, 0.9255],
          "simulated_accept_length": 3.5527}
NB02 = {"headline": "serving layout: wiring", "findings": [{"cause": "aux_layout_mismatch"}],
        "verdicts": {"training": {"verdict": "generalization", "reason": "training samples give 0.919",
                                  "heldout_acc0": {"held-out": 0.8857}, "thresholds": {"wiring_drop": 0.1}},
                     "serving": {"verdict": "wiring", "reason": "step-0 accuracy is 0.244 & low",
                                 "thresholds": {"wiring_drop": 0.1}}},
        "replays": {"training": {"label": "training", **REPLAY},
                    "serving": {"label": "serving", **REPLAY, "layout": SERVED, "acc_per_step": [0.2435, 0.1245],
                                "simulated_accept_length": 1.2917}},
        "layout_search": {"best": "add embedding slot", "restored": True,
                          "message": "'add embedding slot' restores step-0 accuracy from 0.227 to 0.929"}}

NB03 = {"trained_layout": LAYOUT, "served_layout": SERVED, "difference_kinds": ["missing_slot", "padding"],
        "advice": {"sglang": [-1, 1, 3, 5], "vllm": [0, 2, 4, 6]},
        "fix_accuracy": {"as served": 0.2246, "fixed (identified training layout)": 0.9175},
        "headline": "serving feeds the wrong layers"}


def cells(page: str) -> list[list[str]]:
    """Every table row of `page` as its cells' text."""
    return [[re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<t[dh]>(.*?)</t[dh]>", tr)]
            for tr in re.findall(r"<tr>(.*?)</tr>", page)]


def test_numbers_read_as_numbers():
    assert [R.number(x) for x in (3, 0.2246, 3.5527, 12345.6, True, 0.0093)] == \
        ["3", "0.225", "3.55", "12,346", "yes", "0.0093"]
    assert R.value_text(None) == "—" and R.value_text([]) == "none" and R.value_text(list(range(14))).endswith("(+2 more)")


def test_requested_to_effective_and_engine_layers_as_tables():
    page = R.findings_html(NB01)
    rows = cells(page)
    assert ["speculative num draft tokens", "16 → 2"] in rows and ["max running requests", "— → 48"] in rows
    assert ["vllm", "layer_in.2, layer_in.4, layer_in.6"] in rows
    assert "sglang version: 0.5.6" in page and "log confirms: yes" in page and "lint: topk1_ndt, vllm_layers" in page
    assert "headline" not in page


def test_verdicts_as_sentences_and_replays_as_one_table():
    page = R.findings_html(NB02)
    assert "<b>serving</b>: <b>wiring</b>: step-0 accuracy is 0.244 &amp; low" in page
    assert "thresholds" not in page                            # a verdict reads as its reason
    rows = cells(page)
    assert rows[0] == ["", "layout", "acc per step", "simulated accept length"]       # varying fields only
    assert rows[2] == ["serving", "layer_in.2, layer_in.4, layer_in.6, zeros", "0.243, 0.124", "1.29"]
    assert "all: d2t offsets, align 0, samples 64" in page      # the constant fields, once
    assert "layout search</b>: &#x27;add embedding slot&#x27; restores step-0 accuracy from 0.227 to 0.929" in page
    assert "aux_layout_mismatch" not in page                    # cause findings are the diagnosis' business


def test_layouts_slot_by_slot_and_accuracy_as_served_to_fixed():
    page = R.findings_html(NB03)
    rows = cells(page)
    assert rows[0] == ["slot", "trained layout", "served layout"] and rows[1] == ["0", "embed", "layer_in.2"]
    assert rows[4] == ["3", "layer_in.6", "zeros"]
    assert ["sglang", "-1, 1, 3, 5"] in rows
    assert "as served <b>0.225</b> → fixed (identified training layout) <b>0.917</b>" in page
    assert "<b>difference kinds</b>: missing_slot, padding" in page


def test_the_index_shows_no_json_and_cuts_nothing():
    rows = [{"notebook": n, "status": "ok", "findings": f} for n, f in (("01", NB01), ("02", NB02), ("03", NB03))]
    page = index_html(rows, {})
    notebooks = page.split("<th>files</th></tr>")[-1]                  # the notebook rows
    assert "&quot;" not in notebooks and "{" not in notebooks and "…" not in notebooks
    assert "1 cause findings, in the answer above" in notebooks

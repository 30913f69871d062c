"""The index page read in 30 seconds (eagle3lib.report.page, assembled by report.index): the answer first with
each alarm's evidence lines and fix, the layer names as the engines write them, ruled-out and not-checked causes
folded, paths relative to the inputs; and, in the system Chromium at 1400 px, no horizontal scrollbar on a page
made to be wide, the answer above the notebooks, the long lists folded."""
from __future__ import annotations

import json
import re

import pytest

from eagle3lib.causes import CATALOGUE, Finding, not_checked
from eagle3lib.diagnose.combine import diagnose
from eagle3lib.report import page
from eagle3lib.report.index import base_of, write_index
from tests.browser import Browser, skip_reason

BASE = "/data/team/deploy-7"
LONG_PATH = f"{BASE}/dumps/sglang_tensor_dump_with_a_very_long_name_" + "x" * 120
FIX = ("make the engine capture [embed, layer_in.2, layer_in.4, layer_in.6]: sglang: "
       "eagle_config.eagle_aux_hidden_state_layer_ids = [-1, 1, 3, 5]; vllm: eagle_aux_hidden_state_layer_ids = "
       "[0, 2, 4, 6]")


def _findings() -> list[dict]:
    """Two checks confirming one layout cause (one with a long path), a suspected one, every other cause of the
    catalogue ruled out but a few not checked: a page with 40-odd folded rows."""
    ev = {"trained_layout": ["embed", "layer_in.2", "layer_in.4", "layer_in.6"],
          "served_layout": ["layer_in.2", "layer_in.4", "layer_in.6", "zeros"]}
    out = [Finding("aux_layout_mismatch", "confirmed", f"serving feeds [layer_in.2, layer_in.4, layer_in.6, zeros] "
                   f"(identified from the serving dump {LONG_PATH})", ev, "02 training-sample replay / replay",
                   fix=FIX, measured=True),
           Finding("aux_layout_mismatch", "confirmed", "the dump misses the embedding slot", ev,
                   "03 hidden-state diffing / dump", fix=FIX, measured=True),
           Finding("short_context", "suspected", "the draft's window is 2048, served prompts reach 8k", {},
                   "00 checkpoint audit / context", fix="serve with --context-length 2048")]
    out += [not_checked("ndt_override", "01 config override discovery", "the launch command (launch)"),
            not_checked("engine_regression", "01 served", "a decode log with accept lengths (served_log_path)")]
    taken = {f.cause for f in out}
    out += [Finding(c, "ruled out", f"{c} ruled out: ruled-out-evidence-{c}", {}, "00 checkpoint audit / x")
            for c in CATALOGUE if c not in taken]
    return [f.to_dict() for f in out]


def _rows() -> list[dict]:
    wide = "<table>" + "".join("<tr>" + "".join(f"<td>cell_{i}_{j}_wide_value</td>" for j in range(30)) + "</tr>"
                               for i in range(5)) + "</table>"
    return [{"notebook": "00_checkpoint_audit", "status": "ok", "seconds": 5.0, "html": "00.html", "run_id": "r2",
             "findings": {"headline": "h" * 300, "findings": _findings(), "table": {f"k{i}": {"a": "v" * 80, "b": 1}
                                                                                   for i in range(6)}},
             "warnings": ["w" * 400], "figure_html": wide},
            {"notebook": "02_training_sample_replay", "status": "failed", "seconds": 1.0, "run_id": "r2",
             "error": f"DataError: {LONG_PATH}: bad", "findings": {}},
            {"notebook": "03_hidden_state_diffing", "status": "ok", "seconds": 2.0, "run_id": "r1",
             "earlier_run": True, "findings": {"headline": "stale headline"}}]


def test_the_answer_lists_alarms_whole_and_folds_the_rest():
    from eagle3lib.report.findings import findings_of

    d = diagnose(findings_of({"findings": _findings()}))
    body = page.answer_html(d, [], {"02": "02.html"}, BASE, given=("draft",))
    assert body.index("Confirmed (1)") < body.index("Suspected (1)") < body.index("Ruled out (")
    assert body.count("<div class='ev'>") == 3 and body.count("Fix: make the engine capture") == 1
    assert "decided by" not in body and BASE not in body and "dumps/sglang_tensor_dump_with" in body
    assert '[<a href="02.html">02 training-sample replay / replay</a>]' in body
    assert "<details id='ruled-out'>" in body and "<details id='not-checked'>" in body     # folded (not open)
    assert "give --launch (YAML key launch)</b>: ndt_override" in body
    assert "give --served-log (YAML key served_log_path)</b>: engine_regression" in body
    layers = page.layers_html(d)
    assert "<td><code>layer_in.4</code></td><td>the input of decoder layer 4 = the output of layer 3</td>" \
           "<td>3 (L3)</td><td>4</td>" in layers and "<td><code>embed</code></td>" in layers


def test_paths_are_relative_to_the_inputs_folder():
    assert base_of({"inputs": {"draft": f"{BASE}/draft", "train_data": f"{BASE}/data/train.jsonl"}}) == BASE
    assert base_of({"inputs": {}, "cwd": "/repo"}) == "/repo" and base_of({}) is None
    assert page.relative(f"read {BASE}/draft/config.json", BASE) == "read draft/config.json"
    assert page.relative("x /elsewhere/y", BASE) == "x /elsewhere/y"


@pytest.mark.skipif(skip_reason() is not None, reason=str(skip_reason()))
def test_the_index_fits_1400px_answer_first_long_lists_folded(tmp_path):
    rows = _rows()
    (tmp_path / "00_checkpoint_audit.figure.html").write_text(rows[0].pop("figure_html"))
    rows[0]["figure"] = "00_checkpoint_audit.figure.html"
    write_index(tmp_path, rows, {"run_id": "r2", "params_file": f"{BASE}/mine.yaml", "inputs": {
        "draft": f"{BASE}/draft", "serving_dump": f"{BASE}/dumps/x"}})
    shot = tmp_path / "index.1400px.png"
    with Browser(width=1400, height=900) as b:
        shown = b.layout(tmp_path / "index.html", shot)
    assert shown["scroll_width"] <= shown["client_width"] == 1400, shown["scroll_width"]
    assert shown["headings"] == ["The answer", "The seed's decision", "Notebooks of this run",
                                 "Earlier runs: stale, not in the diagnosis"]
    text = shown["text"]
    assert text.index("Confirmed (1)") < text.index("Fix: make the engine capture") < text.index("00_checkpoint")
    folded = {d["id"]: d for d in shown["details"]}
    assert not folded["ruled-out"]["open"] and re.match(r"Ruled out \(\d\d\)", folded["ruled-out"]["summary"])
    assert not folded["not-checked"]["open"] and "ruled-out-evidence-rope_mismatch" not in text
    assert "stale headline" in text and text.index("stale headline") > text.index("Notebooks of this run")
    assert shot.stat().st_size > 10_000
    data = json.loads((tmp_path / "index.json").read_text())
    assert {v["cause"] for v in data["diagnosis"]["verdicts"] if v["status"] == "confirmed"} == {"aux_layout_mismatch"}

"""Tests for eagle3lib.replay.tokenview: status per token, HTML rendering, position table, collect, widget browser."""
from __future__ import annotations

import dataclasses

import torch

from eagle3lib.replay import tokenview as TV
from eagle3lib.model.audit import audit_draft
from eagle3lib.model.checkpoint import save_draft
from eagle3lib.model.config import DraftConfig
from tests.model.test_audit import _world
from tests.replay.test_run import make_samples, make_setup


def hand_detail() -> TV.SampleDetail:
    """T=6, K=2: chain from t=0 accepts 2 drafts, from t=1 none, t=2 one; t>=3 not scored."""
    T, K = 6, 2
    valid = torch.zeros(K, T, dtype=torch.bool)
    valid[0, :3] = True
    valid[1, :2] = True
    ref = torch.full((K, T), -1)
    ref[0, :3] = torch.tensor([2, 3, 4])
    ref[1, :2] = torch.tensor([3, 4])
    correct = torch.zeros(K, T, dtype=torch.bool)
    correct[0, 0] = correct[1, 0] = correct[0, 2] = True
    topk = torch.zeros(K, T, 2, dtype=torch.long)
    topk[0, :, 0] = torch.tensor([2, 9, 4, 0, 0, 0])
    probs = torch.full((K, T, 2), 0.5)
    return TV.SampleDetail("h", "mem", torch.tensor([0, 1, 2, 3, 4, 5]), torch.ones(T, dtype=torch.long), ref, valid,
                           correct, topk, probs, topk[..., 0].clone(), torch.tensor([3, 1, 2, 0, 0, 0]), "data")


class Tok:
    """A stand-in tokenizer: id i decodes to a word, 5 decodes to something needing escaping."""

    def decode(self, ids):
        return "<b>" if ids[0] == 5 else f"w{ids[0]} "


def test_status_marks_accepted_rejected_unscored():
    """Token p at step k is judged by the chain from t = p-2-k."""
    d = hand_detail()
    assert d.status(0) == ["unscored", "unscored", "accepted", "rejected", "accepted", "unscored"]
    assert d.status(1) == ["unscored", "unscored", "unscored", "accepted", "rejected", "unscored"]


def test_render_html_escapes_and_explains():
    """Tokens are escaped, coloured by status, and hover text names draft top-k and the reference."""
    html = TV.sample_html(hand_detail(), Tok(), step=0, position=1)
    assert "&lt;b&gt;" in html and "<b>h</b>" in html
    assert html.count("#c8f0c8") == 2 + 1 and html.count("#f6c4c4") == 1 + 1       # + legend entries
    assert "reference w3 " in html and "draft w9  0.50" in html
    assert html.count("border-bottom") == 3                    # tokens t+1 .. t+1+K around position 1


def test_position_table_lists_every_step():
    """One row per step, with the reference, the top-k, whether top-1 was right, the chain token."""
    t = TV.position_table(hand_detail(), 0, Tok())
    assert list(t.step) == [0, 1] and list(t["accepted in chain"]) == [True, True]
    assert t.reference[0] == "w2 " and t["top-1 right"].tolist() == [True, True]
    t = TV.position_table(hand_detail(), 4, None)
    assert t.reference.tolist() == ["(not scored)"] * 2 and t["chain token"][0] == "#0"


def test_collect_keeps_topk_consistent_with_scoring(tmp_path):
    """collect gives n samples with (K, T, topk) top-k whose first entry decides `correct`."""
    setup = make_setup(tmp_path)
    samples, _, _ = make_samples(setup, n=2)
    details = TV.collect(setup, samples, n=2, num_steps=3, topk=4)
    assert [d.id for d in details] == ["s0", "s1"]
    d = details[0]
    T = len(d.input_ids)
    assert d.topk_ids.shape == (3, T, 4) and d.chain_ids.shape == (3, T)
    assert torch.equal(d.correct, d.valid & (d.topk_ids[..., 0] == d.reference))
    assert (d.topk_probs[..., :-1] >= d.topk_probs[..., 1:]).all()


def test_static_view_and_browser(tmp_path):
    """The static HTML holds the first samples; the widget redraws when the step changes."""
    setup = make_setup(tmp_path)
    samples, _, _ = make_samples(setup, n=2)
    details = TV.collect(setup, samples, n=2)
    html = TV.static_view(details, None, n=1).data
    assert "s0" in html and "s1" not in html
    box = TV.browser(details)
    controls, text = box.children[0], box.children[1]
    before = text.value
    controls.children[1].value = 1
    assert text.value != before and "step 1" in text.value
    assert TV.browser([]).value.startswith("<i>")


def test_the_browser_table_follows_the_position_and_holds_no_output_widget():
    """The position table is an HTML widget redrawn with the position (an Output widget makes a headless client
    send comm messages on the shell socket it awaits the cell's reply on)."""
    import ipywidgets as w
    box = TV.browser([hand_detail()], Tok())
    pos, table = box.children[0].children[2], box.children[2]
    assert isinstance(table, w.HTML) and "<table" in table.value

    def walk(x):
        yield x
        for c in getattr(x, "children", ()):
            yield from walk(c)
    assert not [x for x in walk(box) if isinstance(x, w.Output)]
    before = table.value
    pos.value = pos.value + 1
    assert table.value != before
    assert table.value == TV.position_table(hand_detail(), pos.value, Tok()).to_html(index=False)


def late_detail(first: int, sid: str = "late") -> TV.SampleDetail:
    """hand_detail with nothing scored before position `first` (a prompt the loss mask leaves out)."""
    d = hand_detail()
    valid = d.valid.clone()
    valid[:, :first] = False
    return dataclasses.replace(d, id=sid, valid=valid, correct=d.correct & valid)


def test_first_scored_position():
    assert TV.first_scored(hand_detail()) == 0
    assert TV.first_scored(late_detail(2)) == 2
    none = late_detail(6)
    assert TV.first_scored(none) == 0 and not none.valid.any()


def test_browser_opens_on_the_first_scored_position_of_each_sample():
    """Position 0 of a real sample is never scored: the view starts where the first table has rows to read."""
    box = TV.browser([late_detail(2, "a"), late_detail(1, "b")], Tok())
    sample, _, pos = box.children[0].children
    text = box.children[1]
    assert pos.value == 2
    assert TV.position_table(late_detail(2), pos.value, Tok())["reference"][0] == "w4 "      # a scored row
    assert text.value.count("border-bottom") == 3                      # the window after position 2 is marked
    sample.value = 1
    assert pos.value == 1 and "<b>b</b>" in text.value
    pos.value = 0                                                      # the user may still go anywhere
    sample.value = 0
    assert pos.value == 2


def test_browser_on_collected_samples_starts_scored(tmp_path):
    setup = make_setup(tmp_path)
    samples, _, _ = make_samples(setup, n=2)
    details = TV.collect(setup, samples, n=2)
    pos = TV.browser(details).children[0].children[2]
    assert pos.value == TV.first_scored(details[0]) and bool(details[0].valid[:, pos.value].any())


# ---------------------------------------------------------------- the audit's forward preview (notebook 00)

def test_preview_table_marks_matches(tmp_path, tiny_cfg_dict):
    """The preview has one row per position and a ✓/✗ mark per step."""
    tiny_cfg_dict["draft_vocab_size"] = 120
    draft, target = _world(tmp_path, tiny_cfg_dict)
    a = audit_draft(draft, target)
    df = TV.preview_table(a.loaded.model, torch.randint(0, 120, (10,)), torch.randn(10, 128), num_steps=2)
    assert len(df) == 8 and df["step 0: draft"].str[-1].isin(["✓", "✗"]).all()


def test_preview_table_of_a_p_eagle_draft_shows_its_parallel_depths(tmp_path, tiny_cfg_dict):
    """A P-EAGLE draft's preview rows are its parallel_forward depths, not TTT steps."""
    from eagle3lib.model.peagle import PEagleDraft
    raw = {**tiny_cfg_dict, "architectures": ["PEagleDraftModel"], "mask_token_id": 3}
    d = PEagleDraft(DraftConfig.from_dict(raw))
    for p in d.parameters():
        torch.nn.init.normal_(p, std=0.3)
    draft, target = _world(tmp_path, raw)
    sd = {k: v.contiguous() for k, v in d.state_dict().items()}
    save_draft(sd, raw, draft)
    a = audit_draft(draft, target)
    ids, aux = torch.randint(0, 120, (10,)), torch.randn(10, 128)
    with torch.no_grad():
        want = d.parallel_forward(aux[None], ids[None], 2, return_logits=False)
    df = TV.preview_table(a.loaded.model, ids, aux, num_steps=2)
    shown = df["step 1: draft"].dropna().str.rstrip(" ✓✗").tolist()
    assert shown == [str(int(d.to_target_ids(want[1][0, t]))) for t in range(len(shown))] and len(shown) == 7

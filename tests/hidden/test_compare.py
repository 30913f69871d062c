"""Planted layout differences are identified and named; a correct capture is reported clean."""
from __future__ import annotations

import matplotlib
import pytest
import torch
import transformers

from eagle3lib.hidden.capture import Slots, as_slots, capture
from eagle3lib.hidden.dumps import load_dump, save_dump
from eagle3lib.hidden.compare import (TOLERANCES, Comparison, compare, identify_fc_input,
    plot_similarity, similarity, tolerance_for)
from eagle3lib.hidden.explain import explain
from eagle3lib.errors import DataError, LayoutError

matplotlib.use("Agg")
L, H, T = 6, 32, 24
TRAIN = ("embed", "layer_in.2", "layer_in.3", "layer_in.5")    # the seed's [embed, low, mid, high], scaled down


def tiny_llama(random_norms: bool) -> transformers.LlamaForCausalLM:
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=100, hidden_size=H, intermediate_size=64, num_hidden_layers=L,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    m = transformers.LlamaForCausalLM(cfg).eval()
    if random_norms:   # trained targets have norm weights far from 1
        with torch.no_grad():
            for name, p in m.named_parameters():
                if "norm" in name:
                    p.uniform_(0.3, 2.0)
    return m


@pytest.fixture(scope="module")
def ids():
    return torch.randint(0, 100, (T,), generator=torch.Generator().manual_seed(3))


@pytest.fixture(scope="module")
def ref(ids):
    return capture(tiny_llama(True), ids)


def served(ref, names, ids=None, **kw):
    """Slots holding the reference tensors `names`, declared as the training layout."""
    return as_slots([ref[n].clone() for n in names], kw.pop("layout", None), input_ids=ref.input_ids if ids is None
                    else ids, source="planted")


def diagnose(ref, slots, expected=TRAIN):
    cmp = compare(slots, ref)
    return cmp, explain(expected, cmp)


def test_correct_capture_is_clean(ref):
    """The trained tensors in the trained order: every slot matched with high confidence, no finding."""
    cmp, d = diagnose(ref, served(ref, TRAIN, layout=TRAIN))
    assert cmp.identified == TRAIN and cmp.declared == TRAIN
    assert list(cmp.slots["status"]) == ["match"] * 4 and list(cmp.slots["shift"]) == [0] * 4
    assert (cmp.slots["confidence"] > 0.5).all() and (cmp.slots["margin"] > 0.01).all()
    assert (cmp.slots["declared_cos_mean"] > 0.999999).all()
    assert d.clean and d.kinds == set() and d.summary.startswith("clean")


def test_honest_bf16_capture_is_clean(ref):
    """A capture stored in bf16 is judged at bf16 tolerance: no false alarm."""
    s = as_slots([ref[n].bfloat16() for n in TRAIN], TRAIN, input_ids=ref.input_ids)
    cmp, d = diagnose(ref, s)
    assert set(cmp.slots["tolerance"]) == {"bfloat16"} and cmp.identified == TRAIN
    assert d.clean, d.summary


def test_missing_embedding_is_named(ref):
    """The seed's bug: serving feeds [low, mid, high] to a draft trained on [embed, low, mid, high]."""
    cmp, d = diagnose(ref, served(ref, TRAIN[1:]))
    assert cmp.identified == TRAIN[1:]
    assert d.kinds == {"missing_slot", "width"}
    miss = [f for f in d.findings if f.kind == "missing_slot"]
    assert len(miss) == 1 and miss[0].slot == 0 and "(embed)" in miss[0].text


def test_zero_padded_serving_capture_is_named(ref):
    """A 3-state capture zero-padded into a 4-slot fc: the embedding is missing and slot 3 is padding."""
    slots = as_slots([ref[n].clone() for n in TRAIN[1:]] + [torch.zeros(T, H)], None, input_ids=ref.input_ids)
    cmp, d = diagnose(ref, slots)
    assert cmp.identified == TRAIN[1:] + ("zeros",) and cmp.slots["status"].iloc[3] == "zeros"
    assert d.kinds == {"missing_slot", "padding"}
    assert "move one place left" in next(f.text for f in d.findings if f.kind == "missing_slot")


def test_shift_by_one_is_named(ref):
    """Every slot one layer deeper (or shallower): a convention mismatch, not three unrelated errors."""
    trained = ("layer_in.1", "layer_in.3", "layer_in.4")
    _, d = diagnose(ref, served(ref, ("layer_in.2", "layer_in.4", "layer_in.5")), trained)
    assert d.kinds == {"shift"} and "1 layer(s) deeper" in d.summary and "convention" in d.summary
    _, d = diagnose(ref, served(ref, ("embed", "layer_in.2", "layer_in.3")), trained)
    assert d.kinds == {"shift"} and "shallower" in d.summary


def test_single_slot_shift_is_named(ref):
    """One slot off by one layer is reported on that slot."""
    _, d = diagnose(ref, served(ref, ("embed", "layer_in.2", "layer_in.4", "layer_in.5")))
    f = [f for f in d.findings if f.kind == "shift"]
    assert d.kinds == {"shift"} and len(f) == 1 and f[0].slot == 2 and "layer_in.4" in f[0].text


def test_permutation_is_named(ref):
    """The right tensors in another order."""
    _, d = diagnose(ref, served(ref, ("layer_in.3", "embed", "layer_in.2", "layer_in.5")))
    assert d.kinds == {"permutation"} and "fc.weight" in d.summary


@pytest.mark.parametrize("random_norms", [True, False])
def test_postnorm_last_slot_is_named(ids, random_norms):
    """The final POST-norm state where training used pre-norm, even with all-ones norm weights (same direction)."""
    ref = capture(tiny_llama(random_norms), ids)
    trained = ("embed", "layer_in.3", "final_prenorm")
    cmp, d = diagnose(ref, served(ref, ("embed", "layer_in.3", "final_postnorm")), trained)
    assert cmp.identified[2] == "final_postnorm" and cmp.slots.loc[2, "status"] == "match"
    assert d.kinds == {"postnorm"} and [f.slot for f in d.findings if f.kind == "postnorm"] == [2]


def test_next_token_alignment_is_named(ref):
    """Rows holding the state of token t+1 under the id of token t are caught by the shifted comparison."""
    s = as_slots([ref[n][1:] for n in TRAIN], TRAIN, input_ids=ref.input_ids[:-1])
    cmp, d = diagnose(ref, s)
    assert list(cmp.slots["shift"]) == [1] * 4 and cmp.identified == TRAIN
    assert d.kinds == {"alignment"} and "t+1" in d.summary


def test_a_slot_rounded_through_bf16_is_judged_at_bf16(ref):
    """One fp32 slot rounded through bf16 (what a bf16 server hands over): its values are exactly bf16-representable,
    so it is judged at bf16's tolerance: a match, with the bf16 evidence in its note, and no damage said."""
    x = [ref[n].clone() for n in TRAIN]
    x[2] = x[2].bfloat16().float()
    cmp, d = diagnose(ref, as_slots(x, TRAIN, input_ids=ref.input_ids))
    assert cmp.identified == TRAIN and cmp.slots.loc[2, "status"] == "match"
    assert cmp.slots.loc[2, "tolerance"] == "bfloat16" and "bf16-representable" in cmp.slots.loc[2, "note"]
    assert cmp.slots.loc[1, "tolerance"] == "float32"
    assert not [f for f in d.findings if f.severity != "info"]


def noisy(t: torch.Tensor, rel: float = 0.01) -> torch.Tensor:
    """`t` with gaussian noise of relative size `rel` per token: beyond fp32 rounding, not bf16-representable."""
    g = torch.Generator().manual_seed(0)
    return t + rel * t.norm(dim=-1, keepdim=True) / t.shape[-1] ** 0.5 * torch.randn(t.shape, generator=g)


def test_fp32_damage_beyond_its_tolerance_is_named(ref):
    """One fp32 slot with noise beyond fp32 rounding (rel L2 ~1e-2, not bf16-representable): identified, flagged as
    reduced-precision damage."""
    x = [ref[n].clone() for n in TRAIN]
    x[2] = noisy(x[2])
    cmp, d = diagnose(ref, as_slots(x, TRAIN, input_ids=ref.input_ids))
    assert cmp.identified == TRAIN and cmp.slots.loc[2, "status"] == "dtype"
    f = [f for f in d.findings if f.kind == "dtype"]
    assert d.kinds == {"dtype"} and f[0].slot == 2


def test_scale_damage_is_named(ref):
    """A slot multiplied by a constant keeps its identity and gets a scale finding with the factor."""
    x = [ref[n].clone() for n in TRAIN]
    x[1] = x[1] * 3
    cmp, d = diagnose(ref, as_slots(x, TRAIN, input_ids=ref.input_ids))
    assert cmp.identified == TRAIN and cmp.slots.loc[1, "norm_ratio"] == pytest.approx(3, rel=1e-6)
    assert d.kinds == {"scale"} and "times 3" in d.summary


def test_unrelated_tensor_is_unidentified(ref):
    """Random noise in a slot matches nothing and says so."""
    x = [ref[n].clone() for n in TRAIN]
    x[3] = torch.randn(T, H)
    cmp, d = diagnose(ref, as_slots(x, TRAIN, input_ids=ref.input_ids))
    assert cmp.identified[3] is None and cmp.slots.loc[3, "status"] in ("weak", "none")
    assert d.kinds == {"unidentified"}


def test_mislabelled_dump_and_roundtrip(tmp_path, ref):
    """A dump whose manifest claims the training layout but holds the shifted one: identified, mislabel noted."""
    actual = ("embed", "layer_in.3", "layer_in.4", "layer_in.5")
    aux = torch.cat([ref[n] for n in actual], dim=-1)              # (T, 4H)
    dump = load_dump(save_dump(tmp_path / "d", [aux], [ref.input_ids], slots=TRAIN, hidden_size=H, source="engine"))
    cmp, d = diagnose(ref, dump[0])
    assert cmp.identified == actual and cmp.declared == TRAIN
    assert {f.kind for f in d.findings if f.severity == "info"} == {"mislabel"}
    assert d.kinds == {"shift"}


def test_token_count_mismatch_uses_common_prefix(ref):
    """Longer or diverging token ids: compared on the common prefix, and the notes say so."""
    longer = as_slots([torch.cat([ref[n], torch.randn(5, H)]) for n in TRAIN], TRAIN,
                      input_ids=torch.cat([ref.input_ids, torch.arange(5)]))
    cmp, d = diagnose(ref, longer)
    assert d.clean and "common prefix of 24" in cmp.notes[0] and (cmp.slots["n_tokens"] == T).all()
    ids = ref.input_ids.clone()
    ids[10] = (ids[10] + 1) % 100
    cmp = compare(as_slots([ref[n] for n in TRAIN], TRAIN, input_ids=ids), ref)
    assert "differ from row 10" in cmp.notes[0] and (cmp.slots["n_tokens"] == 10).all()
    late = as_slots([ref[n][1:] for n in TRAIN], TRAIN, input_ids=ref.input_ids[1:])   # dump starts at token 1
    cmp, d = diagnose(ref, late)
    assert d.clean and "t+1" in cmp.notes[0]
    with pytest.raises(DataError, match="no common prefix"):
        compare(as_slots([ref[n] for n in TRAIN], input_ids=(ref.input_ids + 7) % 100), ref)


def test_widths_and_nans_give_partial_comparison(ref):
    """A slot of the wrong width and NaN tokens are reported; the remaining slots and tokens are still compared."""
    x = [ref[n].clone() for n in TRAIN]
    x[1][[2, 7]] = float("nan")
    x[3] = torch.randn(T, 16)
    cmp, d = diagnose(ref, as_slots(x, input_ids=ref.input_ids))
    assert cmp.identified == ("embed", "layer_in.2", "layer_in.3", None)
    assert cmp.slots.loc[1, "n_tokens"] == T - 2 and cmp.slots.loc[1, "cos_mean"] == pytest.approx(1)
    assert cmp.slots.loc[3, "status"] == "width"
    assert {"nan", "width"} <= d.kinds
    assert any("2 of 24 tokens hold NaN" in n for n in cmp.notes)
    x = [ref[n].clone() for n in TRAIN]
    x[0][:] = float("inf")
    cmp = compare(as_slots(x, input_ids=ref.input_ids), ref)
    assert cmp.slots.loc[0, "status"] == "nan" and cmp.identified[1:] == TRAIN[1:]


def test_heatmap_and_plot(ref):
    """Slots x boundaries grid in stream order with each slot's best boundary at its maximum; a Figure."""
    cmp = compare(served(ref, TRAIN), ref)
    grid = cmp.heatmap()
    assert grid.shape == (4, len(ref.names)) and list(grid.columns) == ref.names
    assert [grid.loc[j].idxmax() for j in range(4)] == list(TRAIN)
    assert cmp.heatmap("rel_l2", shift=1).shape[0] == 4
    import matplotlib.pyplot as plt
    before = plt.get_fignums()
    fig = plot_similarity(cmp)
    assert isinstance(fig, matplotlib.figure.Figure) and fig.axes[0].get_title()
    assert plt.get_fignums() == before          # not left open in pyplot (a notebook would show it twice)


def test_similarity_numbers_and_tolerances():
    """Numbers, not booleans: exact values for a known pair; the loosest tolerance wins."""
    a = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    m = similarity(a * 2, a)
    assert m["cos_mean"] == pytest.approx(1) and m["norm_ratio"] == pytest.approx(2) and m["rel_l2"] == pytest.approx(1)
    assert m["log_norm_std"] == pytest.approx(0) and m["max_abs"] == pytest.approx(2)
    assert tolerance_for(torch.float32, torch.bfloat16) == TOLERANCES["bfloat16"]
    assert tolerance_for(torch.float64) == TOLERANCES["float32"]
    assert tolerance_for("float16", torch.float32) == TOLERANCES["float16"]


def test_training_side_damage_is_reported_as_warning(ref):
    """With two Comparisons, damage on the training side is a warning labelled 'training'."""
    x = [ref[n].clone() for n in TRAIN]
    x[0] = noisy(x[0])
    train = compare(as_slots(x, TRAIN, input_ids=ref.input_ids), ref)
    serve = compare(served(ref, TRAIN), ref)
    d = explain(train, serve)
    assert isinstance(train, Comparison) and d.kinds == {"dtype"}
    assert all(f.text.startswith("training") for f in d.findings if f.kind == "dtype")


def test_identify_fc_input_recovers_the_served_layout(ref):
    """From a draft's fc output alone, coordinate descent finds which boundaries (in which order) it was fed."""
    g = torch.Generator().manual_seed(5)
    W = torch.randn(H, 4 * H, generator=g) / 8
    for actual in [TRAIN, ("layer_in.2", "layer_in.3", "layer_in.5", "final_prenorm"),
                   ("layer_in.3", "embed", "layer_in.2", "layer_in.5")]:
        fc_out = torch.cat([ref[n] for n in actual], dim=-1) @ W.T      # (T, 4H) -> (T, H)
        got = identify_fc_input(fc_out, W, ref, starts=[TRAIN])
        assert got.layout == actual and got.rel_l2 < 1e-6
        chosen = got.per_slot[got.per_slot["chosen"]]
        others = got.per_slot[~got.per_slot["chosen"]]
        assert len(chosen) == 4 and others["rel_l2"].min() > 10 * got.rel_l2
    with pytest.raises(LayoutError, match="multiple of the target hidden size"):
        identify_fc_input(fc_out, torch.randn(H, 50), ref)


def test_training_data_of_a_since_changed_target_is_unidentified_not_a_crash(ids):
    """Regression (the target_drift neighbour): training slots captured from the target before a fine-tune, the
    reference and the serving dump from the changed target. The training side's later slots match nothing (None);
    explain names them unidentified instead of sorting None against names (TypeError)."""
    old, new = tiny_llama(True), tiny_llama(True)
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for name, p in new.named_parameters():
            if ".layers." in name and int(name.split(".layers.")[1].split(".")[0]) >= 1 and "norm" not in name:
                p.add_(2.0 * p.std() * torch.randn(p.shape, generator=g))
    ref_new = capture(new, ids)
    train = compare(served(capture(old, ids), TRAIN), ref_new)
    serve = compare(served(ref_new, TRAIN), ref_new)
    assert train.identified[0] == "embed" and None in train.identified and serve.identified == TRAIN
    d = explain(train, serve, num_layers=L)
    assert d.kinds == {"unidentified"}
    assert {f.slot for f in d.findings if f.kind == "unidentified"} == {j for j, x in enumerate(train.identified)
                                                                       if x is None}


@pytest.mark.parametrize("slots", [(), (torch.full((T, H), float("nan")),), (torch.randn(T, 5),)],
                         ids=["no slot", "all NaN", "other width"])
def test_every_slot_column_is_there_when_no_slot_was_compared(ref, slots):
    """A dump of no slot, of NaN, of another width: the slot table keeps every column (NaN numbers), not a KeyError
    in the notebooks' tables."""
    cmp = compare(Slots(slots, None, ref.input_ids, "planted"), ref)
    assert {"cos_mean", "rel_l2", "runner_up", "confidence", "best", "status"} <= set(cmp.slots.columns)
    assert len(cmp.slots) == len(slots) and cmp.identified == (None,) * len(slots)
    assert cmp.slots["cos_mean"].isna().all()

"""eagle3lib.samples.sample: the Sample type and the per-sample checks every reader runs (build_sample & helpers)."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from eagle3lib.errors import DataError
from eagle3lib.samples.sample import (Sample, SampleOptions, as_ids, build_sample, require_fields, split_concat,
                                      squeeze_batch)

T, K, H = 5, 3, 4
LAYOUT = ("embed", "layer_in.2", "layer_in.4")
W = "sample 's7' (f.jsonl:3)"


def opts(**kw) -> SampleOptions:
    base = dict(layout=None, info_layout=None, hidden_size=None, num_layers=None, max_len=None)
    return SampleOptions(**{**base, **kw})


def parts(T=T, k=K, h=H, final=True):
    ids = torch.arange(10, 10 + T)
    mask = torch.tensor([0, 1] + [1] * (T - 2))
    aux = torch.arange(T * k * h, dtype=torch.float32).reshape(T, k, h)
    fin = torch.arange(T * h, dtype=torch.float32).reshape(T, h) * -1 if final else None
    return ids, mask, aux, fin


def build(*, ids=None, mask=None, aux=None, final="default", layout=LAYOUT, o=None, **kw):
    i, m, a, f = parts()
    return build_sample("s7", "f.jsonl:3", i if ids is None else ids, m if mask is None else mask,
                        a if aux is None else aux, f if isinstance(final, str) else final, layout,
                        o or opts(), **kw)


# ---------------------------------------------------------------- Sample

def test_sample_properties_and_concat():
    ids, mask, aux, fin = parts()
    s = Sample("a", ids, mask, aux, LAYOUT, fin)
    assert (s.num_tokens, s.num_slots, s.hidden_size) == (T, K, H)
    assert s.final_boundary == "final_postnorm" and s.source == ""
    flat = s.aux_concat()
    assert flat.shape == (T, K * H)
    assert flat[1].tolist() == list(range(12, 24))                    # token 1: slot 0, then 1, then 2
    assert torch.equal(flat[:, H:2 * H], aux[:, 1])
    assert Sample("a", ids, mask, aux).final_boundary is None
    assert Sample("a", ids, mask, aux, final_hidden=fin, final_boundary="final_prenorm").final_boundary == \
        "final_prenorm"
    assert s != Sample("a", ids, mask, aux, LAYOUT, fin) and s == s   # eq=False: identity
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.id = "b"


# ---------------------------------------------------------------- build_sample

def test_build_sample_keeps_the_values():
    ids, mask, aux, fin = parts()
    s = build(final_boundary="final_prenorm")
    assert (s.id, s.source, s.layout, s.final_boundary) == ("s7", "f.jsonl:3", LAYOUT, "final_prenorm")
    assert torch.equal(s.input_ids, ids) and torch.equal(s.aux, aux) and torch.equal(s.final_hidden, fin)
    assert s.loss_mask.dtype == torch.long and s.loss_mask.tolist() == [0, 1, 1, 1, 1]
    assert build(mask=torch.tensor([False, True, True, False, False])).loss_mask.tolist() == [0, 1, 1, 0, 0]
    assert build(final=None, layout=None).final_boundary is None
    assert build(seq_len=T).num_tokens == T


def test_build_sample_truncates_to_max_len():
    s = build(o=opts(max_len=3))
    ids, mask, aux, fin = parts()
    assert s.input_ids.tolist() == [10, 11, 12] and s.loss_mask.tolist() == [0, 1, 1]
    assert torch.equal(s.aux, aux[:3]) and torch.equal(s.final_hidden, fin[:3])
    assert build(o=opts(max_len=10)).num_tokens == T
    with pytest.raises(DataError, match=r"sample 's7' \(f\.jsonl:3\): loss mask is all zero"):
        build(o=opts(max_len=1))                                      # the one kept position is unsupervised


@pytest.mark.parametrize("change, message", [
    (dict(mask=torch.ones(4, dtype=torch.long)), r"loss_mask length disagrees with input_ids \(expected 5, found 4\)"),
    (dict(aux=torch.zeros(6, K, H)), r"aux hidden states have the wrong number of tokens \(expected 5, found 6\)"),
    (dict(o=opts(hidden_size=8)), r"aux slots have the wrong hidden size \(expected 8, found 4\)"),
    (dict(layout=("embed", "layer_in.2")), r"aux slot count disagrees with the layout \(expected 2 slots "
                                          r"\['embed', 'layer_in\.2'\], found 3 slots of width 4\)"),
    (dict(final=torch.zeros(T, H + 1)), r"final hidden state has the wrong shape \(expected \[5, 4\], "
                                        r"found \[5, 5\]\)"),
    (dict(final=torch.zeros(T - 1, H)), r"final hidden state has the wrong shape \(expected \[5, 4\], "
                                        r"found \[4, 4\]\)"),
    (dict(seq_len=4), r"seq_len disagrees with input_ids \(expected seq_len == len\(input_ids\) == 5, found 4\)\. "
                      r"Likely cause: the index was written for other"),
    (dict(seq_len="5"), r"seq_len disagrees.*found '5'\)\. Likely cause: seq_len is not an integer"),
    (dict(mask=torch.zeros(T, dtype=torch.long)), r"loss mask is all zero \(expected at least one supervised "
                                                  r"position, found 5 positions, none with mask 1\)"),
])
def test_build_sample_errors_name_the_sample(change, message):
    with pytest.raises(DataError, match=r"^sample 's7' \(f\.jsonl:3\): " + message):
        build(**change)


def test_non_finite_values_are_counted():
    _, _, aux, fin = parts()
    aux = aux.clone()
    aux[1, 2, 0], aux[3, 0, 1] = float("nan"), float("inf")
    with pytest.raises(DataError, match=r"^sample 's7' \(f\.jsonl:3\): NaN/inf in the aux hidden states "
                                        r"\(expected finite values, found 2 non-finite\)"):
        build(aux=aux)
    bad = fin.clone()
    bad[0, 0] = float("-inf")
    with pytest.raises(DataError, match=r"NaN/inf in the final hidden state.*found 1 non-finite"):
        build(final=bad)
    big = torch.full((T, K, H), 65000.0, dtype=torch.float16)     # fp32 sum is finite; a fp16 sum would not be
    assert build(aux=big, final=None).aux.dtype == torch.float16
    huge = torch.full((T, K, H), 3e38)                            # the fp32 sum overflows; no value is bad
    assert torch.equal(build(aux=huge, final=None).aux, huge)


# ---------------------------------------------------------------- helpers

def test_split_concat():
    flat = torch.arange(2 * 6, dtype=torch.float32).reshape(2, 6)
    out = split_concat(flat, 2, None, W)
    assert out.shape == (2, 3, 2) and out[1, 2].tolist() == [10.0, 11.0]
    assert split_concat(flat, None, 2, W).shape == (2, 2, 3)        # Ht from the layout length
    assert torch.equal(split_concat(flat, 3, 6, W), flat.reshape(2, 2, 3))   # a known Ht wins over k
    with pytest.raises(DataError, match=r"^sample 's7' \(f\.jsonl:3\): aux width is not a multiple of the hidden "
                                        r"size \(expected k \* 4, found 6\)"):
        split_concat(flat, 4, None, W)
    with pytest.raises(DataError, match=r"cannot tell the hidden size of the aux slots.*found aux width 6"):
        split_concat(flat, None, 4, W)
    with pytest.raises(DataError, match=r"cannot tell the hidden size"):
        split_concat(flat, None, None, W)


def test_as_ids():
    assert as_ids([3, 1, 2], W, "input_ids").tolist() == [3, 1, 2]
    assert as_ids([3, 1], W, "input_ids").dtype == torch.long
    t = as_ids(torch.tensor([[4, 5]], dtype=torch.int32), W, "input_ids")
    assert t.dtype == torch.long and t.tolist() == [4, 5]
    assert as_ids([], W, "x").tolist() == []
    with pytest.raises(DataError, match=r"'input_ids' holds non-integers \(expected a list of ints, found "
                                        r"\[1, 2\.5\]\)"):
        as_ids([1, 2.5], W, "input_ids")
    with pytest.raises(DataError, match=r"'loss_mask' holds an integer too large for int64.*found "
                                        r"9223372036854775808"):
        as_ids([0, 2 ** 63], W, "loss_mask")
    with pytest.raises(DataError, match=r"'input_ids' has a non-integer dtype \(expected int64, found torch\.float32"):
        as_ids(torch.tensor([1.0, 2.0]), W, "input_ids")
    with pytest.raises(DataError, match=r"'input_ids' has the wrong number of dims \(expected 1, found \[2, 2\]\)"):
        as_ids(torch.zeros(2, 2, dtype=torch.long), W, "input_ids")


def test_squeeze_batch():
    x = torch.arange(6).reshape(1, 2, 3)
    assert torch.equal(squeeze_batch(x, W, "aux", 2), x[0])
    assert torch.equal(squeeze_batch(x[0], W, "aux", 2), x[0])
    assert squeeze_batch(x, W, "aux", 3).shape == (1, 2, 3)
    with pytest.raises(DataError, match=r"^sample 's7' \(f\.jsonl:3\): 'aux' has the wrong number of dims "
                                        r"\(expected 2, found \[2, 2, 3\]\)"):
        squeeze_batch(torch.zeros(2, 2, 3), W, "aux", 2)
    with pytest.raises(DataError, match=r"'aux' is not a tensor \(found list\)"):
        squeeze_batch([[1]], W, "aux", 2)


def test_require_fields():
    assert require_fields({"a": 1, "b": 2, "c": 3}, ("a", "b"), W) is None
    with pytest.raises(DataError, match=r"^sample 's7' \(f\.jsonl:3\): missing key\(s\) \['b', 'd'\] \(expected "
                                        r"\['a', 'b', 'd'\], found \['a', 'c'\]\)\. Likely cause: a file from "
                                        r"another tool"):
        require_fields({"c": 1, "a": 2}, ("a", "b", "d"), W)

"""Every writer's files, read back with open_dataset, give the written samples exactly (values, dtypes, layout)."""
from __future__ import annotations

import gzip
import json

import pytest
import torch
from safetensors import safe_open

from eagle3lib.errors import DataError
from eagle3lib.samples.readers import SEED_FORMAT, Sample, open_dataset
from eagle3lib.samples.writers import (specforge_sample_path, write_seed_dataset, write_specforge_sample,
                                       write_speculators_sample)

H, K = 4, 3
LAYOUT = ("embed", "layer_in.3", "layer_in.5")


def make(i: int, T: int = 5, k: int = K, layout=LAYOUT, final: bool = True, dtype=torch.float32,
         boundary: str | None = None) -> Sample:
    g = torch.Generator().manual_seed(100 + i)
    ids = torch.randint(0, 1000, (T,), generator=g)
    mask = (torch.arange(T) % 3 != 0).long()
    aux = torch.randn(T, k, H, generator=g).to(dtype)
    fin = torch.randn(T, H, generator=g).to(dtype) if final else None
    return Sample(f"s{i}", ids, mask, aux, layout, fin, final_boundary=boundary)


def assert_same(got: Sample, want: Sample, *, layout=None, final_boundary="same"):
    assert torch.equal(got.input_ids, want.input_ids) and got.input_ids.dtype == torch.long
    assert torch.equal(got.loss_mask, want.loss_mask) and got.loss_mask.dtype == torch.long
    assert got.aux.dtype == want.aux.dtype and torch.equal(got.aux, want.aux)
    if want.final_hidden is None:
        assert got.final_hidden is None
    else:
        assert got.final_hidden.dtype == want.final_hidden.dtype and torch.equal(got.final_hidden, want.final_hidden)
    assert got.layout == (want.layout if layout is None else layout)
    assert got.final_boundary == (want.final_boundary if final_boundary == "same" else final_boundary)


# ---------------------------------------------------------------- SpecForge

@pytest.mark.parametrize("idx, compress, group, want", [
    (0, False, 2000, "rows_0-2000/data_0.ckpt"),
    (1999, False, 2000, "rows_0-2000/data_1999.ckpt"),
    (2000, True, 2000, "rows_2000-4000/data_2000.ckpt.gz"),
    (1234, False, 500, "rows_1000-1500/data_1234.ckpt"),
    (7, True, 1, "rows_7-8/data_7.ckpt.gz"),
])
def test_specforge_sample_path(tmp_path, idx, compress, group, want):
    assert specforge_sample_path(tmp_path, idx, compress, group) == tmp_path / want
    assert specforge_sample_path(str(tmp_path), idx, compress, group) == tmp_path / want


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_specforge_round_trip(tmp_path, dtype):
    samples = [make(i, T=4 + i, dtype=dtype) for i in range(4)]
    root = tmp_path / "sf"
    paths = []
    for n, s in enumerate(samples):
        idx = n * 1500                                           # spans two row groups
        hidden = s.final_hidden if n % 2 else s.final_hidden[None]      # [T, Ht] and SpecForge's [1, T, Ht]
        paths.append(write_specforge_sample(specforge_sample_path(root, idx, compress=n >= 2), s.input_ids.tolist(),
                                            s.loss_mask.bool(), hidden, s.aux_concat(), compress=n >= 2))
    assert [p.relative_to(root).as_posix() for p in paths] == [
        "rows_0-2000/data_0.ckpt", "rows_0-2000/data_1500.ckpt", "rows_2000-4000/data_3000.ckpt.gz",
        "rows_4000-6000/data_4500.ckpt.gz"]
    ds = open_dataset(root, layout=LAYOUT)
    got = list(ds)
    assert ds.format == "specforge" and not ds.skipped
    assert [g.id for g in got] == ["data_0", "data_1500", "data_3000", "data_4500"]
    assert [g.source for g in got] == [str(p) for p in paths]
    for g, s in zip(got, samples):
        assert_same(g, s)
    assert [g.layout for g in open_dataset(root)] == [None] * 4     # SpecForge files carry no layout


def test_specforge_file_holds_specforge_keys_and_shapes(tmp_path):
    s = make(0)
    path = write_specforge_sample(tmp_path / "x" / "data_3.ckpt", s.input_ids, s.loss_mask, s.final_hidden,
                                  s.aux_concat(), compress=True)
    assert path == tmp_path / "x" / "data_3.ckpt.gz" and not (tmp_path / "x" / "data_3.ckpt").exists()
    with gzip.open(path, "rb") as f:
        d = torch.load(f, weights_only=True)
    assert {k: tuple(v.shape) for k, v in d.items()} == {"input_ids": (5,), "loss_mask": (5,),
                                                         "hidden_state": (1, 5, H), "aux_hidden_state": (1, 5, K * H)}
    assert d["input_ids"].dtype == d["loss_mask"].dtype == torch.long
    assert torch.equal(d["aux_hidden_state"][0], s.aux_concat())
    assert_same(open_dataset(path, layout=LAYOUT)[0], s)


# ---------------------------------------------------------------- seed

def test_seed_round_trip_with_one_layout(tmp_path):
    samples = [make(0), make(1, T=7, final=False), make(2, dtype=torch.bfloat16, boundary="final_prenorm")]
    index = write_seed_dataset(tmp_path / "seed", samples, info={"num_target_layers": 6, "note": "x"})
    assert index == tmp_path / "seed" / "train.jsonl"
    info = json.loads((tmp_path / "seed" / "dataset_info.json").read_text())
    assert info == {"num_target_layers": 6, "note": "x", "format": SEED_FORMAT, "layout": list(LAYOUT),
                    "target_hidden_size": H, "num_samples": 3}
    recs = [json.loads(line) for line in index.read_text().splitlines()]
    assert recs[1] == {"id": "s1", "input_ids": samples[1].input_ids.tolist(), "loss_mask": [0, 1, 1, 0, 1, 1, 0],
                       "seq_len": 7, "hidden_states": "hidden_states/s1.safetensors"}
    with safe_open(str(tmp_path / "seed" / "hidden_states" / "s2.safetensors"), "pt") as f:
        assert sorted(f.keys()) == ["aux.0", "aux.1", "aux.2", "final_hidden"]
        assert f.metadata() == {"format": SEED_FORMAT, "layout": ",".join(LAYOUT), "final_boundary": "final_prenorm"}
    ds = open_dataset(tmp_path / "seed")
    got = list(ds)
    assert ds.format == "seed" and ds.layout == LAYOUT and not ds.skipped
    assert [g.id for g in got] == ["s0", "s1", "s2"] and [g.source for g in got] == [f"{index}:{n}" for n in (1, 2, 3)]
    for g, s in zip(got, samples):
        assert_same(g, s)
    assert [ds[j].id for j in range(3)] == ["s0", "s1", "s2"]       # random access reads the same lines


def test_seed_round_trip_with_per_sample_layouts(tmp_path):
    """Different layouts stay per file; dataset_info then names none; a fixed layout overrides the samples'."""
    other = ("layer_in.1", "layer_in.2")
    samples = [make(0), make(1, k=2, layout=other), make(2, layout=None)]
    write_seed_dataset(tmp_path / "mixed", samples, index_name="part.jsonl")
    info = json.loads((tmp_path / "mixed" / "dataset_info.json").read_text())
    assert "layout" not in info and info["num_samples"] == 3
    got = list(open_dataset(tmp_path / "mixed" / "part.jsonl"))
    for g, s in zip(got, samples):
        assert_same(g, s)
    fixed = [make(0, layout=None), make(1, layout=("embed", "layer_in.1", "layer_in.2"))]
    write_seed_dataset(tmp_path / "fixed", fixed, layout="embed, out.2, layer_in.8", info={"num_target_layers": 8})
    want = ("embed", "layer_in.3", "final_prenorm")
    assert json.loads((tmp_path / "fixed" / "dataset_info.json").read_text())["layout"] == list(want)
    for g, s in zip(open_dataset(tmp_path / "fixed"), fixed):
        assert_same(g, s, layout=want)


def test_seed_writer_refuses_bad_samples(tmp_path):
    with pytest.raises(DataError, match=r"write_seed_dataset, sample 'a/b': sample id unusable as a file name"):
        write_seed_dataset(tmp_path / "a", [Sample("a/b", *_parts())])
    with pytest.raises(DataError, match=r"sample 's0': sample id unusable as a file name.*found a duplicate"):
        write_seed_dataset(tmp_path / "b", [make(0), make(0)])
    with pytest.raises(DataError, match=r"sample 's0': layout length disagrees with the aux slots \(expected 3, "
                                        r"found \['embed', 'layer_in\.1'\]\)"):
        write_seed_dataset(tmp_path / "c", [make(0)], layout="embed,layer_in.1")


def _parts():
    s = make(9)
    return s.input_ids, s.loss_mask, s.aux


# ---------------------------------------------------------------- speculators

def test_speculators_round_trip(tmp_path):
    samples = [make(i, k=K, boundary="final_prenorm", layout=LAYOUT if i else None) for i in range(3)]
    for n, s in enumerate(samples):
        hs = torch.cat([s.aux, s.final_hidden[:, None]], dim=1)      # (T, k, Ht) + (T, 1, Ht) -> (T, k+1, Ht)
        write_speculators_sample(tmp_path / "hs" / f"hs_{n * 10}.safetensors", s.input_ids, hs,
                                 loss_mask=s.loss_mask, layout="embed,layer_out.2,layer_in.5" if n else None)
    ds = open_dataset(tmp_path / "hs")
    got = list(ds)
    assert ds.format == "speculators" and [g.id for g in got] == ["hs_0", "hs_10", "hs_20"]
    for g, s in zip(got, samples):
        assert_same(g, s)
    assert got[0].layout is None and got[1].layout == LAYOUT


def test_speculators_without_loss_mask_supervises_every_token(tmp_path):
    s = make(0, k=2)
    path = write_speculators_sample(tmp_path / "hs_0.safetensors", s.input_ids.tolist(),
                                    torch.cat([s.aux, s.final_hidden[:, None]], dim=1))
    with safe_open(str(path), "pt") as f:
        assert sorted(f.keys()) == ["hidden_states", "token_ids"] and not f.metadata()
    g = open_dataset(path)[0]
    assert g.loss_mask.tolist() == [1] * 5 and torch.equal(g.aux, s.aux) and g.layout is None

"""Training-data readers and writers on tiny files of every format, written into tmp_path."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from eagle3lib.model import safefiles
from eagle3lib.samples.readers import Sample, open_dataset
from eagle3lib.samples.writers import (specforge_sample_path, write_seed_dataset, write_specforge_sample,
    write_speculators_sample)
from eagle3lib.errors import DataError, MissingFileError, UnsafeFileError

H, K = 4, 3
LAYOUT = ("layer_in.2", "layer_in.4", "layer_in.6")


def make_sample(i: int, T: int = 6, k: int = K, layout=LAYOUT, final: bool = True) -> Sample:
    g = torch.Generator().manual_seed(i)
    ids = torch.randint(0, 50, (T,), generator=g)
    mask = torch.tensor([0, 0] + [1] * (T - 2))
    aux = torch.randn(T, k, H, generator=g)
    fin = torch.randn(T, H, generator=g) if final else None
    return Sample(f"s{i:03d}", ids, mask, aux, layout, fin)


def specforge_dict(s: Sample) -> dict:
    """Exactly what SpecForge's prepare_hidden_states torch.saves: asdict(DataPoint)."""
    return {"input_ids": s.input_ids, "loss_mask": s.loss_mask,
            "hidden_state": s.final_hidden.to(torch.bfloat16)[None],
            "aux_hidden_state": s.aux_concat().to(torch.bfloat16)[None]}


def specforge_dir(tmp_path: Path, n: int, compress_every: int = 0) -> tuple[Path, list[Sample]]:
    root = tmp_path / "sf"
    samples = [make_sample(i) for i in range(n)]
    for i, s in enumerate(samples):
        compress = bool(compress_every) and i % compress_every == 0
        write_specforge_sample(specforge_sample_path(root, i * 700, compress), s.input_ids, s.loss_mask,
                               s.final_hidden, s.aux_concat(), compress=compress)
    return root, samples


def test_sample_helpers():
    """aux_concat puts slot 0 first, as the draft's fc expects; final_boundary defaults to post-norm."""
    s = make_sample(0)
    flat = s.aux_concat()
    assert flat.shape == (6, K * H) and s.num_tokens == 6 and s.num_slots == K and s.hidden_size == H
    assert torch.equal(flat[:, :H], s.aux[:, 0]) and torch.equal(flat[:, 2 * H:], s.aux[:, 2])
    assert s.final_boundary == "final_postnorm"
    assert make_sample(0, final=False).final_boundary is None


def test_specforge_plain_torch_save(tmp_path):
    """Files saved by plain torch.save(dict) like SpecForge are read in integer idx order, slots split by Ht."""
    samples = [make_sample(i) for i in range(3)]
    for idx, s in zip((10, 2, 2001), samples):
        p = tmp_path / "out" / f"rows_{idx // 2000 * 2000}-{idx // 2000 * 2000 + 2000}" / f"data_{idx}.ckpt"
        p.parent.mkdir(parents=True, exist_ok=True)
        torch.save(specforge_dict(s), p)
    ds = open_dataset(tmp_path / "out")
    assert ds.format == "specforge" and len(ds) == 3
    got = list(ds)
    assert [g.id for g in got] == ["data_2", "data_10", "data_2001"]
    by_id = dict(zip(["data_10", "data_2", "data_2001"], samples))
    for g in got:
        ref = by_id[g.id]
        assert g.aux.shape == (6, K, H) and g.layout is None and g.final_boundary == "final_postnorm"
        assert torch.equal(g.aux, ref.aux.to(torch.bfloat16)) and torch.equal(g.input_ids, ref.input_ids)
        assert torch.equal(g.final_hidden, ref.final_hidden.to(torch.bfloat16)) and g.source.endswith(".ckpt")
    assert open_dataset(tmp_path / "out", layout=LAYOUT)[0].layout == LAYOUT


def test_specforge_writer_and_gzip(tmp_path):
    """write_specforge_sample (plain and .ckpt.gz) round-trips and the writer's dict matches SpecForge's keys."""
    root, samples = specforge_dir(tmp_path, 4, compress_every=2)
    assert sorted(p.name for p in root.rglob("data_*")) == ["data_0.ckpt.gz", "data_1400.ckpt.gz", "data_2100.ckpt",
                                                            "data_700.ckpt"]
    with gzip.open(next(root.rglob("*.gz")), "rb") as f:
        raw = torch.load(f, weights_only=True)
    assert set(raw) == {"input_ids", "loss_mask", "hidden_state", "aux_hidden_state"}
    assert raw["hidden_state"].shape == (1, 6, H) and raw["aux_hidden_state"].shape == (1, 6, K * H)
    plain = torch.load(next(root.rglob("*.ckpt")), weights_only=True, mmap=True)  # SpecForge reads with mmap=True
    assert plain["input_ids"].dtype == torch.int64 and plain["loss_mask"].shape == (6,)
    got = list(open_dataset(root))
    assert [g.id for g in got] == ["data_0", "data_700", "data_1400", "data_2100"]
    for g, s in zip(got, samples):
        assert torch.equal(g.aux, s.aux) and torch.equal(g.loss_mask, s.loss_mask)


def test_seed_roundtrip(tmp_path):
    """write_seed_dataset -> open_dataset (dir or jsonl path) gives back tokens, slots, layout, final state."""
    samples = [make_sample(i) for i in range(3)]
    index = write_seed_dataset(tmp_path / "seed", iter(samples), layout=LAYOUT,
                               info={"num_target_layers": 8, "split": "train"})
    info = json.loads((tmp_path / "seed" / "dataset_info.json").read_text())
    assert info["layout"] == list(LAYOUT) and info["target_hidden_size"] == H and info["split"] == "train"
    first = json.loads(index.read_text().splitlines()[0])
    assert first["seq_len"] == 6 and first["hidden_states"] == "hidden_states/s000.safetensors"
    for path in (tmp_path / "seed", index):
        ds = open_dataset(path)
        assert ds.format == "seed" and len(ds) == 3 and ds.layout == LAYOUT
        got = list(ds)
        for g, s in zip(got, samples):
            assert g.id == s.id and g.layout == LAYOUT and torch.equal(g.aux, s.aux)
            assert torch.equal(g.final_hidden, s.final_hidden) and torch.equal(g.input_ids, s.input_ids)
        assert got[1].source == f"{index}:2"


def test_speculators_roundtrip(tmp_path):
    """hs_<i>.safetensors: the first k slots are aux, the last is the final pre-norm state; mask optional."""
    samples = [make_sample(i, k=4) for i in range(3)]
    for i, s in enumerate(samples):
        write_speculators_sample(tmp_path / "hs" / f"hs_{i * 5}.safetensors", s.input_ids, s.aux,
                                 loss_mask=s.loss_mask if i else None)
    ds = open_dataset(tmp_path / "hs")
    assert ds.format == "speculators" and any("loss_mask" in n for n in ds.notes)
    got = list(ds)
    assert [g.id for g in got] == ["hs_0", "hs_5", "hs_10"]
    for g, s in zip(got, samples):
        assert torch.equal(g.aux, s.aux[:, :3]) and torch.equal(g.final_hidden, s.aux[:, 3])
        assert g.final_boundary == "final_prenorm"
    assert got[0].loss_mask.tolist() == [1] * 6 and torch.equal(got[1].loss_mask, samples[1].loss_mask)


def test_modelopt_roundtrip(tmp_path):
    """ModelOpt <conversation_id>.pt dicts (hidden_states post-norm, aux concatenated) are read; vocab files ignored."""
    for i in range(2):
        s = make_sample(i)
        d = {"input_ids": s.input_ids, "hidden_states": s.final_hidden, "aux_hidden_states": s.aux_concat(),
             "conversation_id": f"conv{i}"}
        if i:
            d["loss_mask"] = s.loss_mask
        torch.save(d, tmp_path / f"{i}.pt")
    torch.save({"d2t": torch.zeros(3)}, tmp_path / "d2t.pt")
    ds = open_dataset(tmp_path)
    got = list(ds)
    assert ds.format == "modelopt" and [g.id for g in got] == ["conv0", "conv1"]
    assert torch.equal(got[1].aux, make_sample(1).aux) and got[0].loss_mask.sum() == 6


def test_layout_precedence(tmp_path):
    """Declared layout > per-file metadata > dataset_info.json > None."""
    write_seed_dataset(tmp_path / "a", [make_sample(0)], layout=LAYOUT, info={"layout": ["embed", "layer_in.1",
                                                                                          "layer_in.3"]})
    info_path = tmp_path / "a" / "dataset_info.json"
    info_path.write_text(json.dumps({"layout": ["embed", "layer_in.1", "layer_in.3"]}))
    assert open_dataset(tmp_path / "a")[0].layout == LAYOUT  # file metadata beats dataset_info
    declared = ("embed", "layer_in.4", "layer_in.5")
    assert open_dataset(tmp_path / "a", layout=",".join(declared))[0].layout == declared
    write_seed_dataset(tmp_path / "b", [make_sample(0, layout=None)])
    assert open_dataset(tmp_path / "b")[0].layout is None
    info_b = tmp_path / "b" / "dataset_info.json"
    info_b.write_text(json.dumps({"layout": "embed,layer_in.1,layer_in.3"}))
    assert open_dataset(tmp_path / "b")[0].layout == ("embed", "layer_in.1", "layer_in.3")


def test_lazy_sampling_opens_only_n_files(tmp_path, monkeypatch):
    """len() opens nothing and sample(N) opens exactly N files (SpecForge via torch.load, seed via safe_open)."""
    root, _ = specforge_dir(tmp_path, 12)
    write_seed_dataset(tmp_path / "seed", (make_sample(i) for i in range(12)), layout=LAYOUT)
    calls = {"load": 0, "open": 0}
    real_load, real_open = torch.load, safefiles.safe_open

    def counting_load(*a, **kw):
        calls["load"] += 1
        return real_load(*a, **kw)

    def counting_open(*a, **kw):
        calls["open"] += 1
        return real_open(*a, **kw)
    monkeypatch.setattr(torch, "load", counting_load)
    monkeypatch.setattr(safefiles, "safe_open", counting_open)
    sf, seed = open_dataset(root), open_dataset(tmp_path / "seed")
    assert len(sf) == 12 and len(seed) == 12 and calls == {"load": 0, "open": 0}
    assert len(list(sf.sample(3, seed=1))) == 3 and len(list(seed.sample(3, seed=1))) == 3
    assert calls == {"load": 3, "open": 3}
    next(iter(seed))
    assert calls["open"] == 4


def test_sample_reproducible_and_nested(tmp_path):
    """Same seed -> same samples whatever was iterated before; a smaller draw is a prefix of a larger one."""
    write_seed_dataset(tmp_path / "seed", (make_sample(i) for i in range(20)), layout=LAYOUT)
    ds = open_dataset(tmp_path / "seed")
    a = [s.id for s in ds.sample(5, seed=7)]
    list(ds)
    list(ds.sample(3, seed=99))
    b = [s.id for s in open_dataset(tmp_path / "seed").sample(5, seed=7)]
    assert a == b and len(set(a)) == 5
    assert [s.id for s in ds.sample(8, seed=7)][:5] == a
    assert [s.id for s in ds.sample(5, seed=8)] != a
    assert sorted(s.id for s in ds.sample(100, seed=1)) == [f"s{i:03d}" for i in range(20)]
    assert list(ds.sample(0, seed=1)) == []


@pytest.mark.parametrize("strided", [False, True])
def test_shards_cover_without_overlap(tmp_path, strided):
    """shard(r, W) for r < W are disjoint and together give every sample once (file and jsonl formats)."""
    root, _ = specforge_dir(tmp_path, 7)
    write_seed_dataset(tmp_path / "seed", (make_sample(i) for i in range(7)))
    for ds in (open_dataset(root), open_dataset(tmp_path / "seed")):
        parts = [[s.id for s in ds.shard(r, 3, strided=strided)] for r in range(3)]
        flat = [x for p in parts for x in p]
        assert sorted(flat) == sorted(s.id for s in ds) and len(set(flat)) == 7
        assert sum(len(ds.shard(r, 3, strided=strided)) for r in range(3)) == 7
    with pytest.raises(DataError, match="rank"):
        ds.shard(3, 3)


def _write_bad_seed(tmp_path: Path, case: str) -> Path:
    """A 3-sample seed dataset whose middle sample (s001, line 2) has the defect `case`."""
    d = tmp_path / case
    samples = [make_sample(i) for i in range(3)]
    if case == "nan":
        aux = samples[1].aux.clone()
        aux[2, 1, 0] = float("nan")
        samples[1] = Sample("s001", samples[1].input_ids, samples[1].loss_mask, aux, LAYOUT, samples[1].final_hidden)
    if case == "inf":
        fin = samples[1].final_hidden.clone()
        fin[0, 0] = float("inf")
        samples[1] = Sample("s001", samples[1].input_ids, samples[1].loss_mask, samples[1].aux, LAYOUT, fin)
    if case == "zero_mask":
        s = samples[1]
        samples[1] = Sample("s001", s.input_ids, torch.zeros_like(s.loss_mask), s.aux, LAYOUT, s.final_hidden)
    index = write_seed_dataset(d, samples, layout=LAYOUT)
    lines = index.read_text().splitlines()
    rec = json.loads(lines[1])
    if case == "seq_len":
        rec["seq_len"] = 99
    if case == "mask_len":
        rec["loss_mask"] = rec["loss_mask"][:-1]
    if case == "missing_file":
        (d / rec["hidden_states"]).unlink()
    if case == "too_many_slots":
        save_file({f"aux.{i}": torch.zeros(6, H) for i in range(4)}, str(d / rec["hidden_states"]),
                  metadata={"layout": ",".join(LAYOUT)})
    lines[1] = "{\"id\": \"s001\", \"input_ids\": [1, 2," if case == "broken_line" else json.dumps(rec)
    index.write_text("\n".join(lines) + "\n")
    return d


BAD_CASES = {  # case -> words the message must contain (besides the sample and its place)
    "seq_len": "seq_len disagrees", "mask_len": "loss_mask length", "nan": "NaN/inf in the aux",
    "inf": "NaN/inf in the final", "zero_mask": "all zero", "missing_file": "missing",
    "broken_line": "broken JSON", "too_many_slots": "slot count disagrees",
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_sample_skipped_or_raised(tmp_path, case):
    """A bad sample is skipped and recorded (default) or raised with a message naming it and its line."""
    d = _write_bad_seed(tmp_path, case)
    ds = open_dataset(d)
    assert [s.id for s in ds] == ["s000", "s002"]
    assert len(ds.skipped) == 1
    source, reason = ds.skipped[0]
    assert source.endswith("train.jsonl:2") and BAD_CASES[case] in reason
    if case != "broken_line":
        assert "s001" in reason
    assert "train.jsonl:2" in reason or case == "missing_file" and "s001.safetensors" in reason
    with pytest.raises((DataError, MissingFileError), match=BAD_CASES[case].replace("/", ".")):
        list(open_dataset(d, on_error="raise"))
    assert len(list(ds.sample(2, seed=0))) == 2  # a skipped draw is replaced by the next one


def test_specforge_width_and_layout_checks(tmp_path):
    """aux width not a multiple of Ht, declared hidden_size or layout length that disagree: clear DataErrors."""
    s = make_sample(0)
    d = specforge_dict(s)
    d["aux_hidden_state"] = d["aux_hidden_state"][..., :-1]  # width 11, Ht 4
    torch.save(d, tmp_path / "data_0.ckpt")
    with pytest.raises(DataError, match=r"data_0.*not a multiple of the hidden size.*k \* 4.*11"):
        open_dataset(tmp_path / "data_0.ckpt", on_error="raise")[0]
    torch.save(specforge_dict(s), tmp_path / "data_0.ckpt")
    with pytest.raises(DataError, match="slot count disagrees"):
        list(open_dataset(tmp_path, layout=("embed", "layer_in.2"), on_error="raise"))
    ds = open_dataset(tmp_path, hidden_size=5)
    assert list(ds) == [] and "not a multiple" in ds.skipped[0][1]
    ds = open_dataset(tmp_path, hidden_size=6)
    assert list(ds) == [] and "final hidden state has the wrong shape" in ds.skipped[0][1]


def test_pickle_with_code_is_refused_and_never_runs(tmp_path):
    """A .ckpt whose pickle would call open() raises UnsafeFileError and the call never happens."""
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))
    d = specforge_dict(make_sample(0))
    d["input_ids"] = Evil()
    torch.save(d, tmp_path / "data_0.ckpt")
    torch.save(specforge_dict(make_sample(1)), tmp_path / "data_1.ckpt")
    with pytest.raises(UnsafeFileError, match="refused"):
        list(open_dataset(tmp_path, on_error="raise"))
    ds = open_dataset(tmp_path)
    assert [s.id for s in ds] == ["data_1"] and "sample 'data_0'" in ds.skipped[0][1]
    assert not marker.exists()


def test_corrupt_files_name_the_file(tmp_path):
    """Truncated/zero-length safetensors and .ckpt, and a .ckpt.gz that is not gzip, give DataErrors naming the file."""
    write_speculators_sample(tmp_path / "hs" / "hs_0.safetensors", torch.arange(6), torch.randn(6, 4, H))
    good = (tmp_path / "hs" / "hs_0.safetensors").read_bytes()
    (tmp_path / "hs" / "hs_1.safetensors").write_bytes(good[:-20])
    (tmp_path / "hs" / "hs_2.safetensors").write_bytes(b"")
    ds = open_dataset(tmp_path / "hs")
    assert [s.id for s in ds] == ["hs_0"] and len(ds.skipped) == 2
    assert [Path(src).name for src, _ in ds.skipped] == ["hs_1.safetensors", "hs_2.safetensors"]
    assert all(r.startswith(f"sample '{Path(src).stem}'") and "unreadable file hs_" in r for src, r in ds.skipped)
    root, _ = specforge_dir(tmp_path, 2)
    first = sorted(root.rglob("*.ckpt"))[0]
    first.write_bytes(first.read_bytes()[:100])
    (root / "data_9.ckpt.gz").write_bytes(b"plain bytes")
    with pytest.raises(DataError, match="sample 'data_0'.*unreadable file data_0.ckpt"):
        list(open_dataset(root, on_error="raise"))
    ds = open_dataset(root)
    assert len(list(ds)) == 1
    assert "not a gzip file" in dict(ds.skipped)[str(root / "data_9.ckpt.gz")]


def test_dataset_level_errors(tmp_path):
    """A missing path, an empty directory or an unknown policy are refused at open time."""
    with pytest.raises(MissingFileError):
        open_dataset(tmp_path / "nope")
    with pytest.raises(DataError, match="no training data"):
        open_dataset(tmp_path)
    root = specforge_dir(tmp_path, 1)[0]
    with pytest.raises(DataError, match="policy"):
        open_dataset(root, on_error="ignore")
    with pytest.raises(DataError, match="unknown format"):
        open_dataset(root, format="arrow")
    with pytest.raises(DataError, match="no seed data"):
        open_dataset(root, format="seed")
    (root / "prompts.jsonl").write_text("{}\n")  # a stray index does not hide the declared format
    assert open_dataset(root, format="specforge").format == "specforge"


def test_max_len_truncates(tmp_path):
    """max_len cuts tokens, mask, aux and final state (as SpecForge does)."""
    write_seed_dataset(tmp_path / "s", [make_sample(0, T=10)], layout=LAYOUT)
    s = open_dataset(tmp_path / "s", max_len=4)[0]
    assert s.num_tokens == 4 and s.aux.shape == (4, K, H) and s.final_hidden.shape == (4, H)



def test_a_jsonl_line_is_read_once_per_case_whatever_the_options(tmp_path):
    """Two replays asking the same seed sample with other options (here max_len) inside one case: the index line and
    its hidden-state file are opened by the first only; each sample is shaped by its own options."""
    from eagle3lib import once, opened
    index = write_seed_dataset(tmp_path / "seed", [make_sample(i, T=8) for i in range(3)], layout=LAYOUT)
    with once.case_reads():
        full = open_dataset(index.parent, layout=LAYOUT)[1]
        with opened.counting() as opens:
            cut = open_dataset(index.parent, layout=LAYOUT, max_len=5)[1]
    assert not opens, dict(opens)
    assert (full.num_tokens, cut.num_tokens) == (8, 5) and torch.equal(cut.input_ids, full.input_ids[:5])

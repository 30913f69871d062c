"""Tests for eagle3lib.engine_kit.records: RunRecord validation, JSON-lines round trip, DataFrame view."""
import json
import math
from pathlib import Path

import numpy as np
import pytest

from eagle3lib.errors import DataError, MissingFileError
from eagle3lib.engine_kit.records import (FIELDS, RunRecord, from_dict, read_jsonl, to_dataframe, to_dict,
    unit_problems, write_jsonl)

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"


def _spec(**kw):
    base = dict(engine="demo", tok_s=12.5, accept_length=2.4, num_steps=3, topk=1, num_draft_tokens=4,
                batch_size=1, per_position=[0.7, 0.45, 0.25], drafted=300, accepted=140, rounds=100,
                series="correct capture", label="K=3")
    base.update(kw)
    return RunRecord(**base)


def test_round_trip_preserves_every_field(tmp_path):
    """write_jsonl then read_jsonl gives back equal records, per_position as a tuple."""
    recs = [_spec(), RunRecord(engine="sglang", tok_s=90.0, num_steps=0, notes="baseline")]
    path = write_jsonl(recs, tmp_path / "runs.jsonl")
    back = read_jsonl(path)
    assert back == recs
    assert back[0].per_position == (0.7, 0.45, 0.25)


def test_nan_and_inf_become_null_on_disk(tmp_path):
    """Non-finite floats are stored as JSON null and read back as None."""
    rec = _spec(tok_s=float("nan"), accept_rate=float("inf"))
    assert rec.tok_s is None and rec.accept_rate is None
    path = write_jsonl([rec], tmp_path / "r.jsonl")
    line = json.loads(path.read_text().splitlines()[0])
    assert line["tok_s"] is None and line["accept_rate"] is None
    assert "NaN" not in path.read_text()


def test_append_keeps_earlier_lines(tmp_path):
    """append=True adds lines after the existing ones."""
    p = tmp_path / "r.jsonl"
    write_jsonl([_spec(label="a")], p)
    write_jsonl([_spec(label="b")], p, append=True)
    assert [r.label for r in read_jsonl(p)] == ["a", "b"]


def test_numpy_numbers_are_accepted_and_bools_refused():
    """numpy ints/floats (as a sweep produces them) become Python numbers; a bool is not an int here."""
    rec = _spec(num_steps=np.int64(3), tok_s=np.float32(10.5))
    assert type(rec.num_steps) is int and rec.num_steps == 3
    assert isinstance(rec.tok_s, float) and math.isclose(rec.tok_s, 10.5)
    with pytest.raises(DataError, match="num_steps"):
        _spec(num_steps=True)
    with pytest.raises(DataError, match="batch_size"):
        _spec(batch_size=1.5)


@pytest.mark.parametrize("kw, match", [
    (dict(accept_length=0.6), "below 1"),
    (dict(accept_length=4.5, num_steps=3), "above num_steps"),
    (dict(per_position=[0.5, 1.7, 0.1]), r"\[0, 1\]"),
    (dict(engine=""), "engine"),
    (dict(tok_s_scope="per_gpu"), "tok_s_scope"),
    (dict(tok_s=-3.0), ">= 0"),
])
def test_bad_values_are_refused_with_a_reason(kw, match):
    """Impossible values raise DataError saying what is wrong."""
    with pytest.raises(DataError, match=match):
        _spec(**kw)


def test_from_dict_refuses_unknown_and_missing_fields():
    """Unknown keys and a missing engine are named in the error."""
    d = to_dict(_spec())
    with pytest.raises(DataError, match="bogus"):
        from_dict({**d, "bogus": 1})
    d.pop("engine")
    with pytest.raises(DataError, match="engine"):
        from_dict(d)


def test_read_jsonl_errors_name_the_line(tmp_path):
    """A truncated JSON line is reported with file:line; a missing file is MissingFileError."""
    p = tmp_path / "r.jsonl"
    p.write_text(json.dumps(to_dict(_spec())) + "\n" + '{"engine": "demo", "tok_s"\n')
    with pytest.raises(DataError, match=r"r\.jsonl:2"):
        read_jsonl(p)
    with pytest.raises(MissingFileError):
        read_jsonl(tmp_path / "none.jsonl")


def test_dataframe_view_has_fields_and_derived_columns():
    """One row per record, every field a column, nullable ints, draft_rate = (tau-1)/K."""
    df = to_dataframe([_spec(), RunRecord(engine="demo", tok_s=20.0, num_steps=0)])
    assert list(df.columns[:len(FIELDS)]) == list(FIELDS)
    assert str(df["topk"].dtype) == "Int64" and df["topk"].isna().tolist() == [False, True]
    assert df["draft_rate"][0] == pytest.approx(1.4 / 3)
    assert df["speculative"].tolist() == [True, False]


def test_unit_problems_flags_mixed_scopes():
    """Per-request speeds next to aggregate throughput are reported, a uniform set is not."""
    assert unit_problems([_spec(), _spec(label="x")]) == []
    msgs = unit_problems([_spec(), _spec(tok_s_scope="per_request", label="bench_speculative")])
    assert len(msgs) == 1 and "bench_speculative" in msgs[0]


def test_shipped_seed_runs_carry_the_seed_numbers():
    """data/samples/seed_runs.jsonl holds the seed's four runs in order with the story's numbers."""
    recs = read_jsonl(SAMPLES / "seed_runs.jsonl")
    assert [r.tok_s for r in recs] == [90.0, 56.8, 46.7, 54.8]
    assert [r.accept_length for r in recs] == [None, 1.6, 1.9, None]
    assert [(r.num_steps, r.num_draft_tokens) for r in recs] == [(0, None), (1, 2), (15, 16), (15, 16)]
    assert all(r.source.startswith("seed story") for r in recs)

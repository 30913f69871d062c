"""once: inside case_reads every dataset's file list, info and index and each sample are read from disk once;
outside it every read goes to the disk; a sample past the budget is let go; an error is raised each time."""
from __future__ import annotations

from collections import Counter

import pytest
import torch

from eagle3lib.errors import DataError
from eagle3lib import once
from eagle3lib.samples import readers
from eagle3lib.samples.readers import open_dataset
from eagle3lib.samples.writers import write_seed_dataset
from tests.samples.test_readers import LAYOUT, make_sample


@pytest.fixture
def seed(tmp_path):
    write_seed_dataset(tmp_path / "seed", iter([make_sample(i) for i in range(4)]), layout=LAYOUT,
                       info={"num_target_layers": 8})
    return tmp_path / "seed"


@pytest.fixture
def disk(monkeypatch):
    """{what was read from disk: times}: sample lines, dataset_info.json and index builds."""
    reads: Counter = Counter()
    line, info, build = readers._load_seed_line, readers._read_info, readers._SeedIndex._index_lines

    def counted_line(jsonl, lineno, text, opts):
        reads[("line", lineno)] += 1
        return line(jsonl, lineno, text, opts)

    def counted_info(root):
        reads["info"] += 1
        return info(root)

    def counted_build(self):
        reads["index"] += self._offsets is None         # asked at every line; built at the first
        return build(self)
    monkeypatch.setattr(readers, "_load_seed_line", counted_line)
    monkeypatch.setattr(readers, "_read_info", counted_info)
    monkeypatch.setattr(readers._SeedIndex, "_index_lines", counted_build)
    return reads


def read_twice(seed):
    """Two openings and three passes over the same data, as several replays and checks of one case do."""
    a, b = open_dataset(seed), open_dataset(seed)
    return list(a.sample(4, seed=0)) + list(b.sample(2, seed=1)) + list(b)


def test_inside_a_case_each_sample_is_read_once(seed, disk):
    with once.case_reads() as reads:
        got = read_twice(seed)
    assert len(got) == 10 and disk["info"] == 1 and disk["index"] == 1
    assert {k: n for k, n in disk.items() if k[0] == "line"} == {("line", i): 1 for i in range(1, 5)}
    assert set(reads.loads.values()) == {1}              # each read from disk once: samples, list, info, index,
    assert sum(isinstance(k[1], int) for k in reads.loads) == 4          # and each sample file's header
    again = [s for s in got if s.id == "s000"]
    assert len(again) >= 2 and all(s is again[0] for s in again)       # one object, shared


def test_outside_a_case_every_read_goes_to_the_disk(seed, disk):
    read_twice(seed)
    assert disk["info"] == 2 and sum(n for k, n in disk.items() if k[0] == "line") == 10
    assert once.active() is None


def test_a_sample_past_the_budget_is_read_again(seed, disk):
    size = once.sample_bytes(make_sample(0))
    with once.case_reads(budget_gb=1.5 * size / 2 ** 30):            # room for one sample
        ds = open_dataset(seed)
        ds[0], ds[1], ds[0]
    assert disk[("line", 1)] == 2 and disk[("line", 2)] == 1


def test_an_unreadable_sample_is_raised_each_time_and_never_kept(seed, disk):
    (seed / "hidden_states" / "s001.safetensors").write_bytes(b"broken")
    with once.case_reads() as reads:
        ds = open_dataset(seed, on_error="raise")
        for _ in range(2):
            with pytest.raises(DataError):
                ds[1]
        assert torch.equal(ds[0].aux, make_sample(0).aux)
    kept = [k[1] for k in reads.loads if isinstance(k[1], int)]           # samples: (file, index, options)
    assert disk[("line", 2)] == 2 and kept == [0]


def test_a_case_inside_a_case_shares_the_outer_one():
    with once.case_reads() as outer:
        with once.case_reads() as inner:
            assert inner is outer
        assert once.active() is outer
    assert once.active() is None


def test_a_config_is_parsed_once_per_case_and_each_caller_gets_its_own_copy(tmp_path, monkeypatch):
    import json
    from eagle3lib.model import config
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 8}))
    parsed = []
    real = config._parsed
    monkeypatch.setattr(config, "_parsed", lambda f: parsed.append(f) or real(f))
    with once.case_reads():
        a, _ = config.read_config_json(tmp_path)
        a["hidden_size"] = 99                                  # a caller changing its dict changes no one else's
        b, _ = config.read_config_json(tmp_path / "config.json")
    assert len(parsed) == 1 and b["hidden_size"] == 8
    config.read_config_json(tmp_path), config.read_config_json(tmp_path)
    assert len(parsed) == 3                                   # outside a case: every time


def test_a_text_file_is_read_once_per_case_and_again_once_rewritten(tmp_path):
    from eagle3lib import opened
    log = tmp_path / "server.log"
    log.write_bytes(b"a\r\nb\xff\n")
    with opened.counting() as opens, once.case_reads():
        first = once.file_text(log)
        assert once.file_text(log) == first == "a\r\nb\ufffd\n"       # bytes as they are, undecodable ones replaced
        log.write_text("rewritten, longer\n")
        assert once.file_text(log) == "rewritten, longer\n"          # its size changed: read again
    assert opens[str(log)] == 2 + 1                                 # two reads in the case, one write
    with opened.counting() as opens:
        once.file_text(log), once.file_text(log)
    assert opens[str(log)] == 2                                     # outside a case: every time


def test_a_large_text_file_is_not_kept(tmp_path, monkeypatch):
    from eagle3lib import opened
    log = tmp_path / "big.log"
    log.write_text("x" * 64)
    monkeypatch.setattr(once, "TEXT_KEPT_BYTES", 32)
    with opened.counting() as opens, once.case_reads():
        once.file_text(log), once.file_text(log)
    assert opens[str(log)] == 2


def test_what_a_reader_parsed_of_a_file_is_kept_per_options(tmp_path):
    f = tmp_path / "x.json"
    f.write_text("{}")
    calls = Counter()

    def parse(option):
        calls[option] += 1
        return {"option": option}
    with once.case_reads():
        a = once.kept_by_file("kind", f, lambda: parse(1), 1, copied=True)
        a["option"] = 99                                            # copied: a caller's change is its own
        b = once.kept_by_file("kind", f, lambda: parse(1), 1, copied=True)
        once.kept_by_file("kind", f, lambda: parse(2), 2)
    assert b == {"option": 1} and calls == Counter({1: 1, 2: 1})

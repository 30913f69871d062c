"""engine_kit.prompts: prompts files, a dataset's user turns, and the file write_prompts leaves."""
from __future__ import annotations

import json

import pytest
import torch

from eagle3lib.engine_kit.prompts import is_prompts_file, read_prompts, write_prompts
from eagle3lib.errors import DataError, MissingFileError
from eagle3lib.samples.sample import Sample
from eagle3lib.samples.writers import write_seed_dataset


@pytest.fixture
def dataset(tmp_path):
    """A 3-sample seed-format dataset: the first scored token sits at index 4, 2 and 0 (the last gives no prompt)."""
    samples = []
    for i, first in enumerate((4, 2, 0)):
        ids = torch.arange(10, 17) + i
        mask = (torch.arange(7) >= first).long()
        samples.append(Sample(f"s{i}", ids, mask, torch.randn(7, 2, 8)))
    return write_seed_dataset(tmp_path / "data", samples, info={"target_hidden_size": 8})


def test_dataset_prompt_is_the_user_turn(dataset):
    """The prompt is every token before the first scored one; a sample scored from the start is left out."""
    ps = read_prompts(dataset)
    assert [(p.id, p.token_ids) for p in ps] == [("s0", (10, 11, 12, 13)), ("s1", (11, 12))]
    assert len(read_prompts(dataset, n=1)) == 1


def test_write_prompts_round_trips(dataset, tmp_path):
    """write_prompts writes {"id", "prompt_token_ids"} lines that read back as the same prompts."""
    out = write_prompts(dataset, tmp_path / "p" / "prompts.jsonl")
    assert is_prompts_file(out) and not is_prompts_file(dataset)
    assert json.loads(out.read_text().splitlines()[0]) == {"id": "s0", "prompt_token_ids": [10, 11, 12, 13]}
    assert read_prompts(out) == read_prompts(dataset)


def test_text_prompts_lists_and_bad_lines(tmp_path):
    """Text prompts and in-memory lists are accepted; a bad line names its file and line."""
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "hello"}\n\n{"prompt_token_ids": [1, 2]}\n')
    assert [(p.text, p.token_ids) for p in read_prompts(f)] == [("hello", None), (None, (1, 2))]
    assert read_prompts([[5, 6], "hi"])[0].token_ids == (5, 6)
    f.write_text('{"prompt_token_ids": [1, -2]}\n')
    with pytest.raises(DataError, match="p.jsonl:1"):
        read_prompts(f)
    with pytest.raises(MissingFileError):
        read_prompts(tmp_path / "nothing.jsonl")

"""Safe readers: safetensors header validation, sharded indexes, weights_only torch files."""
from __future__ import annotations

import gzip
import json
import struct

import pytest
import torch
from safetensors.torch import save_file

from eagle3lib.errors import CheckpointError, MissingFileError, UnsafeFileError
from eagle3lib.model.safefiles import (load_safetensors, load_state_dict, load_torch_file, read_safetensors_header,
    safetensors_metadata, weight_files)


def _write_raw(path, header: dict, payload: bytes):
    h = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + payload)


def test_header_round_trip_and_metadata(tmp_path):
    """A valid file: header entries, metadata and tensors read back."""
    f = tmp_path / "a.safetensors"
    save_file({"x": torch.arange(6.).view(2, 3)}, str(f), metadata={"layout": "embed"})
    h = read_safetensors_header(f)
    assert h["x"]["shape"] == [2, 3] and safetensors_metadata(f) == {"layout": "embed"}
    assert torch.equal(load_safetensors(f)["x"], torch.arange(6.).view(2, 3))


@pytest.mark.parametrize("header,payload,match", [
    ({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8, "runs past the end"),
    ({"x": {"dtype": "Q9", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4, "unknown dtype"),
    ({"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8, "does not match shape"),
    ({"x": {"dtype": "F32"}}, b"", "malformed header entry"),
])
def test_bad_headers_name_file_and_tensor(tmp_path, header, payload, match):
    """Each header fault names the file and the tensor, with expected and found."""
    f = tmp_path / "bad.safetensors"
    _write_raw(f, header, payload)
    with pytest.raises(CheckpointError, match=match) as e:
        read_safetensors_header(f)
    assert "bad.safetensors" in str(e.value)


def test_header_length_beyond_file(tmp_path):
    """A header that claims more bytes than the file has is a truncation."""
    f = tmp_path / "t.safetensors"
    f.write_bytes(struct.pack("<Q", 10_000) + b"{}")
    with pytest.raises(CheckpointError, match="header length exceeds the file.*truncated"):
        read_safetensors_header(f)


def test_torch_file_weights_only_and_gzip(tmp_path):
    """Plain tensor dicts load (also gzipped); a non-gzip .gz is named as such."""
    f = tmp_path / "d.ckpt"
    torch.save({"input_ids": torch.arange(3)}, f)
    assert torch.equal(load_torch_file(f)["input_ids"], torch.arange(3))
    g = tmp_path / "d.ckpt.gz"
    g.write_bytes(gzip.compress(f.read_bytes()))
    assert torch.equal(load_torch_file(g)["input_ids"], torch.arange(3))
    bad = tmp_path / "e.ckpt.gz"
    bad.write_bytes(f.read_bytes())
    with pytest.raises(CheckpointError, match="not a gzip file"):
        load_torch_file(bad)


class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_code_carrying_pickle_refused(tmp_path):
    """A pickle whose loading would create a file is refused; the file is never created."""
    marker = tmp_path / "ran"
    f = tmp_path / "x.pt"
    torch.save({"a": _Payload(marker)}, f)
    with pytest.raises(UnsafeFileError, match="x.pt"):
        load_torch_file(f)
    assert not marker.exists()


def test_weight_file_discovery_and_sharded_subset(tmp_path):
    """Shard index wins; asking for one key reads only the shard that holds it."""
    save_file({"a": torch.ones(2)}, str(tmp_path / "s1.safetensors"))
    save_file({"b": torch.zeros(2)}, str(tmp_path / "s2.safetensors"))
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}}))
    assert [p.name for p in weight_files(tmp_path)] == ["s1.safetensors", "s2.safetensors"]
    (tmp_path / "s2.safetensors").write_bytes(b"garbage that would fail if read")
    assert set(load_state_dict(tmp_path, keys=["a"])) == {"a"}
    from eagle3lib import opened
    from eagle3lib.once import case_reads
    with opened.counting() as opens, case_reads():       # one parse of the index per case, however many readers
        weight_files(tmp_path), load_state_dict(tmp_path, keys=["a"]), weight_files(tmp_path)
    assert opens[str((tmp_path / "model.safetensors.index.json").resolve())] == 1
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(MissingFileError, match="no weights"):
        weight_files(empty)


def test_garbage_is_corrupt_not_unsafe(tmp_path):
    """Random bytes are reported as a corrupt file, not as a refused pickle; the refusal names the global."""
    f = tmp_path / "g.pt"
    f.write_bytes(b"\x80\x02garbage-not-a-pickle" * 3)
    with pytest.raises(CheckpointError) as e:
        load_torch_file(f)
    assert not isinstance(e.value, UnsafeFileError)
    evil = tmp_path / "e.pt"
    torch.save({"a": _Payload(tmp_path / "m")}, evil)
    with pytest.raises(UnsafeFileError, match="GLOBAL") as e2:
        load_torch_file(evil)
    assert "\x1b[" not in str(e2.value)

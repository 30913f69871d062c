"""Bad-input corpus, part 1: the case table machinery, the docs table, and weight files (safetensors, torch, index).

Every case writes its own input under tmp_path, makes one call, and checks one outcome: a documented eagle3lib
error whose message names the file/key/line, the expected and the found value; or (per-sample problems) the
bad item skipped and counted while the rest comes through; or a warning. The other areas live in
``test_bad_inputs_<area>.py``; ``docs/bad-inputs.md`` is generated from all tables (see ``test_docs_table_in_sync``).
Regenerate the docs with ``.venv/bin/python -m tests.test_bad_inputs``.
"""
from __future__ import annotations

import gzip
import importlib
import json
import os
import pickle
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import torch
from safetensors.torch import save_file

from eagle3lib.model import safefiles
from eagle3lib.errors import ALL_ERRORS, CheckpointError, MissingFileError, UnsafeFileError, VocabError

AREAS = ("tests.test_bad_inputs", "tests.test_bad_inputs_config", "tests.test_bad_inputs_data",
         "tests.test_bad_inputs_serving")
DOCS = Path(__file__).resolve().parent.parent / "docs" / "bad-inputs.md"


# ---------------------------------------------------------------- the case table

@dataclass(frozen=True)
class Skipped:
    """Per-item problem: the call returns (items kept, reasons of the skipped); both counts must match."""
    kept: int
    skipped: int


@dataclass(frozen=True)
class Warned:
    """Accepted with a warning: the call returns the warnings (at least one must name the problem)."""


@dataclass(frozen=True)
class Case:
    """One bad input: build it under tmp_path, call the reader, expect an error class (or Skipped / Warned)."""
    id: str
    module: str                                  # the eagle3lib module whose reader is called
    build: Callable[[Path], dict]                # writes the input; returns names used by `call` and `says`
    call: Callable[[dict], object]
    expect: type | Skipped | Warned
    says: tuple[str, ...]                        # substrings of the message; "{name}" filled from build()'s dict
    after: Callable[[dict], None] | None = None  # extra check once the call is done (e.g. a payload did not run)


def run_case(case: Case, tmp_path: Path) -> str:
    """Build, call, check the outcome and the message; returns the message that was checked."""
    ctx = dict(case.build(tmp_path) or {})
    ctx.setdefault("tmp", str(tmp_path))
    if isinstance(case.expect, type):
        with pytest.raises(Exception) as info:
            case.call(ctx)
        err = info.value
        assert type(err) in ALL_ERRORS, f"{case.id}: undocumented {type(err).__name__}: {err}"
        assert type(err) is case.expect, f"{case.id}: {type(err).__name__} instead of {case.expect.__name__}: {err}"
        if not isinstance(err, VocabError):   # vocab findings state both values in their sentence (see says)
            assert err.expected is not None and err.found is not None, f"{case.id}: no expected/found: {err}"
        message = str(err)
    elif isinstance(case.expect, Skipped):
        kept, reasons = case.call(ctx)
        reasons = list(reasons)
        assert (kept, len(reasons)) == (case.expect.kept, case.expect.skipped), f"{case.id}: {kept} kept, {reasons}"
        message = "\n".join(map(str, reasons))
    else:
        warnings = list(case.call(ctx))
        assert warnings, f"{case.id}: accepted without a warning"
        message = "\n".join(map(str, warnings))
    for s in case.says:
        assert s.format(**ctx) in message, f"{case.id}: {s.format(**ctx)!r} not in message:\n{message}"
    if case.after is not None:
        case.after(ctx)
    return message


def ids(cases) -> list[str]:
    """Case ids for pytest parametrization."""
    return [c.id for c in cases]


def pending(cases, reasons: dict[str, str]) -> list:
    """Cases as pytest params; those in `reasons` (failing in a module still being written) as strict xfails."""
    return [pytest.param(c, marks=pytest.mark.xfail(strict=True, reason=reasons[c.id])) if c.id in reasons else c
            for c in cases]


def all_cases() -> list[Case]:
    """Every case of every area file, in docs order."""
    return [c for name in AREAS for c in importlib.import_module(name).CASES]


def docs_table() -> str:
    """docs/bad-inputs.md, generated from the case tables."""
    def outcome(e):
        if isinstance(e, Skipped):
            return f"skipped and counted ({e.kept} kept, {e.skipped} skipped)"
        return "accepted with a warning" if isinstance(e, Warned) else f"`{e.__name__}`"

    def names(says):
        def show(s):
            s = s.replace("{{", "\0").replace("}}", "\1").replace("{", "<").replace("}", ">")
            return "`" + s.replace("\0", "{").replace("\1", "}").replace("|", "\\|").replace("`", "'") + "`"
        return ", ".join(show(s) for s in says)

    cases = all_cases()
    pending = {k: v for name in AREAS for k, v in getattr(importlib.import_module(name), "PENDING", {}).items()}
    lines = ["# Bad inputs eagle3lib explains", "",
             f"{len(cases)} cases, each written by the tests into a temporary directory and checked by "
             "`tests/test_bad_inputs*.py` (this file is generated from those tables: "
             "`.venv/bin/python -m tests.test_bad_inputs`). An error is always one of `eagle3lib.errors.ALL_ERRORS`; "
             "its message names where (file, key, line or setting), what was expected and what was found. "
             "Per-sample and per-line problems skip the bad item, count it, and go on. `<path>`, `<name>` and "
             "similar stand for the file the case wrote. A case marked *pending* fails today in a module that is "
             "still being written (the test is an expected failure until it passes).", "",
             "| case | module | outcome | the message names |", "|---|---|---|---|"]
    lines += [f"| {c.id} | `{c.module}` | {outcome(c.expect)}"
              f"{f' (*pending*: {pending[c.id]})' if c.id in pending else ''} | {names(c.says)} |" for c in cases]
    return "\n".join(lines) + "\n" + importlib.import_module("tests.test_bad_inputs_given").docs_section()


# ---------------------------------------------------------------- builders shared by the area files

class Payload:
    """A pickled object that would create `marker` when unpickled without restriction (a stand-in for any code)."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return os.mkdir, (self.marker,)


def payload_not_run(ctx: dict) -> None:
    """The hostile pickle's side effect did not happen."""
    assert not Path(ctx["marker"]).exists(), "the pickled payload ran"


def write_hostile(path: Path, marker: Path, compress: bool = False) -> Path:
    """torch.save a dict holding a Payload (optionally gzip-compressed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    obj = {"input_ids": torch.arange(4), "x": Payload(marker)}
    if compress:
        with gzip.open(path, "wb") as f:
            torch.save(obj, f)
    else:
        torch.save(obj, path)
    return path


def write_raw_safetensors(path: Path, header, data: bytes = b"", length: int | None = None) -> Path:
    """A safetensors file from a raw header (dict -> JSON, or bytes) and data, with an optional fake length."""
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw) if length is None else length) + raw + data)
    return path


def _st(header, data=b"", length=None, name="model.safetensors"):
    """Builder: a raw safetensors file; ctx has path and name."""
    def build(tmp: Path) -> dict:
        p = write_raw_safetensors(tmp / name, header, data, length)
        return {"path": str(p), "name": p.name}
    return build


def _bytes(name: str, data: bytes):
    """Builder: a file holding `data`."""
    def build(tmp: Path) -> dict:
        p = tmp / name
        p.write_bytes(data)
        return {"path": str(p), "name": name}
    return build


def _truncated_safetensors(tmp: Path) -> dict:
    p = tmp / "model.safetensors"
    save_file({"w": torch.ones(4, 4)}, str(p))
    p.write_bytes(p.read_bytes()[:-10])   # 64 data bytes -> 54
    return {"path": str(p)}


def _truncated_pt(tmp: Path) -> dict:
    p = tmp / "pytorch_model.bin"
    torch.save({"w": torch.ones(64, 64)}, p)
    p.write_bytes(p.read_bytes()[:600])
    return {"path": str(p)}


def _plain_ckpt_named_gz(tmp: Path) -> dict:
    p = tmp / "data_0.ckpt.gz"
    torch.save({"input_ids": torch.arange(4)}, p)
    return {"path": str(p)}


def _hostile(name: str, compress: bool = False):
    def build(tmp: Path) -> dict:
        marker = tmp / "payload_ran"
        return {"path": str(write_hostile(tmp / name, marker, compress)), "marker": str(marker)}
    return build


def _pt_with(obj):
    def build(tmp: Path) -> dict:
        p = tmp / "pytorch_model.bin"
        torch.save(obj, p)
        return {"path": str(p)}
    return build


def _index(weight_map, shards=()):
    """Builder: a sharded checkpoint dir with model.safetensors.index.json; `shards` are written for real."""
    def build(tmp: Path) -> dict:
        for s in shards:
            save_file({"w": torch.ones(2)}, str(tmp / s))
        idx = tmp / "model.safetensors.index.json"
        idx.write_text(weight_map if isinstance(weight_map, str) else json.dumps({"weight_map": weight_map}))
        return {"path": str(idx), "dir": str(tmp)}
    return build


_F32x4 = {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}
header = safefiles.read_safetensors_header

CASES = [
    Case("safetensors_zero_length", "safefiles", _bytes("model.safetensors", b""), lambda c: header(c["path"]),
         CheckpointError, ("{path}", "too short", ">= 8 bytes", "found 0 bytes")),
    Case("safetensors_shorter_than_length_field", "safefiles", _bytes("model.safetensors", b"\x10\x00\x00"),
         lambda c: header(c["path"]), CheckpointError, ("{path}", ">= 8 bytes", "found 3 bytes")),
    Case("safetensors_header_claims_more_bytes", "safefiles", _st({"w": _F32x4}, b"\0" * 16, length=10_000),
         lambda c: header(c["path"]), CheckpointError,
         ("{path}", "header length exceeds the file", "expected <=", "found 10000 bytes")),
    Case("safetensors_header_not_json", "safefiles", _st(b"\x89PNG\r\n\x1a\n"), lambda c: header(c["path"]),
         CheckpointError, ("{path}", "header is not JSON", "expected a JSON header", "PNG")),
    Case("safetensors_header_json_array", "safefiles", _st([1, 2, 3]), lambda c: header(c["path"]),
         CheckpointError, ("{path}", "not a JSON object", "found list")),
    Case("safetensors_truncated_data", "safefiles", _truncated_safetensors,
         lambda c: safefiles.load_safetensors(c["path"]), CheckpointError,
         ("{path}", "tensor 'w'", "runs past the end", "end offset <= 54", "found 64")),
    Case("safetensors_unknown_dtype", "safefiles", _st({"w": {**_F32x4, "dtype": "F7"}}, b"\0" * 16),
         lambda c: header(c["path"]), CheckpointError, ("{path}", "tensor 'w'", "unknown dtype", "'BF16'", "found F7")),
    Case("safetensors_dtype_not_a_string", "safefiles", _st({"w": {**_F32x4, "dtype": ["F32"]}}, b"\0" * 16),
         lambda c: header(c["path"]), CheckpointError, ("{path}", "tensor 'w'", "dtype", "found ['F32']")),
    Case("safetensors_shape_times_dtype_mismatch", "safefiles", _st({"w": {**_F32x4, "data_offsets": [0, 8]}},
                                                                    b"\0" * 8),
         lambda c: header(c["path"]), CheckpointError, ("{path}", "tensor 'w'", "shape x dtype", "expected 16",
                                                         "found 8")),
    Case("safetensors_entry_without_shape", "safefiles", _st({"w": {"dtype": "F32", "data_offsets": [0, 16]}},
                                                             b"\0" * 16),
         lambda c: header(c["path"]), CheckpointError, ("{path}", "tensor 'w'", "malformed header entry",
                                                         "dtype, shape, data_offsets", "'data_offsets'")),
    Case("safetensors_offsets_not_a_pair", "safefiles", _st({"w": {**_F32x4, "data_offsets": [0, 8, 16]}},
                                                            b"\0" * 16),
         lambda c: header(c["path"]), CheckpointError, ("{path}", "tensor 'w'", "data_offsets", "[0, 8, 16]")),
    Case("safetensors_shape_not_integers", "safefiles", _st({"w": {**_F32x4, "shape": ["four"]}}, b"\0" * 16),
         lambda c: header(c["path"]), CheckpointError, ("{path}", "tensor 'w'", "shape", "['four']")),
    Case("safetensors_negative_shape", "safefiles", _st({"w": {**_F32x4, "shape": [-1], "data_offsets": [0, 4]}},
                                                        b"\0" * 4),
         lambda c: header(c["path"]), CheckpointError, ("{path}", "tensor 'w'", "non-negative integers", "[-1]")),
    Case("safetensors_reversed_offsets", "safefiles", _st({"w": {**_F32x4, "shape": [1], "data_offsets": [4, 0]}},
                                                          b"\0" * 4),
         lambda c: header(c["path"]), CheckpointError, ("{path}", "tensor 'w'", "start <= end", "[4, 0]")),
    Case("safetensors_metadata_not_an_object", "safefiles", _st({"__metadata__": ["format", "pt"]}),
         lambda c: safefiles.safetensors_metadata(c["path"]), CheckpointError,
         ("{path}", "__metadata__", "string", "['format', 'pt']")),
    Case("safetensors_requested_key_absent", "safefiles", _st({"w": _F32x4}, b"\0" * 16),
         lambda c: safefiles.load_safetensors(c["path"], keys=["d2t"]), CheckpointError,
         ("{path}", "tensor 'd2t' not in file", "expected d2t", "1 other tensors ['w']")),
    Case("safetensors_missing_file", "safefiles", lambda tmp: {"path": str(tmp / "nope.safetensors")},
         lambda c: header(c["path"]), MissingFileError, ("{path}", "file not found", "found nothing")),
    Case("index_points_at_missing_shard", "safefiles",
         _index({"w": "model-00001-of-00002.safetensors", "v": "model-00002-of-00002.safetensors"},
                shards=["model-00001-of-00002.safetensors"]),
         lambda c: safefiles.load_state_dict(c["dir"]), MissingFileError,
         ("{path}", "shard 'model-00002-of-00002.safetensors'", "no such file", "['v']")),
    Case("index_not_json", "safefiles", _index('{"weight_map": {"w": "a.safetensors",'),
         lambda c: safefiles.shard_map(c["path"]), CheckpointError,
         ("{path}", "unreadable shard index", "JSON with 'weight_map'", "JSONDecodeError")),
    Case("index_weight_map_is_a_list", "safefiles", _index(["a.safetensors"]),
         lambda c: safefiles.shard_map(c["path"]), CheckpointError, ("{path}", "weight_map", "list")),
    Case("index_shard_name_not_a_string", "safefiles", _index({"w": 5}),
         lambda c: safefiles.shard_map(c["path"]), CheckpointError, ("{path}", "'w'", "file name", "5")),
    Case("weights_dir_without_weights", "safefiles", _bytes("README.md", b"# draft\n"),
         lambda c: safefiles.weight_files(c["tmp"]), MissingFileError,
         ("{tmp}", "no weights", "model.safetensors", "README.md")),
    Case("pt_pickle_that_would_run_code", "safefiles", _hostile("pytorch_model.bin"),
         lambda c: safefiles.load_torch_file(c["path"]), UnsafeFileError,
         ("{path}", "refused", "weights_only=True", "mkdir"), after=payload_not_run),
    Case("ckpt_gz_pickle_that_would_run_code", "safefiles", _hostile("data_0.ckpt.gz", compress=True),
         lambda c: safefiles.load_torch_file(c["path"]), UnsafeFileError,
         ("{path}", "refused", "weights_only=True", "mkdir"), after=payload_not_run),
    Case("ckpt_gz_not_gzip", "safefiles", _plain_ckpt_named_gz, lambda c: safefiles.load_torch_file(c["path"]),
         CheckpointError, ("{path}", "not a gzip file", "expected gzip data", "found other bytes")),
    Case("pt_truncated", "safefiles", _truncated_pt, lambda c: safefiles.load_torch_file(c["path"]),
         CheckpointError, ("{path}", "cannot read", "a complete torch.save file", "truncated")),
    Case("pt_cut_inside_an_opcode", "safefiles", _bytes("model.pt", b"G"),
         lambda c: safefiles.load_torch_file(c["path"]), CheckpointError,
         ("{path}", "cannot read", "a complete torch.save file", "truncated or corrupt data")),
    Case("pt_zero_length", "safefiles", _bytes("model.pt", b""), lambda c: safefiles.load_torch_file(c["path"]),
         CheckpointError, ("{path}", "a complete torch.save file", "found")),
    Case("pt_is_text", "safefiles", _bytes("model.pt", b"version https://git-lfs.github.com/spec/v1\n"),
         lambda c: safefiles.load_torch_file(c["path"]), CheckpointError,
         ("{path}", "torch", "expected", "found")),
    Case("pt_state_dict_with_non_tensors", "safefiles", _pt_with({"w": torch.ones(2), "step": 1000}),
         lambda c: safefiles.load_state_dict(c["path"]), CheckpointError,
         ("{path}", "not a state dict", "name: tensor", "['step']")),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_weight_files(case, tmp_path):
    """Each bad weight file gives a documented error naming the file, the expected and the found value."""
    run_case(case, tmp_path)


def test_payload_is_live(tmp_path):
    """The hostile fixture is real: plain pickle.load would run it (so 'did not run' above means refused)."""
    marker = tmp_path / "payload_ran"
    data = pickle.dumps(Payload(marker))
    pickle.loads(data)          # our own harmless payload: makes an empty directory in tmp_path
    assert marker.is_dir()


def test_corpus_size_and_docs_table_in_sync():
    """At least 40 cases with unique ids, and docs/bad-inputs.md is the table generated from them."""
    cases = all_cases()
    assert len(cases) >= 40
    assert len({c.id for c in cases}) == len(cases)
    assert all(c.says for c in cases)
    assert DOCS.read_text() == docs_table(), "regenerate: .venv/bin/python -m tests.test_bad_inputs"


if __name__ == "__main__":   # run as tests.test_bad_inputs, so the area files share these classes
    table = importlib.import_module("tests.test_bad_inputs")
    DOCS.write_text(table.docs_table())
    print(f"wrote {DOCS} ({len(table.all_cases())} cases)")

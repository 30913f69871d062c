"""The target loaded once per process: the same object for the same folder, device and dtype; loaded again only
when the files or the model changed; streamed when asked, when fp8, or when too big for the device."""
from __future__ import annotations

import pytest
import torch

from eagle3lib.errors import ConfigError
from eagle3lib.hidden import targets
from eagle3lib.hidden.capture import capture, load_target_model
from eagle3lib.hidden.stream import streamed
from tests.tiny_targets import save_fp8_target, save_tiny_target


@pytest.fixture
def folder(tmp_path):
    targets.clear_cache()
    yield save_tiny_target("llama", tmp_path / "t")
    targets.clear_cache()


def _count(folder) -> int:
    return targets.loads()[str(folder.resolve())]


def test_same_folder_device_and_dtype_is_the_same_model(folder):
    """Default dtype = the config's (float32 here), so None, "auto" and "float32" share one load; bfloat16 and a
    streamed copy are other entries; the cache holds MAX_CACHED models."""
    a = load_target_model(folder)
    assert load_target_model(folder, dtype="float32") is a and load_target_model(str(folder), "cpu", "auto") is a
    assert _count(folder) == 1
    b = load_target_model(folder, dtype=torch.bfloat16)
    assert b is not a and next(b.parameters()).dtype == torch.bfloat16 and _count(folder) == 2
    s = load_target_model(folder, stream=True)
    assert streamed(s) is not None and _count(folder) == 3 and len(targets._cache) == targets.MAX_CACHED
    assert load_target_model(folder, stream=True) is s


def test_a_changed_model_or_rewritten_files_load_again(folder):
    """A caller that casts the model, writes a weight in place, or rewrites the checkpoint gets a fresh copy."""
    a = load_target_model(folder)
    a.double()
    b = load_target_model(folder)
    assert b is not a and next(b.parameters()).dtype == torch.float32
    with torch.no_grad():
        b.model.norm.weight.add_(1.0)
    c = load_target_model(folder)
    assert c is not b and not torch.equal(c.model.norm.weight, b.model.norm.weight)
    ids = torch.arange(8)
    before = capture(c, ids)["final_postnorm"]
    save_tiny_target("llama", folder, seed=1)
    d = load_target_model(folder)
    assert d is not c and not torch.equal(capture(d, ids)["final_postnorm"], before)
    assert _count(folder) == 4


def test_stream_mode_from_the_argument_the_environment_fp8_and_size(folder, tmp_path, monkeypatch):
    """$EAGLE3LIB_TARGET_LOAD forces full / stream; auto streams an fp8 checkpoint and a target bigger than half the
    device's memory; an unknown mode is a ConfigError."""
    monkeypatch.setenv(targets.ENV_VAR, "stream")
    assert streamed(load_target_model(folder)) is not None
    assert streamed(load_target_model(folder, stream=False)) is None
    monkeypatch.setenv(targets.ENV_VAR, "auto")
    assert streamed(load_target_model(folder)) is None
    monkeypatch.setattr(targets, "device_memory", lambda device: 2 * targets.weights_nbytes(folder) - 2)
    targets.clear_cache()
    assert streamed(load_target_model(folder)) is not None
    monkeypatch.undo()
    fp8 = save_fp8_target(save_tiny_target("deepseek_v3", tmp_path / "v3"), tmp_path / "fp8", block=(16, 16))
    assert streamed(load_target_model(fp8)) is not None
    monkeypatch.setenv(targets.ENV_VAR, "lazy")
    with pytest.raises(ConfigError, match="unknown target load mode"):
        load_target_model(folder)


def test_a_full_load_opens_neither_config_again(folder):
    """Inside a case the target's config.json is read once (the case's parse, handed to transformers), and no
    generation_config.json is read at all (the target captures, it never generates): transformers' own load opened
    config.json a second time where the target ships no generation_config.json, and generation_config.json where it
    does."""
    import json as _json
    from eagle3lib import opened
    from eagle3lib.once import case_reads
    (folder / "generation_config.json").write_text(_json.dumps({"eos_token_id": 2}))
    with opened.counting() as opens, case_reads():
        model = load_target_model(folder)
    assert opens[str((folder / "config.json").resolve())] == 1
    assert str((folder / "generation_config.json").resolve()) not in opens
    assert model.generation_config.eos_token_id == model.config.eos_token_id     # made from the model's config

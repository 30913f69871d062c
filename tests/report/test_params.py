"""The parameters file's keys (eagle3lib.report.params.unknown_keys): a key no notebook takes is a problem naming
the closest keys it may have meant; the shipped parameters files hold none."""
from __future__ import annotations

from pathlib import Path

import pytest

from eagle3lib.report import params, runner

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = runner.discover_notebooks(ROOT / "notebooks")
DECLARED = {p.stem: params.declared_parameters(params.read_source(p)) for p in NOTEBOOKS}


def test_a_typo_is_an_unknown_key_with_did_you_mean():
    common = {"traindata": "/x", "device": "cpu", "vllm_demo": ["healthy"]}
    sections = {"02_training_sample_replay": {"n_sample": 4, "n_samples": 8, "launch": "vllm serve m"}}
    found = params.unknown_keys("my.yaml", common, sections, DECLARED)
    assert [(p.param, p.notebooks) for p in found] == [("traindata", ("top level",)), (
        "n_sample", ("section 02_training_sample_replay",)), ("launch", ("section 02_training_sample_replay",))]
    assert found[0].expected.startswith("did you mean 'train_data'") and found[1].expected == \
        "did you mean 'n_samples'?"
    assert found[2].expected == "move it to 01_config_override_discovery, or to the top level"
    assert "unknown key 'traindata' (top level of my.yaml)" in found[0].message
    assert "'traindata' (top level): did you mean 'train_data'" in params.keys_text(found)
    assert params.unknown_keys("x", {"zzzzqqq": 1}, {}, DECLARED)[0].expected.startswith("a key the notebooks take")


@pytest.mark.parametrize("path", sorted((ROOT / "params").glob("*.yaml")), ids=lambda p: p.name)
def test_the_shipped_parameters_files_hold_no_unknown_key(path):
    common, sections = params.load_params(path, list(DECLARED))
    assert params.unknown_keys(path, common, sections, DECLARED) == []

"""Check 14 (what the engine can run): a draft config value the engine facts say vLLM / SGLang refuse."""
from __future__ import annotations

from eagle3lib.checks.inputs import read_artifacts
from eagle3lib.checks.runnable import check_runnable
from tests.checks.world import draft_raw, statuses, write_draft, write_target

VLLM = "vllm serve t --speculative-config '{\"method\": \"eagle3\", \"model\": \"d\", \"num_speculative_tokens\": 3}'"


def _f(tmp_path, launch=None, **fields):
    raw = {**draft_raw(), **fields}
    return check_runnable(read_artifacts(draft=write_draft(tmp_path, raw), target=write_target(tmp_path),
                                         launch=launch))


def test_silu_is_what_every_engine_runs(tmp_path):
    assert statuses(_f(tmp_path), "engine_cannot_run") == {"ruled out"}


def test_another_activation_is_suspected_with_the_engines_own_limit(tmp_path):
    (f,) = _f(tmp_path, VLLM, hidden_act="gelu")
    assert f.status == "suspected" and f.evidence["engines"] == ["vllm"] and not f.needs
    assert "llama.py:112-114" in f.source and "set hidden_act to silu" in f.fix
    (g,) = _f(tmp_path, hidden_act="gelu")            # no launch: both engines, and the launch is what is missing
    assert g.evidence["engines"] == ["sglang", "vllm"] and "launch" in g.needs


def test_no_draft_is_not_checked(tmp_path):
    (f,) = check_runnable(read_artifacts(target=write_target(tmp_path)))
    assert f.status == "not checked"
